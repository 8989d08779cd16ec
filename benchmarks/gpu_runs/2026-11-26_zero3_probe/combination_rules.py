"""How ZeRO-3's probed host work combines with the traced parts: each ZeRO-3 job of this folder
re-predicted with the committed rule (the engine's host time added to max(device, host):
figures/step_time.measured_compute_s) and with the alternative max(device, host + engine),
against its measured median step.

    python benchmarks/gpu_runs/2026-11-26_zero3_probe/combination_rules.py > combination_rules.txt
"""

import json
from pathlib import Path

from distbench.figures import job_terms
from distbench.figures.predict import predict
from distbench.job import Job

HERE = Path(__file__).parent
committed = job_terms.measured_compute_s  # what figures/job_terms.py calls


def engine_inside_the_max(device, device_s, host_s, tp, pp, m, engine_host_s=0.0):
    return m * max(device_s / (tp * pp), host_s / pp + engine_host_s)


for run in ("h200", "h100_a", "h100_b"):
    for job_dir in sorted((HERE / run / "jobs").glob("*zero3*")):
        job = Job.load(job_dir)
        measured = json.loads((job_dir / "outcome.json").read_text())["metrics"]["step_time_s_p50"]
        hw = job.measured
        job_terms.measured_compute_s = committed
        added = predict(job).step_time_s
        job_terms.measured_compute_s = engine_inside_the_max
        inside = predict(job).step_time_s
        device_s = hw.micro_batch_gemm_s + hw.micro_batch_attention_s + hw.micro_batch_other_s
        print(
            f"{run:6s} {job_dir.name:24s} measured {measured:.3f} s  "
            f"added {100 * (added / measured - 1):+6.1f} %  "
            f"max {100 * (inside / measured - 1):+6.1f} %"
            f"  per micro-batch: device {device_s:.3f} host {hw.micro_batch_host_s:.3f}"
            f" engine {hw.micro_batch_engine_host_s:.3f} s"
        )
