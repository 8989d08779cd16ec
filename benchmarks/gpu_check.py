"""`make gpu-check`: every workload and engine that fits the visible GPUs, in one command, with
one JSON + markdown summary anyone can attach to an issue.

For world size 1 and every power of two up to the number of visible GPUs (2, 4, 8), each job
runs through `run.py` into a temporary MLflow store:

  train       single (world size 1 only), ddp, fsdp (torch engine), dp (DeepSpeed ZeRO-0),
              zero3; `--model` (default llama_1b), `workload.dtype=bf16` (bf16-mixed), batch
              `--batch` (default medium)
  inference   strategy=dp (data-parallel replicas), the same model
  gemm        gemm.dtype=bf16 (distributed GEMM and its correctness check)
  collectives the nccl-tests-style sweep of collectives

and `benchmarks/harness_overhead.py --quick` on the same device, model, batch and dtype (2 ranks
where two GPUs are visible, else 1): the same steps as a bare torchrun script, distbench's fixed
cost per job. Each training row shows what
was predicted next to what was measured (peak memory, step time), the precision recipe, the
optimizer kernel, init time and host peak RSS. Training jobs run with
`hardware.time_source=measured` (`--time-source`): their step time is predicted from the
micro-batch's measured parts (probes/step_parts.py), and the efficiency model's figure for the
same job stands beside it; the JSON keeps each job's measured parts. `--device cpu` runs the
same grid on CPU ranks with the tiny model: that is how the tests run this script where there
is no GPU.

    make gpu-check                                          # on a GPU machine
    .venv/bin/python benchmarks/gpu_check.py --model llama3_8b --batch small
    .venv/bin/python benchmarks/gpu_check.py --device cpu --no-bare   # the grid on CPU ranks
    .venv/bin/python benchmarks/gpu_check.py --list                   # the grid's job names
    .venv/bin/python benchmarks/gpu_check.py --only train-zero3-ws8,collectives-ws8   # a rerun
                                                    # into gpu_check_only.{json,md}

Figures go to benchmarks/results/gpu_check.{json,md} (`--out-dir` elsewhere); the last stdout
line is the JSON document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR / "src"))

from harness_overhead import work_dir  # noqa: E402  (benchmarks/ is this script's dir)

from distbench.figures.predict import predict  # noqa: E402
from distbench.job import Job  # noqa: E402
from distbench.probes.detect import gpu_names  # noqa: E402
from distbench.probes.parts import ENGINE_PARTS_FIELDS, STEP_PARTS_FIELDS  # noqa: E402

TRAIN_STRATEGIES = ("single", "ddp", "fsdp", "dp", "zero3")
JOB_TIMEOUT_S = 1800
# (column, outcome metric or tag, format)
COLUMNS = (
    ("step p50 s", "step_time_s_p50", "{:.3f}"),
    ("pred step s", "pred_step_time_s", "{:.3f}"),
    ("pred step s (eff.)", "pred_step_time_s_efficiency", "{:.3f}"),
    ("tokens/s", "throughput_tokens_per_s", "{:,.0f}"),
    ("MFU %", "mfu_pct", "{:.1f}"),
    ("peak GiB", "peak_mem_gib", "{:.2f}"),
    ("pred peak GiB", "pred_peak_mem_gib", "{:.2f}"),
    ("init s", "init_time_s", "{:.1f}"),
    ("host RSS GiB", "host_peak_rss_gib", "{:.1f}"),
    ("busbw GB/s", "busbw_gbps_avg", "{:.1f}"),
    ("TFLOP/s/dev", "tflops_per_device", "{:.3g}"),
)


def world_sizes(num_gpus: int) -> list[int]:
    """1, then every power of two up to the visible GPUs (2, 4, 8)."""
    sizes, size = [1], 2
    while size <= min(num_gpus, 8):
        sizes.append(size)
        size *= 2
    return sizes


def grid(
    sizes: list[int], model: str, batch: str, dtype: str, time_source: str = "measured"
) -> list[tuple[str, list[str]]]:
    """(name, run.py overrides) of every job of the check."""
    common = [f"model={model}", f"batch={batch}", f"workload.dtype={dtype}"]
    train = [*common, f"hardware.time_source={time_source}"]
    jobs = []
    for size in sizes:
        at_size = [
            (f"train-{strategy}-ws{size}", [f"strategy={strategy}", *train])
            for strategy in TRAIN_STRATEGIES
            if strategy != "single" or size == 1
        ]
        at_size.append((f"inference-dp-ws{size}", ["workload=inference", "strategy=dp", *common]))
        at_size.append((f"gemm-ws{size}", ["workload=gemm", f"gemm.dtype={dtype}"]))
        at_size.append((f"collectives-ws{size}", ["workload=collectives"]))
        jobs += [(name, [*overrides, f"world_size={size}"]) for name, overrides in at_size]
    return jobs


def run_job(name: str, overrides: list[str], work: Path, steps: list[str], env: dict) -> dict:
    """One job through run.py; its outcome.json (status, metrics, tags) and wall time."""
    job_dir = work / name
    cmd = [sys.executable, str(PROJECT_DIR / "run.py"), *overrides, *steps]
    cmd += [f"hydra.run.dir={job_dir}"]
    started = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    wall_s = time.monotonic() - started
    outcome_file = job_dir / "outcome.json"
    if not outcome_file.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return {"name": name, "status": "FAILED", "failure_reason": tail[0], "wall_s": wall_s}
    outcome = json.loads(outcome_file.read_text())
    if (job_dir / "resolved.yaml").exists() and name.startswith("train-"):
        outcome.update(efficiency_prediction(job_dir, outcome.get("metrics") or {}))
    return {"name": name, "wall_s": wall_s, **outcome}


def efficiency_prediction(job_dir: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """The job's step time predicted by the efficiency model too (side by side with the
    measured parts it logged), and the measured parts themselves."""
    job = Job.load(job_dir)
    hardware = job.hardware
    by_efficiency = job.replace(hardware=dataclasses.replace(hardware, time_source="efficiency"))
    pred = predict(by_efficiency)
    if pred.step_time_s is not None:
        metrics["pred_step_time_s_efficiency"] = pred.step_time_s
    measured = job.measured
    parts = {key: getattr(measured, key) for key in (*STEP_PARTS_FIELDS, *ENGINE_PARTS_FIELDS)}
    error = measured.time_calibration_error
    return {"time_source": hardware.time_source, "step_parts": parts, "time_error": error}


def row_of(job: dict[str, Any]) -> list[str]:
    metrics = job.get("metrics") or {}
    cells = [job["name"], job["status"]]
    for _, key, fmt in COLUMNS:
        cells.append(fmt.format(metrics[key]) if key in metrics else "-")
    cells.append(job.get("precision", "-"))
    cells.append(job.get("optimizer_impl", "-"))
    reason = job.get("failure_reason", "")
    cells.append(reason[:120].replace("|", "/"))
    return cells


def markdown(summary: dict[str, Any]) -> str:
    headers = ["job", "status", *(c for c, _, _ in COLUMNS), "precision", "optimizer", "reason"]
    lines = [
        f"# distbench GPU check ({summary['date']})",
        "",
        f"Device: {summary['device_name']} × {summary['num_gpus']}; command: "
        f"`{summary['command']}`; {summary['num_finished']} of {summary['num_jobs']} jobs "
        "finished.",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
    ]
    lines += ["| " + " | ".join(row_of(job)) + " |" for job in summary["jobs"]]
    bare = summary.get("bare_comparison")
    lines += ["", f"Bare-script comparison: {json.dumps(bare) if bare else 'not run'}", ""]
    return "\n".join(lines)


def bare_comparison(
    device: str, world_size: int, model: str, batch: str, dtype: str, work: Path
) -> dict[str, Any]:
    """harness_overhead.py --quick on the same device, model, batch and dtype: distbench's
    fixed cost per job against a bare torchrun script (DDP and DeepSpeed ZeRO-0)."""
    cmd = [sys.executable, str(PROJECT_DIR / "benchmarks" / "harness_overhead.py"), "--quick"]
    cmd += ["--device", device, "--world-size", str(world_size), "--model", model]
    cmd += ["--batch", batch, "--dtype", dtype, "--out-dir", str(work / "harness")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    keys = ("fixed_cost_s", "step_p50_ratio", "bare_wall_s", "distbench_wall_s", "pass")
    return {
        "world_size": world_size,
        **{strategy: {k: f.get(k) for k in keys} for strategy, f in figures["strategies"].items()},
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--model", help="default: llama_1b on cuda, tiny on cpu")
    parser.add_argument("--batch", help="default: medium on cuda, small on cpu")
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--num-warmup-steps", type=int, default=3)
    parser.add_argument("--no-bare", action="store_true", help="skip the bare-script comparison")
    parser.add_argument(
        "--world-sizes", help="comma-separated, e.g. 1,8 (default: 1 and powers of two that fit)"
    )
    parser.add_argument("--out-dir", type=Path, default=PROJECT_DIR / "benchmarks" / "results")
    parser.add_argument("--only", help="comma-separated job names of the grid: run just those")
    parser.add_argument("--list", action="store_true", help="print the grid's job names, run none")
    parser.add_argument("--work-dir", type=Path, help="an empty dir to keep job dirs and the store")
    parser.add_argument(
        "--time-source",
        choices=("measured", "efficiency"),
        default="measured",
        help="hardware.time_source of the training jobs (the efficiency model is shown beside)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    names = gpu_names()
    if args.device == "cuda" and not names:
        sys.exit(
            "gpu_check: no CUDA device visible (nvidia-smi lists none); --device cpu runs "
            "the same grid on CPU ranks"
        )
    cuda = args.device == "cuda"
    num_gpus = len(names) if cuda else 2
    model = args.model or ("llama_1b" if cuda else "tiny")
    batch = args.batch or ("medium" if cuda else "small")
    dtype = "bf16" if cuda else "fp32"
    steps = [f"workload.num_warmup_steps={args.num_warmup_steps}"]
    steps += [f"workload.num_steps={args.num_steps}", "hardware=auto" if cuda else "hardware=cpu"]
    sizes = world_sizes(num_gpus)
    if args.world_sizes:
        sizes = [int(size) for size in args.world_sizes.split(",")]
    planned = grid(sizes, model, batch, dtype, args.time_source)
    if args.list:
        print("\n".join(name for name, _ in planned))
        return
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {name for name, _ in planned})
        if unknown:
            sys.exit(f"gpu_check: --only {','.join(unknown)}: not in the grid (see --list)")
        planned = [(name, overrides) for name, overrides in planned if name in wanted]
    jobs = []
    with work_dir(args.work_dir, "gpu_check_") as work:
        env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
        for name, overrides in planned:
            jobs.append(run_job(name, overrides, work, steps, env))
            job = jobs[-1]
            print(
                f"gpu_check: {name}: {job['status']} ({job['wall_s']:.0f} s) "
                f"{job.get('failure_reason', '')[:200]}",
                flush=True,
            )
        bare = None
        if not args.no_bare:
            bare = bare_comparison(args.device, min(num_gpus, 2), model, batch, dtype, work)
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python benchmarks/gpu_check.py", *sys.argv[1:]]),
        "device": args.device,
        "device_name": names[0] if cuda else "cpu",
        "num_gpus": num_gpus if cuda else 0,
        "model": model,
        "batch": batch,
        "num_jobs": len(jobs),
        "num_finished": sum(job["status"] == "FINISHED" for job in jobs),
        "jobs": jobs,
        "bare_comparison": bare,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = "gpu_check_only" if args.only else "gpu_check"  # a rerun keeps the full summary
    (args.out_dir / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    (args.out_dir / f"{stem}.md").write_text(markdown(summary))
    print(markdown(summary))
    print(json.dumps({k: v for k, v in summary.items() if k != "jobs"}))


if __name__ == "__main__":
    main()
