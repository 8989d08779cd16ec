"""`distbench sync`: upload a sweep's spooled runs that did not land in the store
(tracking/spool.py), record the jobs whose orchestrator died (orphans.py), and end the runs a
dead sweep left RUNNING (tracking/lost.py).

    distbench sync multirun/DAY/TIME [--tracking-uri URI]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from distbench.cli.options import SQLITE_URI_HELP, add_store_options, one_line, store_uri


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sync", help="upload a sweep's spooled runs that did not land")
    parser.add_argument("sweep_dir", help="the sweep's dir (multirun/DAY/TIME) or one job's dir")
    add_store_options(parser, uri_help=SQLITE_URI_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every spooled run is in the store; 1 when some payload could not be read
    (each named, the others uploaded); 2 (one line) for no such dir, a dir with nothing to sync
    (no spooled run, no job whose orchestrator died) or an unusable store."""
    from distbench.cli.sync_dirs import nothing_to_sync
    from distbench.tracking.secrets_mask import mask_text

    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        print(f"distbench: sync: no such directory: {sweep_dir}", file=sys.stderr)
        return 2
    if nothing_to_sync(sweep_dir):
        print(
            f"distbench: sync: nothing to sync in {sweep_dir}: no spooled run (*/mlflow_run.json)"
            " and no job whose orchestrator died",
            file=sys.stderr,
        )
        return 2
    uri = store_uri(args)
    try:
        result = _sync(sweep_dir, uri)
    except Exception as exc:  # a store down or refused: one line, the runs stay spooled
        print(
            f"distbench: sync: {type(exc).__name__}: {one_line(exc)} (runs stay spooled)",
            file=sys.stderr,
        )
        return 2
    for line in result["unreadable"]:
        print(f"distbench: sync: skipped {line}", file=sys.stderr)
    print(f"distbench sync {args.sweep_dir} → {mask_text(uri)}: {_said(result)}")
    if result["unreadable"]:
        print(
            f"distbench: sync: {len(result['unreadable'])} spooled run(s) unreadable, not uploaded",
            file=sys.stderr,
        )
        return 1
    return 0


def _sync(sweep_dir: Path, uri: str) -> dict[str, Any]:
    """Write back the outcomes a job's end left only in its spool or in the store, record the
    orphans, upload, then end what dead sweeps of this dir left RUNNING."""
    from distbench.cli.sync_dirs import experiment_names, restore_logged_outcomes
    from distbench.compose.composer import project_dir
    from distbench.orphans import record_orphans
    from distbench.tracking.job_outcomes import restore_spooled_outcomes
    from distbench.tracking.lost import close_dead_sweeps
    from distbench.tracking.mlflow_store import check_uri, client, retry
    from distbench.tracking.spool import sync_sweep

    check_uri(uri)
    restore_spooled_outcomes(sweep_dir.resolve())  # killed after its spool: not an orphan
    restored = restore_logged_outcomes(sweep_dir, uri)  # logged directly: not an orphan
    lost = record_orphans(sweep_dir, uri, project_dir())
    result = sync_sweep(sweep_dir, uri, sweep_lost=bool(lost))
    ended = 0
    for name in sorted(experiment_names(sweep_dir)):
        experiment = retry(lambda n=name: client(uri).get_experiment_by_name(n), tracking_uri=uri)
        if experiment is not None:
            ended += close_dead_sweeps(uri, experiment.experiment_id, sweep_dir, "distbench sync")
    return {**result, "lost": len(lost), "restored": len(restored), "dead_runs_ended": ended}


def _said(result: dict[str, Any]) -> str:
    """The summary line's counts and what else was done."""
    said = f"{result['uploaded']} uploaded, {result['already_in_store']} already in the store"
    if result["parent_closed"]:
        said += "; the sweep's parent run ended"
    if result["lost"]:
        said += f"; {result['lost']} job(s) whose orchestrator died recorded as orchestrator_lost"
    if result["restored"]:
        said += f"; {result['restored']} outcome.json written back from their logged runs"
    if result["dead_runs_ended"]:
        said += f"; {result['dead_runs_ended']} run(s) a dead sweep left RUNNING ended"
    return said
