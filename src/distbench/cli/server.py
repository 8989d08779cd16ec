"""`distbench server`: a team's MLflow tracking server in the foreground (tools/server.py),
on PostgreSQL or sqlite; the password from a file, $PGPASSWORD or ~/.pgpass, never the URI.

    distbench server --backend postgresql://mlflow@db:5432/mlflow [--host 0.0.0.0]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from distbench.cli.options import add_listen_options


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("server", help="a team's MLflow tracking server, in the foreground")
    parser.add_argument(
        "--backend",
        help="postgresql://user@host:port/db (password: --password-file, $PGPASSWORD or "
        "~/.pgpass, never in the URI) or sqlite:///path; default sqlite:///ROOT/mlflow.db",
    )
    parser.add_argument("--root", default="mlflow-server", help="default ./mlflow-server")
    parser.add_argument("--artifacts-destination", help="artifact root, default ROOT/artifacts")
    add_listen_options(
        parser,
        host_help="default 127.0.0.1; 0.0.0.0 to serve other machines",
        workers=2,
        workers_help="the server's worker processes (mlflow server --workers; default 2)",
    )
    parser.add_argument("--password-file", help="a file whose first line is the password")
    parser.add_argument("--allowed-hosts", help="passed to mlflow server (Host headers it accepts)")
    parser.add_argument(
        "--log-file", help="append the server's output here (default: the terminal)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distbench.tools import server

    try:
        plan = server.plan_server(
            args.backend,
            Path(args.root),
            Path(args.artifacts_destination) if args.artifacts_destination else None,
            args.host,
            args.port,
            args.workers,
            os.environ,
            Path(args.password_file) if args.password_file else None,
            args.allowed_hosts,
        )
    except ValueError as exc:
        print(f"distbench: server: {exc}", file=sys.stderr)
        return 2
    if args.password_file:
        warning = server.warn_if_readable_by_others(Path(args.password_file))
        if warning:
            print(warning, file=sys.stderr)
    return server.run_foreground(plan, args.timeout_s, args.log_file)
