"""`distbench ui`: the MLflow UI on the configured store, on 127.0.0.1 (tools/server.py).

distbench ui [--port 5000] [--workers 1] [--tracking-uri URI] [--experiment NAME]
"""

from __future__ import annotations

import argparse
import sys

from distbench.cli.options import (
    SQLITE_URI_HELP,
    add_listen_options,
    add_store_options,
    store_uri,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("ui", help="start the MLflow UI on the configured store (127.0.0.1)")
    add_store_options(
        parser,
        uri_help=SQLITE_URI_HELP,
        experiment_help="whose runs page to print (default distbench)",
    )
    add_listen_options(
        parser,
        host_help="the interface to bind (default 127.0.0.1: this host)",
        workers=1,
        workers_help="the UI's worker processes (mlflow ui --workers; default 1: one browser)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The MLflow UI on a local store, in the foreground (tools/server.py starts it and waits
    for /health before printing the URL); a tracking server's URL is only printed."""
    from distbench.tools import server
    from distbench.tracking.dashboard import training_url
    from distbench.tracking.mlflow_store import ensure_experiment, ui_url
    from distbench.tracking.secrets_mask import mask_text

    uri = store_uri(args)
    try:
        plan = server.plan_ui(uri, args.host, args.port, args.workers)
    except ValueError as exc:
        print(f"distbench: ui: {exc}", file=sys.stderr)
        return 2
    experiment_id = ensure_experiment(uri, args.experiment)
    if uri.startswith(("http://", "https://")):  # a tracking server serves its own UI
        url = training_url(ui_url(uri, experiment_id, args.port))
        print(f"MLflow UI for {mask_text(uri)}: {url}")
        print(f"distbench: {server.MODEL_TRAINING_HINT}", flush=True)
        return 0
    url = training_url(ui_url(plan.url, experiment_id, args.port))  # runs page, training view
    print(
        f"distbench: starting the MLflow UI for {mask_text(uri)} (port {args.port}) ...", flush=True
    )
    return server.run_foreground(
        plan, args.timeout_s, lines=server.ui_lines(plan, url), command="ui"
    )
