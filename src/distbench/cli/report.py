"""`distbench report`: tables and plots of a sweep's runs, read from MLflow (tools/report/),
logged as artifacts of the sweep's parent run.

    distbench report --sweep latest --out report/ [--format csv] [--no-log]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distbench.cli.options import add_store_options, load_sweep, store_uri

# The report's tables (report.Sections fields) also logged with MLflow's log_table, by name.
LOGGED_TABLES = {
    "best": "best",
    "grid": "grid",
    "failed": "failed",
    "pred": "predictions",
    "scaling": "scaling",
}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("report", help="tables and plots of a sweep's runs, read from MLflow")
    parser.add_argument(
        "--sweep",
        help="'latest' (default unless --experiment), 'previous', a sweep's parent run id or "
        "run name, or its dir (multirun/DAY/TIME)",
    )
    add_store_options(
        parser, experiment_help="every run of this experiment (default: distbench)", experiment=None
    )
    parser.add_argument("--out", default="report", help="the report folder (default: ./report)")
    parser.add_argument(
        "--format",
        choices=("report", "csv"),
        default="report",
        help="report: md, html, csv and plots (default); csv: only runs.csv",
    )
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    parser.add_argument(
        "--ui-url",
        help="the MLflow UI that run links in report.html point at, e.g. http://127.0.0.1:5000 "
        "(default: the tracking server; for a sqlite store, links relative to the UI's root)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distbench.tools import report
    from distbench.tracking.dashboard import log_tables

    uri = store_uri(args)
    sweep = args.sweep if args.sweep or args.experiment else "latest"
    selection = load_sweep("report", uri, sweep, args.experiment or "distbench")
    if selection is None:
        return 2
    df = report.flat_table(selection.runs, selection.swept)
    out = Path(args.out)
    if args.format == "csv":
        print(f"distbench: {len(df)} runs of {selection.title} -> {report.write_csv(df, out)}")
    else:
        ui_base = report.ui_base_url(uri, args.ui_url)
        files, sections = report.write_report(
            df,
            out,
            selection.title,
            selection.experiment_id,
            ui_base,
            history=report.flat_table(selection.history),
        )
        print(f"distbench: report of {selection.title} ({len(df)} runs) in {out}/")
        if selection.parent_run_id and not args.no_log:
            note = report.report_note(selection.experiment_id, selection.parent_run_id, sections)
            report.log_report(uri, selection.experiment_id, selection.parent_run_id, files, note)
            tables = {name: getattr(sections, field) for field, name in LOGGED_TABLES.items()}
            log_tables(uri, selection.parent_run_id, tables)  # also as MLflow tables
            print(f"distbench: logged as artifacts {report.REPORT_ARTIFACT_DIR}/ of the sweep run")
    for line in report.verdict_lines(report.best_per_metric(df)):
        print(line)
    return 0
