"""The `distbench` console script: tools around the runs that run.py makes.

distbench ui [--port 5000] [--workers 1]   # the MLflow UI on the configured store, on 127.0.0.1
distbench summary [multirun/DAY/TIME | latest | RUN_ID | RUN_NAME]   # reprint a sweep's table
distbench plan model=llama3_8b world_size=8 hardware=h100_sxm [--json]   # predict, run nothing
distbench resolve strategy=zero3 world_size=4 [--json]   # the Job and DeepSpeed config
distbench report --sweep latest --out report/   # tables + plots from MLflow, logged on the sweep
distbench server --backend postgresql://mlflow@db:5432/mlflow   # a team server (PGPASSWORD)
distbench compare --baseline <parent run id> --candidate latest  # exit 1 on a regression
distbench compare --baseline previous   # the newest sweep against the one started before it
distbench schedule experiment=strategy_grid --cron "@daily" [--baseline previous] [--dry-run]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI starts fast: report (pandas, mlflow) is imported by the commands
    from distbench.tools.report import Selection


def _one_line(exc: BaseException) -> str:
    """An exception as one line, any URI password in it masked."""
    from distbench.tracking.secrets_mask import mask_text

    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)[:500]


def _store_uri(args: argparse.Namespace) -> str:
    """The store a command reads: --tracking-uri, else $MLFLOW_TRACKING_URI, else ./mlflow.db."""
    from distbench.compose.schema import TrackingConfig
    from distbench.tracking.sweep import resolve_tracking_uri

    return resolve_tracking_uri(TrackingConfig(uri=args.tracking_uri), Path.cwd())


def _ui(args: argparse.Namespace) -> int:
    """The MLflow UI on a local store, in the foreground (tools/server.py starts it and waits
    for /health before printing the URL); a tracking server's URL is only printed."""
    from distbench.tools import server
    from distbench.tracking.mlflow_store import ensure_experiment, ui_url
    from distbench.tracking.secrets_mask import mask_text

    uri = _store_uri(args)
    try:
        plan = server.plan_ui(uri, args.host, args.port, args.workers)
    except ValueError as exc:
        print(f"distbench: ui: {exc}", file=sys.stderr)
        return 2
    experiment_id = ensure_experiment(uri, args.experiment)
    if uri.startswith(("http://", "https://")):  # a tracking server serves its own UI
        print(f"MLflow UI for {mask_text(uri)}: {ui_url(uri, experiment_id, args.port)}")
        print(f"distbench: {server.MODEL_TRAINING_HINT}", flush=True)
        return 0
    url = ui_url(plan.url, experiment_id, args.port)  # the runs page on the UI started here
    print(
        f"distbench: starting the MLflow UI for {mask_text(uri)} (port {args.port}) ...", flush=True
    )
    return server.run_foreground(
        plan, args.timeout_s, lines=server.ui_lines(plan, url), command="ui"
    )


