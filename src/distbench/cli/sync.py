"""`distbench sync`: upload a sweep's spooled runs that did not land in the store
(tracking/spool.py), and record the jobs whose orchestrator died (orphans.py).

    distbench sync multirun/DAY/TIME [--tracking-uri URI]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distbench.cli.options import SQLITE_URI_HELP, add_store_options, one_line, store_uri


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sync", help="upload a sweep's spooled runs that did not land")
    parser.add_argument("sweep_dir", help="the sweep's dir (multirun/DAY/TIME) or one job's dir")
    add_store_options(parser, uri_help=SQLITE_URI_HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every spooled run is in the store; 1 when some payload could not be read
    (each named, the others uploaded); 2 (one line) for no such dir or an unusable store."""
    from distbench.compose.composer import project_dir
    from distbench.orphans import record_orphans
    from distbench.tracking.mlflow_store import check_uri
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.spool import sync_sweep

    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        print(f"distbench: sync: no such directory: {sweep_dir}", file=sys.stderr)
        return 2
    uri = store_uri(args)
    try:
        check_uri(uri)
        lost = record_orphans(sweep_dir, uri, project_dir())
        result = sync_sweep(sweep_dir, uri, sweep_lost=bool(lost))
    except Exception as exc:  # a store down or refused: one line, the runs stay spooled
        print(
            f"distbench: sync: {type(exc).__name__}: {one_line(exc)} (runs stay spooled)",
            file=sys.stderr,
        )
        return 2
    for line in result["unreadable"]:
        print(f"distbench: sync: skipped {line}", file=sys.stderr)
    closed = "; the sweep's parent run ended" if result["parent_closed"] else ""
    if lost:
        closed += f"; {len(lost)} job(s) whose orchestrator died recorded as orchestrator_lost"
    print(
        f"distbench sync {args.sweep_dir} → {mask_text(uri)}: {result['uploaded']} uploaded, "
        f"{result['already_in_store']} already in the store{closed}"
    )
    if result["unreadable"]:
        print(
            f"distbench: sync: {len(result['unreadable'])} spooled run(s) unreadable, not uploaded",
            file=sys.stderr,
        )
        return 1
    return 0
