"""Options and helpers that several `distbench` commands share: the store a command reads
(`--tracking-uri`, `--experiment`), how `ui` and `server` listen, the Hydra overrides of
`plan` and `resolve`, and one-line errors. Each command's module (cli/<command>.py) adds them
to its parser with the `add_*` functions here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI starts fast: report (pandas, mlflow) is imported by the commands
    from distbench.tools.report import Selection

# --tracking-uri's help: where the command reads the store, and where ui / sync name the
# sqlite file they open
STORE_URI_HELP = "default: $MLFLOW_TRACKING_URI, else ./mlflow.db"
SQLITE_URI_HELP = "default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db"


def add_store_options(
    parser: argparse.ArgumentParser,
    *,
    uri_help: str = STORE_URI_HELP,
    experiment_help: str | None = None,
    experiment: str | None = "distbench",
) -> None:
    """--experiment (where `experiment_help` is given; default `experiment`) and --tracking-uri:
    the MLflow store a command reads or writes, and the experiment in it."""
    if experiment_help is not None:
        parser.add_argument("--experiment", default=experiment, help=experiment_help)
    parser.add_argument("--tracking-uri", default=None, help=uri_help)


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """The Hydra overrides of a command that composes a config as run.py does."""
    parser.add_argument("overrides", nargs="*", help="Hydra overrides as for run.py")


def add_listen_options(
    parser: argparse.ArgumentParser, host_help: str, workers: int, workers_help: str
) -> None:
    """--host, --port, --workers, --timeout-s: how `ui` and `server` bind and wait for /health."""
    parser.add_argument("--host", default="127.0.0.1", help=host_help)
    parser.add_argument("--port", type=int, default=5000, help="default 5000")
    parser.add_argument("--workers", type=int, default=workers, help=workers_help)
    parser.add_argument(
        "--timeout-s", type=float, default=180.0, help="wait for /health this long (default 180)"
    )


def one_line(exc: BaseException) -> str:
    """An exception as one line, any URI password in it masked."""
    from distbench.tracking.secrets_mask import mask_text

    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)[:500]


def store_uri(args: argparse.Namespace) -> str:
    """The store a command reads: --tracking-uri, else $MLFLOW_TRACKING_URI, else ./mlflow.db."""
    from distbench.compose.schema import TrackingConfig
    from distbench.tracking.sweep import resolve_tracking_uri

    return resolve_tracking_uri(TrackingConfig(uri=args.tracking_uri), Path.cwd())


def load_sweep(
    command: str, uri: str, sweep: str | None, experiment: str | None
) -> Selection | None:
    """report.load_runs' selection of a sweep, or None after a one-line error on stderr."""
    from distbench.tools import report
    from distbench.tracking.mlflow_store import check_uri

    try:
        check_uri(uri)
        return report.load_runs(uri, sweep, experiment)
    except (LookupError, ValueError) as exc:
        print(f"distbench: {command}: {one_line(exc)}", file=sys.stderr)
    except Exception as exc:  # the store itself: unreachable, refused
        print(f"distbench: {command}: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
    return None
