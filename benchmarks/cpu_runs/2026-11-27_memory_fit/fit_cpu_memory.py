"""The CPU memory constants of figures/cpu_rss.py, fitted together on one grid and checked on
others: CPU_RUNTIME_GIB and CPU_COMM_RUNTIME_GIB (per engine), CPU_SHARDED_RUNTIME_GIB and
CPU_HEAP_RETENTION_OF_ACTIVATIONS, from the job dirs kept here (resolved.yaml + outcome.json).

    .venv/bin/python benchmarks/cpu_runs/2026-11-27_memory_fit/fit_cpu_memory.py

The predicted CPU peak is linear in each constant (they add to the resident terms), so each
job's prediction is split into the part no constant touches and one column per constant (the
prediction with that constant at 1 and the others at 0, less that part); the constants are the
least-squares fit of measured peak − that part on the fit jobs. Fit: `fit/` (model=tiny, the
strategies of both engines at world_size 1 and 2, batch=small and medium, 2026-11-27 19:06-19:25,
commit bacb8bd). Checked, with the fitted values, on other sittings: `check_mb8/` (one
micro-batch of 8 × 512 per step, same sitting), `check_pvm/` (`benchmarks/plan_vs_measured.py`'s
default grid at 19:36-19:50 with the fitted values in the source: tiny, re-runs of fit
configurations, and gpt2_2l, whose 50k-token vocabulary the fit has none of; its table is
plan_vs_measured.md there), and the README's two grids that evening (16:33-17:30, 26ce8fe) and
that morning (older code, the DeepSpeed rank's init 0.1 GiB larger): world_size 4, pipelines
and offload, which the fit has none of, beside re-runs of fit configurations. Prints one JSON
document: the fitted values, the values in the source, and every job's error with the fitted
values (kept in fit.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))

from distbench.figures import cpu_rss  # noqa: E402
from distbench.figures.metrics import GIB  # noqa: E402
from distbench.figures.predict import predict  # noqa: E402
from distbench.job import Job  # noqa: E402

EVENING = HERE.parent / "2026-11-27_readme_grids" / "evening"
FIT = [HERE / "fit"]
MORNING = HERE.parent / "2026-11-27_readme_grids"
CHECK = {
    "mb8": [HERE / "check_mb8"],
    "plan_vs_measured": [HERE / "check_pvm"],
    "readme_grids": [EVENING / g for g in ("A_rerun", "A", "B")],
    "readme_grids_morning": [MORNING / g for g in ("A", "B")],
}
TARGET_PCT = 15.0
# One column per constant: (its name in figures.cpu_rss, the key of a per-engine dict or None).
COLUMNS = (
    ("CPU_RUNTIME_GIB", "torch"),
    ("CPU_RUNTIME_GIB", "deepspeed"),
    ("CPU_COMM_RUNTIME_GIB", "torch"),
    ("CPU_COMM_RUNTIME_GIB", "deepspeed"),
    ("CPU_SHARDED_RUNTIME_GIB", None),
    ("CPU_HEAP_RETENTION_OF_ACTIVATIONS", None),
)


def set_constants(values: list[float]) -> None:
    """figures.cpu_rss's constants set to `values` in COLUMNS' order."""
    for name in {n for n, _ in COLUMNS}:
        if isinstance(getattr(cpu_rss, name), dict):
            setattr(cpu_rss, name, {})
    for (name, key), value in zip(COLUMNS, values, strict=True):
        if key is None:
            setattr(cpu_rss, name, value)
        else:
            getattr(cpu_rss, name)[key] = value


def predicted_gib(job: Job, values: list[float]) -> float:
    set_constants(values)
    return predict(job).mem.total / GIB


def jobs(folders: list[Path]) -> list[tuple[str, Job, float]]:
    """(name, job, measured peak GiB) of every FINISHED job dir under the folders."""
    out = []
    for folder in folders:
        for job_dir in sorted(folder.iterdir(), key=lambda d: d.name):
            outcome = job_dir / "outcome.json"
            if not outcome.exists():
                continue
            metrics = json.loads(outcome.read_text()).get("metrics", {})
            if "peak_mem_gib" not in metrics:
                continue
            job = Job.load(job_dir)
            batch = f"{job.batch.micro_batch_size}x{job.batch.seq_len}x{job.batch.grad_accum_steps}"
            name = f"{folder.name}/{job_dir.name} {job.strategy.name} ws{job.world_size} {batch}"
            out.append((name, job, metrics["peak_mem_gib"]))
    return out


def design(job: Job) -> tuple[float, list[float]]:
    """(the prediction no constant touches, each constant's column) in GiB."""
    zeros = [0.0] * len(COLUMNS)
    base = predicted_gib(job, zeros)
    columns = []
    for i in range(len(COLUMNS)):
        unit = list(zeros)
        unit[i] = 1.0
        columns.append(predicted_gib(job, unit) - base)
    return base, columns


def errors(rows: list[tuple[str, Job, float]], values: list[float]) -> dict[str, float]:
    return {n: round(100 * (predicted_gib(j, values) / m - 1), 1) for n, j, m in rows}


def within(errs: dict[str, float]) -> str:
    return f"{sum(abs(e) <= TARGET_PCT for e in errs.values())} of {len(errs)}"


def main() -> None:
    in_source = [float(getattr(cpu_rss, n)[k] if k else getattr(cpu_rss, n)) for n, k in COLUMNS]
    saved = {n: getattr(cpu_rss, n) for n, _ in COLUMNS}
    saved = {n: dict(v) if isinstance(v, dict) else v for n, v in saved.items()}
    fit_rows = jobs(FIT)
    bases, columns = zip(*(design(job) for _, job, _ in fit_rows), strict=True)
    measured = np.array([m for _, _, m in fit_rows])
    fitted, *_ = np.linalg.lstsq(np.array(columns), measured - np.array(bases), rcond=None)
    fitted = [round(float(v), 3) for v in fitted]
    report = {
        "constants": [f"{n}[{k}]" if k else n for n, k in COLUMNS],
        "fitted": fitted,
        "in_source": in_source,
        "fit_err_pct": errors(fit_rows, fitted),
    }
    report["fit_within_15pct"] = within(report["fit_err_pct"])
    for label, folders in CHECK.items():
        rows = jobs(folders)
        report[f"{label}_err_pct"] = errors(rows, fitted)
        report[f"{label}_within_15pct"] = within(report[f"{label}_err_pct"])
    for name, value in saved.items():
        setattr(cpu_rss, name, value)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
