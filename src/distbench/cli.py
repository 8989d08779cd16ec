"""The `distbench` console script: tools around the runs that run.py makes.

distbench ui [--port 5000]            # the MLflow UI on the configured store, on 127.0.0.1
distbench summary multirun/DAY/TIME   # reprint a sweep's comparison table
distbench plan model=llama3_8b world_size=8 hardware=h100_sxm [--json]   # predict, run nothing
distbench report --sweep latest --out report/   # tables + plots from MLflow, logged on the sweep
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace


def _ui(args: argparse.Namespace) -> int:
    from distbench.mlflow_store import ensure_experiment, ui_url
    from distbench.tracking import resolve_tracking_uri

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


def _sync(args: argparse.Namespace) -> int:
    from distbench.spool import sync_sweep
    from distbench.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(SimpleNamespace(backend="sqlite", uri=args.tracking_uri), Path.cwd())
    counts = sync_sweep(Path(args.sweep_dir), uri)
    print(
        f"distbench sync {args.sweep_dir} → {uri}: {counts['uploaded']} uploaded, "
        f"{counts['already_in_store']} already in the store"
    )
    return 0


def _summary(args: argparse.Namespace) -> int:
    from distbench.summary import load_outcomes, print_summary

    outcomes = load_outcomes(Path(args.sweep_dir))
    if not outcomes:
        print(f"distbench: no outcome.json under {args.sweep_dir}", file=sys.stderr)
        return 2
    print_summary(outcomes, title=str(args.sweep_dir))
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from hydra.errors import HydraException

    from distbench.plan import make_plan, plan_json, print_plan

    strategies = [s for s in (args.strategies or "").split(",") if s] or None
    try:
        plan = make_plan(
            args.overrides,
            strategies,
            efficiency=args.efficiency,
            bandwidth_gbps=args.bandwidth_gbps,
            latency_s=None if args.latency_us is None else args.latency_us * 1e-6,
            recompute=args.recompute,
        )
    except (HydraException, FileNotFoundError) as exc:
        print(f"distbench: plan: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan_json(plan)))
    else:
        print_plan(plan)
    return 0


def _report(args: argparse.Namespace) -> int:
    from distbench import report
    from distbench.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(SimpleNamespace(backend="sqlite", uri=args.tracking_uri), Path.cwd())
    sweep = args.sweep if args.sweep or args.experiment else "latest"
    try:
        selection = report.load_runs(uri, sweep, args.experiment or "distbench")
    except LookupError as exc:
        print(f"distbench: report: {exc}", file=sys.stderr)
        return 2
    df = report.flat_table(selection.runs)
    out = Path(args.out)
    if args.format == "csv":
        print(f"distbench: {len(df)} runs of {selection.title} -> {report.write_csv(df, out)}")
    else:
        files, sections = report.write_report(df, out, selection.title)
        print(f"distbench: report of {selection.title} ({len(df)} runs) in {out}/")
        if selection.parent_run_id and not args.no_log:
            note = report.report_note(selection.experiment_id, selection.parent_run_id, sections)
            report.log_report(uri, selection.experiment_id, selection.parent_run_id, files, note)
            print(f"distbench: logged as artifacts {report.REPORT_ARTIFACT_DIR}/ of the sweep run")
    for line in report.verdict_lines(report.best_per_metric(df)):
        print(line)
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
    sync = sub.add_parser("sync", help="upload a sweep's spooled runs that did not land")
    sync.add_argument("sweep_dir")
    sync.add_argument(
        "--tracking-uri",
        default=None,
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db",
    )
    sync.set_defaults(func=_sync)
    summary = sub.add_parser("summary", help="print a sweep's comparison table")
    summary.add_argument("sweep_dir")
    summary.set_defaults(func=_summary)
    plan = sub.add_parser(
        "plan",
        help="predict memory, communication, step time and cost of every strategy; run nothing",
    )
    plan.add_argument("overrides", nargs="*", help="Hydra overrides as for run.py")
    plan.add_argument("--strategies", help="comma-separated, default: every conf/strategy option")
    plan.add_argument("--json", action="store_true", help="print one JSON list instead")
    plan.add_argument("--efficiency", type=float, help="assumed MFU (default GPU 0.4, CPU 0.1)")
    plan.add_argument("--bandwidth-gbps", type=float, help="GB/s, default hardware's")
    plan.add_argument("--latency-us", type=float, help="µs per collective (default 10 / 100)")
    plan.add_argument("--recompute", action="store_true", help="full activation recomputation")
    plan.set_defaults(func=_plan)
    rep = sub.add_parser("report", help="tables and plots of a sweep's runs, read from MLflow")
    rep.add_argument("--sweep", help="a parent run id, or 'latest' (default unless --experiment)")
    rep.add_argument("--experiment", help="every run of this experiment (default: distbench)")
    rep.add_argument("--out", default="report", help="the report folder (default: ./report)")
    rep.add_argument(
        "--format", choices=("report", "csv"), default="report", help="csv: only runs.csv"
    )
    rep.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else ./mlflow.db")
    rep.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    rep.set_defaults(func=_report)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
