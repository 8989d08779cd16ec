"""Process-group and device helpers for worker ranks: backend choice, device sync, memory.

On GPU: nccl, CUDA events' sync, CUDA allocator peak. On CPU: gloo, nothing to sync (ops are
synchronous), and the process's peak resident set (VmHWM), whose high-water mark is reset by
writing 5 to /proc/self/clear_refs so a peak can be taken per phase.

    python -c "from distbench.ranks.dist import backend_for; print(backend_for('cpu'))"
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any


def backend_for(device: str) -> str:
    """nccl for CUDA devices, gloo for CPU ranks."""
    return "nccl" if device == "cuda" else "gloo"


def init_process_group(device: str, engine: str) -> None:
    """Join the job's process group (env:// from torchrun); on CUDA, bind this rank to its local
    device first. DeepSpeed jobs join through DeepSpeed, which also sets up its comm layer (on
    CPU its shared-memory all-reduce); the others through torch alone: importing DeepSpeed and
    loading its op cost ~2.5 s per job that DDP, FSDP or a raw collective never uses."""
    import torch

    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if engine == "deepspeed":
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend_for(device))
    else:
        torch.distributed.init_process_group(backend=backend_for(device))


def synchronize(device: str) -> None:
    """Wait for queued device work, so a host timer brackets the work it claims to time."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _proc_status_bytes(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(match.group(1)) * 1024 if match else 0


def reset_peak_memory(device: str) -> None:
    """Start a new peak-memory window."""
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
    else:
        # Where not permitted, the peak covers the whole process life instead.
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")


def current_memory_bytes(device: str) -> int:
    """Memory held now: CUDA allocated bytes, or the process's resident set on CPU."""
    if device == "cuda":
        import torch

        return int(torch.cuda.memory_allocated())
    return _proc_status_bytes("VmRSS")


def peak_memory_bytes(device: str) -> int:
    """Peak since the last reset: CUDA max allocated, or the resident-set high-water mark."""
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    return _proc_status_bytes("VmHWM")


def host_peak_rss_bytes() -> int:
    """The largest resident set this process has had on the host, whatever the device (the
    kernel's ru_maxrss: not reset by reset_peak_memory). On a GPU it shows a host-side copy of
    the model that device memory figures miss."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def heartbeat(run_dir: Path, rank: int, step: int) -> None:
    """Tell the orchestrator this rank is alive and at `step` (it watches the file's mtime)."""
    beats = run_dir / "heartbeat"
    beats.mkdir(exist_ok=True)
    (beats / f"rank{rank}").write_text(str(step))


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
