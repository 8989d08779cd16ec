"""The one constant fitted on the README's CPU grids: figures.memory's
CPU_HEAP_RETENTION_OF_ACTIVATIONS, on half the sharded jobs (grid A's world_size=2 ZeRO-1/2/3),
and the other half's errors with it (grid A's world_size=4 ZeRO jobs, grid B's fsdp and
offload jobs), from the job dirs kept here (resolved.yaml + outcome.json).

    .venv/bin/python benchmarks/cpu_runs/2026-11-27_readme_grids/fit_heap_retention.py

Per fit job: (measured peak − the prediction without the term) / the predicted activations;
the constant is their median. Prints one JSON document.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "src"))

from distbench.figures import memory  # noqa: E402
from distbench.figures.metrics import GIB  # noqa: E402
from distbench.figures.predict import predict  # noqa: E402
from distbench.job import Job  # noqa: E402

FIT = [HERE / "A" / n for n in ("6", "8", "10")]  # zero1, zero2, zero3 at world_size 2
CHECK = [HERE / "A" / n for n in ("7", "9", "11")] + [HERE / "B" / n for n in ("1", "4", "5")]


def measured_and_job(job_dir: Path) -> tuple[float, Job]:
    outcome = json.loads((job_dir / "outcome.json").read_text())
    return outcome["metrics"]["peak_mem_gib"], Job.load(job_dir)


def name(job: Job) -> str:
    return f"{job.strategy.name}-ws{job.world_size}"


def main() -> None:
    saved = memory.CPU_HEAP_RETENTION_OF_ACTIVATIONS
    memory.CPU_HEAP_RETENTION_OF_ACTIVATIONS = 0.0
    ratios = {}
    for job_dir in FIT:
        measured, job = measured_and_job(job_dir)
        mem = predict(job).mem
        ratios[name(job)] = (measured * GIB - mem.total) / mem.activations
    fitted = statistics.median(ratios.values())
    memory.CPU_HEAP_RETENTION_OF_ACTIVATIONS = fitted
    errors = {}
    for job_dir in FIT + CHECK:
        measured, job = measured_and_job(job_dir)
        errors[name(job)] = 100 * (predict(job).mem.total / GIB - measured) / measured
    memory.CPU_HEAP_RETENTION_OF_ACTIVATIONS = saved
    fit_names = list(ratios)
    print(
        json.dumps(
            {
                "fit_ratios": {k: round(v, 3) for k, v in ratios.items()},
                "fitted": round(fitted, 3),
                "in_source": saved,
                "fit_half_err_pct": {k: round(errors[k], 1) for k in fit_names},
                "other_half_err_pct": {
                    k: round(v, 1) for k, v in errors.items() if k not in fit_names
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
