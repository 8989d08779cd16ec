"""`distbench schedule`: a study from experiments/ as a nightly sweep (tools/schedule.py):
installed in your scrontab where Slurm has one, else printed as a crontab line, an sbatch
command and a scrontab block.

    distbench schedule experiment=strategy_grid --cron "@daily" [--baseline previous] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distbench.cli.options import add_store_options

if TYPE_CHECKING:
    import datetime as dt
    from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "schedule", help="a study from experiments/ as a nightly sweep (scrontab or a cron line)"
    )
    add_schedule_options(parser)
    parser.set_defaults(func=run)
    parser.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="experiment=NAME [OVERRIDE ...]",
        help="the study (experiments/NAME.yaml) and Hydra overrides as for run.py",
    )


def add_schedule_options(parser: argparse.ArgumentParser, cron_required: bool = False) -> None:
    help_cron = '5 fields, e.g. "0 2 * * *" (02:00 daily), or a macro such as "@daily"'
    parser.add_argument("--cron", required=cron_required, help=help_cron)
    parser.add_argument(
        "--baseline",
        help="compare each night's sweep against this sweep's parent run id, or against "
        "'previous' (the sweep before it); default: no comparison",
    )
    parser.add_argument("--name", help="the schedule's name (default: the experiment's)")
    add_store_options(parser, uri_help="default: $MLFLOW_TRACKING_URI when set")
    parser.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        help="an sbatch option for the job, e.g. --slurm-option=--gres=gpu:4 (repeatable)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print, install nothing")


@dataclass(frozen=True)
class Nightly:
    """A checked schedule: its name, cron, the job's command and log, its scrontab block and
    the next time it runs."""

    name: str
    cron: Any
    command: str
    log: Path
    block: str
    begin: dt.datetime
    slurm_options: list[str]


def run(args: argparse.Namespace) -> int:
    """Exit 0 once installed or printed; 2 (one line) for a schedule that cannot be made or that
    scrontab would refuse; 1 when scrontab itself failed."""
    import shutil

    args = _reparse(args)
    try:
        nightly = _checked(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"distbench: schedule: {exc}", file=sys.stderr)
        return 2
    nightly.log.parent.mkdir(parents=True, exist_ok=True)  # cron and Slurm do not create it
    scrontab = shutil.which("scrontab")
    if scrontab and not args.dry_run:
        return _install(nightly, scrontab)
    _print_instead(nightly, "--dry-run" if args.dry_run else "no scrontab on PATH")
    return 0


def _reparse(args: argparse.Namespace) -> argparse.Namespace:
    """Options may come between the overrides: parse what argparse left in `rest` again."""
    known = {k: v for k, v in vars(args).items() if k not in ("rest", "func", "command")}
    again = argparse.ArgumentParser(prog="distbench schedule")
    add_schedule_options(again, cron_required=not known.get("cron"))
    again.add_argument("overrides", nargs="*")
    again.set_defaults(**known)
    return again.parse_intermixed_args(args.rest)


def _checked(args: argparse.Namespace) -> Nightly:
    """The schedule the options describe, each part checked (ValueError, FileNotFoundError)."""
    import datetime as dt

    from distbench.compose.composer import project_dir
    from distbench.tools import schedule

    project = project_dir()
    cron = schedule.parse_cron(args.cron)
    experiment, overrides = schedule.split_overrides(args.overrides)
    schedule.check_experiment(project, experiment)
    name = schedule.check_name(args.name or experiment)
    slurm_options = schedule.check_slurm_options(args.slurm_option)
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    command = schedule.job_command(project, experiment, overrides, args.baseline, uri)
    log = schedule.log_path(project, name)
    block = schedule.scrontab_block(name, cron, command, log, slurm_options)
    begin = schedule.next_occurrence(cron, dt.datetime.now())
    return Nightly(name, cron, command, log, block, begin, slurm_options)


def _install(nightly: Nightly, scrontab: str) -> int:
    from distbench.tools import schedule

    refused = schedule.scrontab_problem(nightly.cron)
    if refused:
        print(f"distbench: schedule: cron {nightly.cron.expression!r}: {refused}", file=sys.stderr)
        return 2
    try:
        schedule.install_scrontab(nightly.name, nightly.block, scrontab)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"distbench: schedule: {exc}", file=sys.stderr)
        return 1
    name, expression = nightly.name, nightly.cron.expression
    print(f"distbench: schedule {name} installed in your scrontab ({expression}):")
    print(nightly.block, end="")
    print(f"distbench: next run {nightly.begin:%Y-%m-%d %H:%M}; output appended to {nightly.log}")
    return 0


def _print_instead(nightly: Nightly, why: str) -> None:
    """What to install by hand: a crontab line, a one-off sbatch, a scrontab block."""
    from distbench.tools import schedule

    name, cron, command, log = nightly.name, nightly.cron, nightly.command, nightly.log
    print(f"distbench: schedule {name} ({why}): nothing installed. For crontab -e:")
    print(schedule.crontab_line(cron, command, log))
    print(f"Or once, at the next occurrence ({nightly.begin:%Y-%m-%d %H:%M}), with Slurm:")
    print(schedule.sbatch_command(name, command, nightly.begin, log, nightly.slurm_options))
    print("Or as a scrontab block (scrontab -e):")
    print(nightly.block, end="")