def _sync(args: argparse.Namespace) -> int:
    """Exit 0 when every spooled run is in the store; 1 when some payload could not be read
    (each named, the others uploaded); 2 (one line) for no such dir or an unusable store."""
    from distbench.orphans import record_orphans
    from distbench.tools.plan import project_dir
    from distbench.tracking.mlflow_store import check_uri
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.spool import sync_sweep

    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        print(f"distbench: sync: no such directory: {sweep_dir}", file=sys.stderr)
        return 2
    uri = _store_uri(args)
    try:
        check_uri(uri)
        lost = record_orphans(sweep_dir, uri, project_dir())
        result = sync_sweep(sweep_dir, uri, sweep_lost=bool(lost))
    except Exception as exc:  # a store down or refused: one line, the runs stay spooled
        print(
            f"distbench: sync: {type(exc).__name__}: {_one_line(exc)} (runs stay spooled)",
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


def _summary(args: argparse.Namespace) -> int:
    """A sweep dir's table from its own files, offline; any other form of a sweep (report's)
    from MLflow: from the sweep's dir when it is on this machine, else from its child runs."""
    from distbench.tools.summary import load_outcomes, outcomes_of_runs, print_summary

    if Path(args.sweep).is_dir():
        outcomes = load_outcomes(Path(args.sweep))
        if not outcomes:
            print(f"distbench: no outcome.json under {args.sweep}", file=sys.stderr)
            return 2
        print_summary(outcomes, title=str(args.sweep))
        return 0
    uri = _store_uri(args)
    selection = _load_sweep("summary", uri, args.sweep, args.experiment)
    if selection is None:
        return 2
    recorded = Path(selection.sweep_dir) if selection.sweep_dir else None
    outcomes = load_outcomes(recorded) if recorded and recorded.is_dir() else []
    print_summary(outcomes or outcomes_of_runs(selection.runs), title=selection.title)
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from hydra.errors import HydraException

    from distbench.tools.plan import make_plan, plan_json, print_plan

    strategies = [s for s in (args.strategies or "").split(",") if s] or None
    checks = (
        ("--efficiency", args.efficiency, lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
        ("--bandwidth-gbps", args.bandwidth_gbps, lambda v: v > 0, "a positive number"),
        ("--latency-us", args.latency_us, lambda v: v >= 0, "a number >= 0"),
    )
    for option, value, ok, allowed in checks:
        if value is not None and (not math.isfinite(value) or not ok(value)):
            print(f"distbench: plan: {option} {value}: must be {allowed}", file=sys.stderr)
            return 2
    if args.search:
        from distbench.tools.plan import print_search, search_json, search_layouts

        try:
            found = search_layouts(
                args.overrides, efficiency=args.efficiency, recompute=args.recompute
            )
        except (HydraException, FileNotFoundError) as exc:
            print(f"distbench: plan: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(search_json(found)))
        else:
            print_search(found)
        return 0
    try:
        plan = make_plan(
            args.overrides,
            strategies,
            efficiency=args.efficiency,
            bandwidth_gbps=args.bandwidth_gbps,
            latency_s=None if args.latency_us is None else args.latency_us * 1e-6,
            recompute=args.recompute,
            history=True,
            calibrated=args.calibrated,
            measured_links=args.measured_links,
        )
    except (HydraException, FileNotFoundError) as exc:
        print(f"distbench: plan: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan_json(plan)))
    else:
        print_plan(plan)
    return 0


def _resolve(args: argparse.Namespace) -> int:
    """What `python run.py OVERRIDES` would run, resolved and checked, without launching: the
    Job as YAML (layout, ZeRO stage, topology, hardware figures and peaks) and, for the
    deepspeed engine, the config its ranks pass to deepspeed.initialize (engines/deepspeed.py
    ds_config) as a second YAML document in JSON. Exit 2 with one line for what run.py
    refuses."""
    import json

    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    from distbench.compose.schema import register_configs
    from distbench.orchestrator import precheck, resolve
    from distbench.tools.plan import project_dir

    try:
        home = project_dir()
        os.environ.setdefault("DISTBENCH_HOME", str(home))  # conf/config.yaml's searchpath
        register_configs()
        with initialize_config_dir(config_dir=str(home / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=args.overrides)
    except (HydraException, OmegaConfBaseException, FileNotFoundError) as exc:
        line = _one_line(exc)
        if exc.__cause__ is not None:  # e.g. world_size=abc: the value that did not convert
            line += f" ({_one_line(exc.__cause__)})"
        if isinstance(exc, MissingConfigException) and exc.options:
            line += f"; choose one of {', '.join(sorted(exc.options))}"
        print(f"distbench: resolve: {line}", file=sys.stderr)
        return 2
    with open_dict(cfg):
        cfg.pop("hydra", None)
    job, refusal = resolve(cfg, home / "conf", measure=False)  # shows the cached parts only
    if job is None:
        print(f"distbench: resolve: invalid config: {refusal}", file=sys.stderr)
        return 2
    ds = None
    if job.engine == "deepspeed":
        from distbench.engines.deepspeed import ds_config

        ds = ds_config(job)
    if args.json:
        print(json.dumps({"job": job.tree(), "deepspeed_config": ds}))
        return 0
    layout, hw = job.layout, job.hardware
    peak = getattr(hw, f"peak_tflops_{job.dtype}", None)
    stage = "" if layout.zero_stage is None else f", ZeRO stage {layout.zero_stage}"
    found = f", hardware=auto found {hw.detected}" if hw.detected else ""
    command = " ".join(["python run.py", *args.overrides])
    print(f"# distbench resolve: what `{command}` runs; nothing launched")
    print(
        f"# layout: {layout.world_size} ranks = dp {layout.dp} x pp {layout.pp} x tp {layout.tp}"
        f"{stage}, engine {job.engine}; {job.topology.num_nodes} node(s) x "
        f"{job.topology.ranks_per_node} ranks"
    )
    print(
        f"# hardware: {hw.name} ({hw.device}{found}), peak {job.dtype} "
        f"{'unknown' if peak is None else f'{peak:g}'} TFLOP/s per device ({hw.peak_source})"
    )
    shortfall = precheck(cfg, home / "conf")
    if shortfall:  # the Job resolves, but this machine cannot host its ranks
        print(f"# note: run.py on this machine refuses it: {shortfall}")
    print(job.to_yaml(), end="")
    if ds is not None:
        print("--- # the DeepSpeed config the ranks pass to deepspeed.initialize")
        print(json.dumps(ds, indent=2))
    return 0


def _load_sweep(
    command: str, uri: str, sweep: str | None, experiment: str | None
) -> Selection | None:
    """report.load_runs' selection of a sweep, or None after a one-line error on stderr."""
    from distbench.tools import report
    from distbench.tracking.mlflow_store import check_uri

    try:
        check_uri(uri)
        return report.load_runs(uri, sweep, experiment)
    except (LookupError, ValueError) as exc:
        print(f"distbench: {command}: {_one_line(exc)}", file=sys.stderr)
    except Exception as exc:  # the store itself: unreachable, refused
        print(f"distbench: {command}: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
    return None


def _report(args: argparse.Namespace) -> int:
    from distbench.tools import report

    uri = _store_uri(args)
    sweep = args.sweep if args.sweep or args.experiment else "latest"
    selection = _load_sweep("report", uri, sweep, args.experiment or "distbench")
    if selection is None:
        return 2
    df = report.flat_table(selection.runs)
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
            print(f"distbench: logged as artifacts {report.REPORT_ARTIFACT_DIR}/ of the sweep run")
    for line in report.verdict_lines(report.best_per_metric(df)):
        print(line)
    return 0


def _server(args: argparse.Namespace) -> int:
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


def _compare(args: argparse.Namespace) -> int:
    from distbench.tools import compare

    uri = _store_uri(args)
    try:
        metrics = compare.parse_metrics(args.metrics)
        threshold_pct = compare.check_threshold(args.threshold_pct)
        candidate, cand_runs = compare.load_sweep(uri, args.candidate, args.experiment)
        baseline, base_runs = compare.load_sweep(  # "previous": the one before the candidate
            uri, args.baseline, args.experiment, candidate.parent_run_id
        )
        if baseline.parent_run_id == candidate.parent_run_id:
            raise ValueError(
                f"--candidate {args.candidate} is the baseline sweep {baseline.parent_run_id}; "
                "compare two different sweeps"
            )
        rows = compare.compare_sweeps(base_runs, cand_runs, metrics, threshold_pct)
        if not compare.compared_configs(rows):
            raise ValueError(
                f"no configuration (distbench.signature) of sweep {candidate.parent_run_id} "
                f"ran in the baseline {baseline.parent_run_id}"
            )
    except (LookupError, ValueError) as exc:
        print(f"distbench: compare: {exc}", file=sys.stderr)
        return 2
    compare.print_table(rows, f"candidate {candidate.title} vs baseline {baseline.title}")
    print(compare.summary_line(rows, threshold_pct))
    if not args.no_log:
        run_id = compare.log_comparison(
            uri,
            candidate.experiment_id,
            baseline.parent_run_id,
            candidate.parent_run_id,
            rows,
            metrics,
            threshold_pct,
        )
        print(f"distbench: compare: logged as run {run_id} (tag distbench.kind=compare)")
    return 1 if compare.regressed_configs(rows) else 0


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


def add_schedule_options(parser: argparse.ArgumentParser, cron_required: bool = False) -> None:
    help_cron = '5 fields, e.g. "0 2 * * *" (02:00 daily), or a macro such as "@daily"'
    parser.add_argument("--cron", required=cron_required, help=help_cron)
    parser.add_argument(
        "--baseline",
        help="compare each night's sweep against this sweep's parent run id, or against "
        "'previous' (the sweep before it); default: no comparison",
    )
    parser.add_argument("--name", help="the schedule's name (default: the experiment's)")
    parser.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI when set")
    parser.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        help="an sbatch option for the job, e.g. --slurm-option=--gres=gpu:4 (repeatable)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print, install nothing")


def _schedule(args: argparse.Namespace) -> int:
    import datetime as dt
    import shutil

    from distbench.tools import schedule
    from distbench.tools.plan import project_dir

    # options may come between the overrides: parse what argparse left in `rest` again
    known = {k: v for k, v in vars(args).items() if k not in ("rest", "func", "command")}
    again = argparse.ArgumentParser(prog="distbench schedule")
    add_schedule_options(again, cron_required=not known.get("cron"))
    again.add_argument("overrides", nargs="*")
    again.set_defaults(**known)
    args = again.parse_intermixed_args(args.rest)
    try:
        project = project_dir()
        cron = schedule.parse_cron(args.cron)
        experiment, overrides = schedule.split_overrides(args.overrides)
        schedule.check_experiment(project, experiment)
        name = schedule.check_name(args.name or experiment)
        slurm_options = schedule.check_slurm_options(args.slurm_option)
        uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        command = schedule.job_command(project, experiment, overrides, args.baseline, uri)
        log = schedule.log_path(project, name)
        block = schedule.scrontab_block(name, cron, command, log, slurm_options)
        begin = schedule.next_occurrence(cron, dt.datetime.now())
    except (ValueError, FileNotFoundError) as exc:
        print(f"distbench: schedule: {exc}", file=sys.stderr)
        return 2
    log.parent.mkdir(parents=True, exist_ok=True)  # cron and Slurm do not create it
    scrontab = shutil.which("scrontab")
    if scrontab and not args.dry_run:
        refused = schedule.scrontab_problem(cron)
        if refused:
            print(f"distbench: schedule: cron {cron.expression!r}: {refused}", file=sys.stderr)
            return 2
        try:
            schedule.install_scrontab(name, block, scrontab)
        except (RuntimeError, ValueError, OSError) as exc:
            print(f"distbench: schedule: {exc}", file=sys.stderr)
            return 1
        print(f"distbench: schedule {name} installed in your scrontab ({cron.expression}):")
        print(block, end="")
        print(f"distbench: next run {begin:%Y-%m-%d %H:%M}; output appended to {log}")
        return 0
    why = "--dry-run" if args.dry_run else "no scrontab on PATH"
    print(f"distbench: schedule {name} ({why}): nothing installed. For crontab -e:")
    print(schedule.crontab_line(cron, command, log))
    print(f"Or once, at the next occurrence ({begin:%Y-%m-%d %H:%M}), with Slurm:")
    print(schedule.sbatch_command(name, command, begin, log, slurm_options))
    print("Or as a scrontab block (scrontab -e):")
    print(block, end="")
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
    ui.add_argument(
        "--experiment", default="distbench", help="whose runs page to print (default distbench)"
    )
    add_listen_options(
        ui,
        host_help="the interface to bind (default 127.0.0.1: this host)",
        workers=1,
        workers_help="the UI's worker processes (mlflow ui --workers; default 1: one browser)",
    )
    ui.set_defaults(func=_ui)
    sync = sub.add_parser("sync", help="upload a sweep's spooled runs that did not land")
    sync.add_argument("sweep_dir", help="the sweep's dir (multirun/DAY/TIME) or one job's dir")
    sync.add_argument(
        "--tracking-uri",
        default=None,
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db",
    )
    sync.set_defaults(func=_sync)
    summary = sub.add_parser("summary", help="print a sweep's comparison table")
    summary.add_argument(
        "sweep",
        nargs="?",
        default="latest",
        help="a sweep dir (multirun/DAY/TIME: read offline from its files), or from MLflow "
        "'latest' (default), 'previous', a sweep's parent run id or run name",
    )
    summary.add_argument(
        "--experiment", default="distbench", help="where names are looked up (default distbench)"
    )
    summary.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else ./mlflow.db")
    summary.set_defaults(func=_summary)
    plan = sub.add_parser(
        "plan",
        help="predict memory, communication, step time and cost of every strategy; run nothing",
    )
    plan.add_argument("overrides", nargs="*", help="Hydra overrides as for run.py")
    plan.add_argument("--strategies", help="comma-separated, default: every conf/strategy option")
    plan.add_argument("--json", action="store_true", help="print one JSON list instead")
    plan.add_argument(
        "--efficiency",
        type=float,
        help="assumed MFU (default GPU 0.4, CPU 0.6); sets hardware.time_source=efficiency",
    )
    plan.add_argument("--bandwidth-gbps", type=float, help="GB/s, default hardware's")
    plan.add_argument("--latency-us", type=float, help="µs per collective (default 10 / 100)")
    plan.add_argument("--recompute", action="store_true", help="full activation recomputation")
    plan.add_argument(
        "--calibrated",
        action="store_true",
        help="divide each prediction by (1 + the median error of the store's earlier runs)",
    )
    plan.add_argument(
        "--measured-links",
        action="store_true",
        help="links from the α-β fits of the store's collectives runs (per tier), if any",
    )
    plan.add_argument(
        "--search",
        action="store_true",
        help="every (engine, dp, tp, pp, ZeRO stage, micro batch) ranked, refusals with reasons",
    )
    plan.set_defaults(func=_plan)
    res = sub.add_parser(
        "resolve",
        help="the Job run.py would run (layout, hardware, DeepSpeed config), checked; run nothing",
    )
    res.add_argument("overrides", nargs="*", help="Hydra overrides as for run.py")
    res.add_argument("--json", action="store_true", help="one JSON object: job, deepspeed_config")
    res.set_defaults(func=_resolve)
    rep = sub.add_parser("report", help="tables and plots of a sweep's runs, read from MLflow")
    rep.add_argument(
        "--sweep",
        help="'latest' (default unless --experiment), 'previous', a sweep's parent run id or "
        "run name, or its dir (multirun/DAY/TIME)",
    )
    rep.add_argument("--experiment", help="every run of this experiment (default: distbench)")
    rep.add_argument("--out", default="report", help="the report folder (default: ./report)")
    rep.add_argument(
        "--format",
        choices=("report", "csv"),
        default="report",
        help="report: md, html, csv and plots (default); csv: only runs.csv",
    )
    rep.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else ./mlflow.db")
    rep.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    rep.add_argument(
        "--ui-url",
        help="the MLflow UI that run links in report.html point at, e.g. http://127.0.0.1:5000 "
        "(default: the tracking server; for a sqlite store, links relative to the UI's root)",
    )
    rep.set_defaults(func=_report)
    srv = sub.add_parser("server", help="a team's MLflow tracking server, in the foreground")
    srv.add_argument(
        "--backend",
        help="postgresql://user@host:port/db (password: --password-file, $PGPASSWORD or "
        "~/.pgpass, never in the URI) or sqlite:///path; default sqlite:///ROOT/mlflow.db",
    )
    srv.add_argument("--root", default="mlflow-server", help="default ./mlflow-server")
    srv.add_argument("--artifacts-destination", help="artifact root, default ROOT/artifacts")
    add_listen_options(
        srv,
        host_help="default 127.0.0.1; 0.0.0.0 to serve other machines",
        workers=2,
        workers_help="the server's worker processes (mlflow server --workers; default 2)",
    )
    srv.add_argument("--password-file", help="a file whose first line is the password")
    srv.add_argument("--allowed-hosts", help="passed to mlflow server (Host headers it accepts)")
    srv.add_argument("--log-file", help="append the server's output here (default: the terminal)")
    srv.set_defaults(func=_server)
    cmp = sub.add_parser(
        "compare", help="flag configurations of a sweep slower or hungrier than a baseline sweep"
    )
    cmp.add_argument(
        "--baseline",
        required=True,
        help="'previous' (the sweep started just before the candidate), a sweep's parent run id "
        "or run name, or its dir (multirun/DAY/TIME)",
    )
    cmp.add_argument(
        "--candidate",
        default="latest",
        help="'latest' (default), a sweep's parent run id or run name, or its dir",
    )
    cmp.add_argument(
        "--threshold-pct",
        type=float,
        default=5.0,
        help="how much worse (%%) a metric may get before it is a regression (default 5)",
    )
    cmp.add_argument(
        "--metrics",
        default="throughput_tokens_per_s,peak_mem_gib",
        help="comma-separated (default throughput_tokens_per_s,peak_mem_gib)",
    )
    cmp.add_argument(
        "--experiment",
        default="distbench",
        help="where latest, previous and names are looked up (default distbench)",
    )
    cmp.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else ./mlflow.db")
    cmp.add_argument("--no-log", action="store_true", help="do not log the comparison to MLflow")
    cmp.set_defaults(func=_compare)
    sch = sub.add_parser(
        "schedule", help="a study from experiments/ as a nightly sweep (scrontab or a cron line)"
    )
    add_schedule_options(sch)
    sch.set_defaults(func=_schedule)
    sch.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="experiment=NAME [OVERRIDE ...]",
        help="the study (experiments/NAME.yaml) and Hydra overrides as for run.py",
    )
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `distbench resolve ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
