"""The planner against real runs: predicted vs measured peak memory and step time, per job.

Runs a small grid on this machine through `run.py` (each job in its own dir under a temporary
work folder, MLFLOW_TRACKING_URI=sqlite:///<work>/mlflow.db), then predicts every job from its
own resolved.yaml (`Job.load`: the exact config its ranks ran, hardware figures included) with
`figures.predict.pred_vs_measured`, the function that logs `pred_*` beside each run, and compares:

    error % = (predicted − measured) / measured × 100

measured peak = `peak_mem_gib` (CPU: the largest rank's peak RSS during the steps; GPU: CUDA
max allocated), measured step = `step_time_s_p50`. Targets (issue 13): memory within 15 %, step
time within 30 % for every job. The prediction never reads the job's measurements; the CPU
memory constants (figures.cpu_rss.CPU_RUNTIME_GIB and the three beside it) were fitted on another
grid on this host (benchmarks/cpu_runs/2026-11-27_memory_fit/): on CPU the memory figure is a
same-host check.

Default grid (~8 min on 2 shared cores): model tiny (7M Llama) and `gpt2_2l` (GPT-2 small's
shapes with 2 layers: 53M parameters, 50k vocab, tied head) × strategies single (1 rank), ddp,
fsdp (torch), dp, zero2, zero3 (DeepSpeed) at world_size 2, batch small, fp32, 2 warm-up + 6
timed steps.

    .venv/bin/python benchmarks/plan_vs_measured.py                      # the grid above
    .venv/bin/python benchmarks/plan_vs_measured.py --models tiny --strategies dp,zero3
    .venv/bin/python benchmarks/plan_vs_measured.py --repredict /tmp/pvm-xyz   # no new runs

`--measured-links` first runs `workload=collectives` (world_size as the grid) into the work
store, then every job with `hardware.link_source=measured`: the predictions' links and latency
are that run's α-β fit instead of the constants (figures/links.py); `time_err_pct_catalog_links`
is the same job predicted on the catalog links, side by side.

The jobs run with `hardware.time_source=measured` by default (the compute term is the
micro-batch's measured parts, probes/step_parts.py: GEMMs timed at the model's shapes, other
kernels at the measured bandwidth, host time per kernel): what `auto` predicts with once `plan`
has cached the parts (a run under `auto` probes nothing itself); `--time-source efficiency`
predicts peak × efficiency instead, `--time-source auto` takes whatever is cached. A job with
measured parts also gets `time_err_pct_efficiency`: the same job predicted by the efficiency
model, side by side.

`--repredict-measured` predicts kept CPU jobs from step parts measured now on this machine,
whatever time source they ran with (a first sweep runs under `auto` with nothing cached: the
efficiency model): what the sweep would have predicted after a `distbench plan`.

`--keep` keeps the work folder (its path is printed) so `--repredict` can re-predict the same
measurements after a change to the model; `--repredict` takes several folders, a sweep's
hydra.sweep.dir too (its numbered job dirs are named model-strategy-wsN), e.g. the README's CPU
grids kept in benchmarks/cpu_runs/2026-11-27_readme_grids/{A_rerun,A,B}. Each row says whether
the run was tagged `oversubscribed` (its host was busy or its ranks outnumbered the cores) and
how many times over the prediction assumed the cores shared (`pred_oversubscription`; a job
dir written before Measurements.host_cores takes the run's `host_cores` metric).

`time_err_pct_after_common_factor` is each job's step-time error once the jobs' common factor
(the median of measured / predicted, figures/sweep_accuracy.py) is divided out: a host slower
than predicted for every job alike (a shared VM's afternoon) moves that factor, not the order
of the strategies; the summary gives the factor, the count within target after it and
Spearman's order (`time_common_factor`, `time_within_target_after_common_factor`,
`time_rank_corr`).

Figures go to benchmarks/results/plan_vs_measured.{csv,json,md} (`--out-dir` elsewhere); the
last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR / "src"))

from distbench.compose.schema import TIME_SOURCES  # noqa: E402
from distbench.figures.pred_error import PRED_ERROR_TARGET_PCT  # noqa: E402
from distbench.figures.predict import pred_vs_measured  # noqa: E402
from distbench.figures.sweep_accuracy import sweep_accuracy  # noqa: E402
from distbench.job import Job  # noqa: E402
from distbench.workloads.train.prepare import with_step_parts  # noqa: E402

MEM_TARGET_PCT = PRED_ERROR_TARGET_PCT["mem"]
TIME_TARGET_PCT = PRED_ERROR_TARGET_PCT["time"]
JOB_TIMEOUT_S = 900
# name -> run.py overrides of the model
MODELS = {
    "tiny": ["model=tiny"],
    "gpt2_2l": ["model=gpt2_124m", "model.num_layers=2"],
}
STRATEGIES = ("single", "ddp", "fsdp", "dp", "zero2", "zero3")
FIELDS = (
    "job",
    "status",
    "precision",
    "link_source",
    "measured_peak_gib",
    "pred_peak_gib",
    "mem_err_pct",
    "measured_step_s",
    "pred_step_s",
    "time_err_pct",
    "time_err_pct_catalog_links",
    "time_err_pct_efficiency",
    "time_err_pct_after_common_factor",
    "oversubscribed",
    "pred_oversubscription",
)


def grid(models: list[str], strategies: list[str], world_size: int) -> list[tuple[str, list]]:
    """(job name, run.py overrides) of every job; `single` runs on one rank."""
    jobs = []
    for model in models:
        for strategy in strategies:
            size = 1 if strategy == "single" else world_size
            name = f"{model}-{strategy}-ws{size}"
            jobs.append((name, [*MODELS[model], f"strategy={strategy}", f"world_size={size}"]))
    return jobs


def run_job(name: str, overrides: list[str], work: Path, steps: list[str], env: dict) -> Path:
    """One job through run.py into work/name; returns its job dir."""
    job_dir = work / name
    cmd = [sys.executable, str(PROJECT_DIR / "run.py"), *overrides, *steps, "batch=small"]
    cmd += [f"hydra.run.dir={job_dir}"]
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    (job_dir / "bench.log").parent.mkdir(parents=True, exist_ok=True)
    (job_dir / "bench.log").write_text(proc.stdout + proc.stderr)
    print(f"{name}: exit {proc.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    return job_dir


def compare(job_dir: Path, measure_parts: bool = False) -> dict[str, Any]:
    """Predicted vs measured for one finished job dir (outcome.json + resolved.yaml);
    `measure_parts`: with step parts measured now (time_source=measured), whatever it ran with."""
    row: dict[str, Any] = {"job": job_dir.name}
    outcome_file = job_dir / "outcome.json"
    if not outcome_file.exists():
        return {**row, "status": "NO_OUTCOME"}
    outcome = json.loads(outcome_file.read_text())
    row["status"] = outcome.get("status", "?")
    row["oversubscribed"] = outcome.get("oversubscribed") == "true"  # the run's own tag
    metrics = outcome.get("metrics") or {}
    if row["status"] != "FINISHED" or "peak_mem_gib" not in metrics:
        return {**row, "reason": str(outcome.get("failure_reason", ""))[:200]}
    try:  # resolved.yaml is read with this checkout's schema
        job = Job.load(job_dir)
    except ValueError as exc:
        return {**row, "status": "UNREADABLE", "reason": str(exc)[:200]}
    if job_dir.name.isdigit():  # a sweep's job dir (hydra.sweep.dir/<n>): name it
        row["job"] = f"{job.model.name}-{job.strategy.name}-ws{job.world_size}"
    if job.device == "cpu" and job.measured.host_cores is None and metrics.get("host_cores"):
        # a job dir written before Measurements.host_cores: the cores of the host it ran on
        job = job.with_measured(host_cores=int(metrics["host_cores"]))
    if measure_parts and job.device == "cpu":  # this machine's CPU: the one the job ran on
        job = with_step_parts(job.with_hardware(time_source="measured"))
    pred = pred_vs_measured(job, metrics)
    row.update(
        precision=job.precision,
        link_source=job.hardware.link_source,
        measured_peak_gib=metrics["peak_mem_gib"],
        pred_peak_gib=pred["pred_peak_mem_gib"],
        mem_err_pct=100 * pred["mem_pred_rel_err"],
        measured_step_s=metrics.get("step_time_s_p50"),
        pred_step_s=pred.get("pred_step_time_s"),
        time_err_pct=100 * pred["time_pred_rel_err"] if "time_pred_rel_err" in pred else None,
        pred_oversubscription=pred.get("pred_oversubscription", 1.0),
    )
    if job.hardware.time_source == "measured":  # side by side: the efficiency model
        by_efficiency = dataclasses.replace(job.hardware, time_source="efficiency")
        err = pred_vs_measured(job.replace(hardware=by_efficiency), metrics).get(
            "time_pred_rel_err"
        )
        row["time_err_pct_efficiency"] = None if err is None else 100 * err
    if job.hardware.link_source == "measured":  # side by side: the same job on catalog links
        catalog = job.replace(hardware=dataclasses.replace(job.hardware, link_source="catalog"))
        err = pred_vs_measured(catalog, metrics).get("time_pred_rel_err")
        row["time_err_pct_catalog_links"] = None if err is None else 100 * err
    return row


def _job_order(resolved: Path) -> tuple[int, str]:
    """Sweep job dirs (0, 1, ..., 10) in their number's order, named ones by name."""
    name = resolved.parent.name
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "", "| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    for row in rows:
        cells = []
        for key in FIELDS:
            value = row.get(key)
            cells.append(
                "-"
                if value is None
                else f"{value:+.1f}"
                if "_pct" in key
                else f"{value:.3g}"
                if isinstance(value, float)
                else str(value)
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# The step-time error columns: the job's own prediction, then the side-by-side ones (compare)
TIME_ERR_SUFFIXES = ("", "_efficiency", "_catalog_links")


def step_time_pairs(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(predicted, measured) step seconds of every row that has both."""
    return [
        (r["pred_step_s"], r["measured_step_s"])
        for r in rows
        if r.get("pred_step_s") and r.get("measured_step_s")
    ]


def with_common_factor(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each compared row's step-time error once the jobs' common factor (the median of measured
    / predicted: a machine slower or faster than predicted for every job alike,
    figures/sweep_accuracy.py) is divided out: `time_err_pct_after_common_factor`."""
    accuracy = sweep_accuracy(step_time_pairs(rows), TIME_TARGET_PCT)
    if accuracy is None:
        return rows
    for row in rows:
        if row.get("pred_step_s") and row.get("measured_step_s"):
            after = row["pred_step_s"] * accuracy.common_factor / row["measured_step_s"] - 1
            row["time_err_pct_after_common_factor"] = 100 * after
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts against the targets, worst and mean |error| in %; a side-by-side column (the
    efficiency model, the catalog links) gets its own count and mean over its rows."""
    done = [r for r in rows if r.get("mem_err_pct") is not None]
    out: dict[str, Any] = {
        "num_jobs": len(rows),
        "num_compared": len(done),
        "mem_within_target": sum(abs(r["mem_err_pct"]) <= MEM_TARGET_PCT for r in done),
        "max_abs_mem_err_pct": max((abs(r["mem_err_pct"]) for r in done), default=None),
    }
    for suffix in TIME_ERR_SUFFIXES:
        errs = [abs(e) for r in done if (e := r.get(f"time_err_pct{suffix}")) is not None]
        if suffix and not errs:
            continue
        out[f"time_within_target{suffix}"] = sum(e <= TIME_TARGET_PCT for e in errs)
        out[f"max_abs_time_err_pct{suffix}"] = max(errs, default=None)
        out[f"mean_abs_time_err_pct{suffix}"] = sum(errs) / len(errs) if errs else None
    accuracy = sweep_accuracy(step_time_pairs(done), TIME_TARGET_PCT)
    if accuracy is not None:  # the jobs' common factor (figures/sweep_accuracy.py)
        out["time_common_factor"] = accuracy.common_factor
        out["time_within_target_after_common_factor"] = accuracy.num_within_target_after_common
        out["time_rank_corr"] = accuracy.rank_corr
    return {**out, "mem_target_pct": MEM_TARGET_PCT, "time_target_pct": TIME_TARGET_PCT}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--repredict",
        type=Path,
        nargs="+",
        help="kept work folders (or sweep dirs: hydra.sweep.dir): predict, run nothing",
    )
    parser.add_argument(
        "--repredict-measured",
        action="store_true",
        help="with --repredict: CPU jobs predicted from step parts measured now "
        "(time_source=measured; probes/step_parts.py, cached), whatever they ran with",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--measured-links",
        action="store_true",
        help="run workload=collectives first; predict with its α-β fit (hardware.link_source)",
    )
    parser.add_argument(
        "--time-source",
        choices=TIME_SOURCES,
        default="measured",
        help="hardware.time_source of every job (default: measured, as auto after a plan)",
    )
    parser.add_argument(
        "--measured-time",
        dest="time_source",
        action="store_const",
        const="measured",
        help="the same as --time-source measured",
    )
    parser.add_argument("--out-dir", type=Path, default=PROJECT_DIR / "benchmarks" / "results")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.repredict:
        work = args.repredict[0]
        job_dirs = [
            p.parent
            for folder in args.repredict
            for p in sorted(folder.glob("*/resolved.yaml"), key=_job_order)
            if not p.parent.name.startswith("coll")
        ]
    else:
        work = Path(tempfile.mkdtemp(prefix="pvm-"))
        env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
        steps = [f"workload.num_warmup_steps={args.warmup}", f"workload.num_steps={args.steps}"]
        jobs = grid(args.models.split(","), args.strategies.split(","), args.world_size)
        if args.measured_links:
            links = ["workload=collectives", f"world_size={args.world_size}"]
            run_job(f"collectives-ws{args.world_size}", links, work, [], env)
            jobs = [(name, [*o, "hardware.link_source=measured"]) for name, o in jobs]
        if args.time_source:
            jobs = [(name, [*o, f"hardware.time_source={args.time_source}"]) for name, o in jobs]
        job_dirs = [run_job(name, overrides, work, steps, env) for name, overrides in jobs]
    rows = with_common_factor([compare(d, args.repredict_measured) for d in job_dirs])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = "python benchmarks/plan_vs_measured.py " + " ".join(sys.argv[1:])
    header = f"plan vs measured, {stamp}, `{command.strip()}`"
    text = markdown(rows, header)
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with open(args.out_dir / "plan_vs_measured.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*FIELDS, "reason"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (args.out_dir / "plan_vs_measured.md").write_text(text)
    document = {"date": stamp, "command": command, "rows": rows, "summary": summary(rows)}
    (args.out_dir / "plan_vs_measured.json").write_text(json.dumps(document, indent=1) + "\n")
    if args.keep or args.repredict:
        print(f"work folder: {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(document["summary"]))


if __name__ == "__main__":
    main()
