"""The toy workload's rank code and metrics (see __init__.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from distbench.workloads import Measured


def run(job: Any, run_dir: Path) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    times_s, total = [], 0.0
    for _ in range(job.workload.num_warmup_steps + job.workload.num_steps):
        value = torch.tensor([(rank + 1.0) * job.workload.scale], device=job.device)
        start = time.perf_counter()
        dist.all_reduce(value)
        times_s.append(time.perf_counter() - start)
        total = float(value.item())
    return {"rank": rank, "times_s": times_s[job.workload.num_warmup_steps :], "sum": total}


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sums": [r["sum"] for r in per_rank], "times_s": per_rank[0]["times_s"]}


def measure(job: Any, result: dict[str, Any], job_dir: Path | None = None) -> Measured:
    expected = job.workload.scale * job.world_size * (job.world_size + 1) / 2
    return Measured(
        metrics={"toy_sum": result["sums"][0], "toy_expected_sum": expected},
        series=[("toy_call_s", t, i) for i, t in enumerate(result["times_s"])],
        tags={"toy_sums_agree": str(len(set(result["sums"])) == 1).lower()},
    )
