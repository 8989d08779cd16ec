"""`distbench schedule`: a named study from experiments/ as a nightly sweep, optionally followed by
`distbench compare` against a baseline sweep (the job fails when a regression is flagged).

With `scrontab` (Slurm's crontab) on PATH it installs the entry into the user's scrontab, in a
block between two marker comments named after the schedule, so running it again replaces that
block and leaves every other line alone. Without scrontab, or with --dry-run, it prints the
crontab line and the one-shot `sbatch --begin=...` for the next occurrence instead. The schedule
is checked, and its next run found, with croniter, within what both cron and scrontab read.

    distbench schedule experiment=strategy_grid --cron "0 2 * * *" --dry-run
    distbench schedule experiment=strategy_grid --cron @daily --baseline previous
    distbench schedule experiment=zero_stages --cron "30 1 * * 1-5" world_size=4 \\
        --baseline 0123456789abcdef0123456789abcdef --slurm-option=--gres=gpu:4
    python -c "from distbench.tools.schedule import parse_cron; print(parse_cron('0 2 * * *'))"
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from croniter import CroniterBadDateError, croniter

from distbench.tracking.mlflow_store import RUN_ID
from distbench.tracking.secrets_mask import mask_text

# name, what it takes: the five fields that cron and Slurm's scrontab both read
FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat (0 and 7 are Sunday)"),
)
# What both cron and scrontab (Slurm's src/scrontab/parse.c, cronspec_to_bitstring) take in
# place of the five fields. @reboot is cron's only other one: scrontab refuses it.
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_HELP = (
    "5 fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * *', or one of "
    + ", ".join(MACROS)
)
# Per field: numbers, '*', ',', '-', '/' (and 3-letter names in month and day-of-week). What
# croniter also reads (L, W, #, ?, H, seconds, years) neither cron nor scrontab does.
PORTABLE = re.compile(r"^[0-9*,/-]+$")
PORTABLE_NAMED = re.compile(r"^([0-9*,/-]|[A-Za-z]{3})+$")
BACKWARDS = re.compile(r"(\d+)-(\d+)")
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
MARKER = "# distbench schedule {name} {edge}"


@dataclass(frozen=True)
class Cron:
    """A checked cron schedule, as cron and scrontab read it: 5 fields or a macro (@daily)."""

    expression: str


def _field_problem(index: int, text: str) -> str | None:
    """Why field `index` (0 = minute) is refused, or None: croniter's reading of it alone,
    then what cron and scrontab would not take."""
    name, allowed = FIELDS[index]
    probe = ["*"] * len(FIELDS)
    probe[index] = text
    pattern = PORTABLE_NAMED if name in ("month", "day-of-week") else PORTABLE
    backwards = [m.group(0) for m in BACKWARDS.finditer(text) if int(m[1]) > int(m[2])]
    if not pattern.match(text) or not croniter.is_valid(" ".join(probe)):
        return f"{name} {text!r} is not valid; it takes {allowed}, '*', a-b, lists, /step"
    if backwards:
        return f"{name} range {backwards[0]!r} runs backwards"
    return None


def parse_cron(expression: str) -> Cron:
    """Check a cron schedule with croniter, within what both cron and Slurm's scrontab read: 5
    fields (numbers, names, `*`, `a-b`, lists, `/step`) or a macro of MACROS. ValueError, one
    line naming the bad field or value, otherwise."""
    text = " ".join(expression.split())
    if text.lower() == "@reboot":
        raise ValueError(
            f"cron {expression!r}: @reboot runs when a machine boots, which Slurm's scrontab "
            f"refuses and no next run can be told from; use one of {', '.join(MACROS)}"
        )
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise ValueError(f"cron {expression!r} is no macro; use one of {', '.join(MACROS)}")
        return Cron(text.lower())
    fields = text.split()
    if len(fields) != len(FIELDS):
        raise ValueError(f"cron {expression!r} has {len(fields)} field(s); need {CRON_HELP}")
    for index, field in enumerate(fields):
        problem = _field_problem(index, field)
        if problem:
            raise ValueError(f"cron {expression!r}: {problem}")
    if not croniter.is_valid(text):  # each field alone was fine: their combination is not
        raise ValueError(f"cron {expression!r} is not valid; need {CRON_HELP}")
    return Cron(text)


def scrontab_problem(cron: Cron) -> str | None:
    """What Slurm's scrontab refuses in a schedule that cron takes (src/scrontab/parse.c): a
    month or weekday name only stands alone (not `mon-fri` or `jan,jul`), and a step is 2 or
    more. None when scrontab takes it."""
    fields = cron.expression.split()
    for (name, _), text in zip(FIELDS, fields if len(fields) == len(FIELDS) else [], strict=False):
        if re.search(r"[A-Za-z]", text) and not re.fullmatch(r"[A-Za-z]{3}", text):
            return f"scrontab reads a {name} name only alone, not {text!r}; use numbers"
        if re.search(r"/0*1(\D|$)", text):
            return f"scrontab refuses the {name} step in {text!r} (a step is 2 or more)"
    return None


def next_occurrence(cron: Cron, after: dt.datetime) -> dt.datetime:
    """The first minute strictly after `after` that the schedule matches (croniter; a day of
    month and a day of week that are both restricted match either, as cron does)."""
    try:
        return croniter(cron.expression, after.replace(second=0, microsecond=0)).get_next(
            dt.datetime
        )
    except CroniterBadDateError as exc:
        raise ValueError(
            f"cron {cron.expression!r} never matches a real date (e.g. 31 February)"
        ) from exc


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"schedule name {name!r} may hold only letters, digits, '_', '.', '-'")
    return name


def split_overrides(args: Sequence[str]) -> tuple[str, list[str]]:
    """(experiment name, the other overrides) from `experiment=NAME` (or `experiments=NAME`)
    among the positional arguments."""
    names = [
        a.split("=", 1)[1] for a in args if a.split("=", 1)[0] in ("experiment", "experiments")
    ]
    rest = [a for a in args if a.split("=", 1)[0] not in ("experiment", "experiments")]
    if len(names) != 1 or not names[0]:
        raise ValueError(
            "name exactly one study as experiment=NAME (a file experiments/NAME.yaml), "
            f"got {len(names)}"
        )
    return names[0], rest


def check_experiment(project: Path, name: str) -> Path:
    path = project / "experiments" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (project / "experiments").glob("*.yaml"))
        raise ValueError(f"experiment={name}: no {path}; known: {', '.join(known) or 'none'}")
    return path


def job_command(
    project: Path,
    experiment: str,
    overrides: Sequence[str] = (),
    baseline: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """The shell command of one scheduled run: the sweep, then (with a baseline: a parent run
    id, or "previous" for the sweep before it) the comparison of the newest sweep against it,
    whose exit status 1 fails the job on a regression."""
    if baseline is not None and baseline != "previous" and not RUN_ID.match(baseline):
        raise ValueError(
            f"--baseline {baseline!r} is not an MLflow run id (32 hex digits) or 'previous'"
        )
    if tracking_uri and mask_text(tracking_uri) != tracking_uri:
        raise ValueError(
            f"--tracking-uri {mask_text(tracking_uri)!r} has a password in it, which would be "
            "stored in the crontab; use a server that needs none, or MLflow's own env settings"
        )
    parts = []
    if tracking_uri:
        parts.append(f"export MLFLOW_TRACKING_URI={shlex.quote(tracking_uri)}")
    parts.append(f"cd {shlex.quote(str(project))}")
    sweep = [".venv/bin/python", "run.py", "-m", f"experiments={experiment}", *overrides]
    parts.append(" ".join(shlex.quote(a) for a in sweep))
    if baseline:
        parts.append(f".venv/bin/distbench compare --baseline {baseline} --candidate latest")
    command = " && ".join(parts)
    if "%" in command:  # cron turns % into a newline
        raise ValueError(f"'%' in {command!r}: cron would turn it into a newline; drop it")
    if "\n" in command:
        raise ValueError("an override holds a newline; a crontab entry is one line")
    return command


def log_path(project: Path, name: str) -> Path:
    return project / "multirun" / "schedule" / f"{name}.log"


def crontab_line(cron: Cron, command: str, log: Path) -> str:
    """One line for a plain crontab (the output of every step appended to `log`)."""
    return f"{cron.expression} ( {command} ) >> {shlex.quote(str(log))} 2>&1"


def scrontab_block(
    name: str, cron: Cron, command: str, log: Path, slurm_options: Sequence[str] = ()
) -> str:
    """The schedule's block of a scrontab: markers, #SCRON options, the entry."""
    options = [f"--job-name=distbench-{name}", f"--output={log}", "--open-mode=append"]
    lines = [MARKER.format(name=name, edge="BEGIN") + " (re-run `distbench schedule` to replace)"]
    lines += [f"#SCRON {option}" for option in (*options, *slurm_options)]
    lines += [f"{cron.expression} {command}", MARKER.format(name=name, edge="END")]
    return "\n".join(lines) + "\n"


