"""`distbench summary`: reprint a sweep's comparison table (tools/summary.py), from its dir's
own files offline, or from MLflow; a sweep still running shows its running jobs and how many
are pending.

    distbench summary [multirun/DAY/TIME | latest | previous | RUN_ID | RUN_NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distbench.cli.options import add_store_options, load_sweep, store_uri


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("summary", help="print a sweep's comparison table")
    parser.add_argument(
        "sweep",
        nargs="?",
        default="latest",
        help="a sweep dir (multirun/DAY/TIME: read offline from its files), or from MLflow "
        "'latest' (default), 'previous', a sweep's parent run id or run name",
    )
    add_store_options(parser, experiment_help="where names are looked up (default distbench)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """A sweep dir's table from its own files, offline; any other form of a sweep (report's)
    from MLflow: from the sweep's dir when it is on this machine, else from its child runs."""
    from distbench.tools.summary import load_outcomes, outcomes_of_runs, print_summary
    from distbench.tools.sweep_state import pending_jobs

    if Path(args.sweep).is_dir():
        outcomes = load_outcomes(Path(args.sweep), running=True)
        if not outcomes:
            print(f"distbench: no outcome.json under {args.sweep}", file=sys.stderr)
            return 2
        print_summary(outcomes, title=str(args.sweep), pending=pending_jobs(Path(args.sweep)))
        return 0
    uri = store_uri(args)
    selection = load_sweep("summary", uri, args.sweep, args.experiment)
    if selection is None:
        return 2
    recorded = Path(selection.sweep_dir) if selection.sweep_dir else None
    here = recorded is not None and recorded.is_dir()
    outcomes = load_outcomes(recorded, running=True) if here else []
    pending = pending_jobs(recorded) if here else None
    outcomes = outcomes or outcomes_of_runs(selection.runs, selection.swept)
    print_summary(outcomes, title=selection.title, pending=pending)
    return 0
