"""Timing and progress helpers of the raw torch.distributed workloads (gemm, collectives).

Every timed call is bracketed by a barrier and a device sync, so each rank's clock covers the
same work; combine() then takes the slowest rank per iteration. Rank 0 appends progress lines
in the train workload's format ({"phase", "step", "num_steps", "step_time_s", "time_unix_s"} and the
workload's own figures) so the orchestrator's step lines move; raw workloads have no loss.

    python -c "from distbench.workloads.timing import *; print(slowest_per_iteration([[1], [2]]))"
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distbench.ranks.models import DTYPE_NAMES


def torch_dtype(name: str):
    """torch.float32 / bfloat16 / float16 for fp32 / bf16 / fp16."""
    import torch

    return getattr(torch, DTYPE_NAMES[name])


def time_call(fn: Callable[[], Any], device: str) -> float:
    """Seconds one call of fn takes on this rank: barrier + device sync before, sync after."""
    import torch.distributed as dist

    from distbench.ranks.dist import synchronize

    dist.barrier()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def time_iterations(
    fn: Callable[[], Any], device: str, num_warmup: int, num_timed: int
) -> list[float]:
    """num_warmup untimed calls, then the seconds of each of num_timed calls (this rank)."""
    for _ in range(num_warmup):
        time_call(fn, device)
    return [time_call(fn, device) for _ in range(num_timed)]


def slowest_per_iteration(per_rank_times: list[list[float]]) -> list[float]:
    """Iteration i lasts as long as its slowest rank: max over ranks, iteration by iteration."""
    return [max(times) for times in zip(*per_rank_times, strict=True)]


class Progress:
    """Every rank's heartbeat (the orchestrator's stall watchdog) and rank 0's progress.jsonl:
    one line per finished point (`step` of `num_steps`; the bar takes its total from the line)."""

    def __init__(self, run_dir: Path, rank: int, num_points: int) -> None:
        self.run_dir, self.rank = run_dir, rank
        self.file = (run_dir / "progress.jsonl").open("a") if rank == 0 else None
        self.num_points, self.done = num_points, 0

    def point(self, phase: str, time_s: float, fields: dict[str, float] | None = None) -> None:
        """One finished point: its phase, time, and the workload's own figures (`fields`,
        e.g. collectives' size_bytes and busbw_gbps) in its progress line."""
        from distbench.ranks.dist import heartbeat

        self.done += 1
        heartbeat(self.run_dir, self.rank, self.done)
        if self.file is None:
            return
        line = {
            "phase": phase,
            "step": self.done,
            "num_steps": self.num_points,
            "step_time_s": time_s,
            **(fields or {}),
            "time_unix_s": time.time(),  # when the point ended: its MLflow timestamp
        }
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