def merge_crontab(existing: str, name: str, block: str) -> str:
    """`existing` without this schedule's old block (if any), with `block` appended. Other
    lines, other schedules' blocks included, are kept as they are. ValueError when a BEGIN
    marker of this schedule has no END (fix it with `scrontab -e`)."""
    begin = MARKER.format(name=name, edge="BEGIN")
    end = MARKER.format(name=name, edge="END")
    kept: list[str] = []
    inside = False
    for line in existing.splitlines():
        if line == begin or line.startswith(begin + " "):
            inside = True
        elif inside and line == end:
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise ValueError(f"the crontab has {begin!r} but no {end!r}; fix it with scrontab -e")
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join(kept)
    return (text + "\n" if text else "") + block


def check_slurm_options(options: Sequence[str]) -> list[str]:
    for option in options:
        if not option.startswith("-") or "\n" in option or "%" in option:
            raise ValueError(
                f"--slurm-option {option!r} is not one sbatch option like --gres=gpu:4"
            )
    return list(options)


def sbatch_command(
    name: str, command: str, begin: dt.datetime, log: Path, slurm_options: Sequence[str] = ()
) -> str:
    """The one-shot sbatch equivalent of the next occurrence."""
    args = [
        "sbatch",
        f"--begin={begin.strftime('%Y-%m-%dT%H:%M:%S')}",
        f"--job-name=distbench-{name}",
        f"--output={log}",
        "--open-mode=append",
        *slurm_options,
        f"--wrap={command}",
    ]
    return " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------------- scrontab I/O


def read_scrontab(scrontab: str = "scrontab") -> str:
    """The user's current scrontab ('' when they have none). RuntimeError when scrontab fails
    otherwise (e.g. disabled on this cluster)."""
    listed = subprocess.run([scrontab, "-l"], capture_output=True, text=True, timeout=60)
    if listed.returncode == 0:
        return listed.stdout
    message = (listed.stderr or listed.stdout).strip()
    if "no crontab" in message.lower():
        return ""
    raise RuntimeError(f"`{scrontab} -l` failed: {message.splitlines()[0] if message else '?'}")


def install_scrontab(name: str, block: str, scrontab: str = "scrontab") -> str:
    """Replace this schedule's block in the user's scrontab; returns the installed text."""
    import tempfile

    text = merge_crontab(read_scrontab(scrontab), name, block)
    with tempfile.NamedTemporaryFile("w", suffix=".scrontab") as file:
        file.write(text)
        file.flush()
        done = subprocess.run(
            [scrontab, file.name], capture_output=True, text=True, timeout=60, check=False
        )
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip()
        raise RuntimeError(
            f"`{scrontab} FILE` failed: {message.splitlines()[0] if message else '?'}"
        )
    return text
