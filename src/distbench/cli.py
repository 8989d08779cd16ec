"""The `distbench` console script: tools around the runs that run.py makes.

distbench ui [--port 5000]            # the MLflow UI on the configured store, on 127.0.0.1
distbench summary multirun/DAY/TIME   # reprint a sweep's comparison table
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace


def _ui(args: argparse.Namespace) -> int:
    from distbench.tracking import ensure_experiment, resolve_tracking_uri, ui_url

    tracking = SimpleNamespace(backend="sqlite", uri=args.tracking_uri)
    uri = resolve_tracking_uri(tracking, Path.cwd())
    experiment_id = ensure_experiment(uri, args.experiment)
    print(f"MLflow UI for {uri}: {ui_url(uri, experiment_id, args.port)}", flush=True)
    if uri.startswith(("http://", "https://")):
        return 0  # a tracking server serves its own UI
    cmd = [
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        args.host,
        "--port",
        str(args.port),
    ]
    os.execvp(sys.executable, [sys.executable, "-m", "mlflow", *cmd[1:]])
    return 0  # not reached


def _summary(args: argparse.Namespace) -> int:
    from distbench.summary import load_outcomes, print_summary

    outcomes = load_outcomes(Path(args.sweep_dir))
    if not outcomes:
        print(f"distbench: no outcome.json under {args.sweep_dir}", file=sys.stderr)
        return 2
    print_summary(outcomes, title=str(args.sweep_dir))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="distbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ui = sub.add_parser("ui", help="start the MLflow UI on the configured store (127.0.0.1)")
    ui.add_argument(
        "--tracking-uri",
        default=None,
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db",
    )
    ui.add_argument("--experiment", default="distbench")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.set_defaults(func=_ui)
    summary = sub.add_parser("summary", help="print a sweep's comparison table")
    summary.add_argument("sweep_dir")
    summary.set_defaults(func=_summary)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
