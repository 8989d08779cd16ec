"""`workload.profile_steps=N`: N more training steps after the timed ones, under torch.profiler
(they are not in the step timings), and what the device and the host spent them on.

Rank 0 writes, in the job dir: profile.rank0.txt (the step's wall time, the device's busy time
and idle fraction, then the operators by device time and by host time) and trace.rank0.json
(a Chrome / Perfetto trace). The idle fraction tells a host-bound step (Python hooks, kernel
launches: the device waits) from a device-bound one.

    python run.py strategy=zero3 model=llama_1b workload.dtype=bf16 workload.profile_steps=2
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW_LIMIT = 25


def device_busy_fraction(device_busy_s: float, wall_s: float) -> float:
    """Fraction of the wall time the device ran kernels (kernels on several streams can overlap,
    so this is an upper bound)."""
    return min(1.0, device_busy_s / wall_s) if wall_s > 0 else 0.0


def kernel_time_us(events: Any) -> float:
    """The device's kernel time (µs) in profiler events: the device-side events alone, as the
    profiler's own "Self CUDA time total" counts it (an operator's self device time repeats
    its kernels' time, so summing every event would count each kernel twice)."""
    from torch.autograd import DeviceType

    device_types = (DeviceType.CUDA, DeviceType.PrivateUse1)
    return sum(
        e.self_device_time_total
        for e in events
        if e.device_type in device_types and not e.is_user_annotation
    )


def profile_steps(
    run_dir: Path,
    rank: int,
    device: str,
    num_steps: int,
    step: Callable[[int], Any],
    beat: Callable[[], None],
) -> dict[str, float]:
    """Run `step(i)` for i in range(num_steps) under torch.profiler; rank 0 writes the tables
    and the trace (`beat()` before: tabulating a long trace takes a while, and the watchdog
    must not take it for a stall). Returns profile_step_time_s (per step) and, on a GPU,
    profile_device_busy_frac."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=False) as prof:
        started = time.perf_counter()
        for i in range(num_steps):
            step(i)
        if device == "cuda":
            torch.cuda.synchronize()
        wall_s = (time.perf_counter() - started) / num_steps
    beat()
    averages = prof.key_averages()
    device_busy_s = kernel_time_us(averages) / 1e6 / num_steps
    figures = {"profile_step_time_s": wall_s}
    if device == "cuda":  # CPU ranks have no device timeline
        figures["profile_device_busy_frac"] = device_busy_fraction(device_busy_s, wall_s)
    if rank == 0:
        lines = [
            f"{num_steps} profiled steps after the timed ones: {wall_s:.4f} s per step (wall, "
            "under the profiler)"
            + (
                f"; device kernels {device_busy_s:.4f} s per step "
                f"({100 * figures['profile_device_busy_frac']:.1f} % of the wall time)"
                if device == "cuda"
                else ""
            ),
            "",
        ]
        if device == "cuda":
            lines += [
                "## by device time",
                averages.table(sort_by="self_device_time_total", row_limit=ROW_LIMIT),
                "",
            ]
        lines += [
            "## by host time",
            averages.table(sort_by="self_cpu_time_total", row_limit=ROW_LIMIT),
        ]
        (run_dir / "profile.rank0.txt").write_text("\n".join(lines) + "\n")
        prof.export_chrome_trace(str(run_dir / "trace.rank0.json"))
    return figures
