"""Faults injected on purpose into one rank (config `fault.*`), so distbench's own failure
handling is tested with real faults: a rank SIGKILLed, a rank that stops stepping, a rank that
allocates past the memory cap, a rank that raises.

    python run.py fault.kind=kill fault.rank=1 fault.at_step=2     # → FAILED crash, rank 1
"""

from __future__ import annotations

import os
import signal
import time

from distbench.compose.schema import FaultConfig

STALL_S = 3600.0
ALLOC_HOLD_S = 60.0


def data_rank(fault: FaultConfig, dp_rank: int) -> int:
    """The replica whose rows this rank trains on: its own, or replica 0's under the
    `wrong_split` fault (the classic bug of every rank reading the same shard)."""
    return 0 if fault.kind == "wrong_split" else dp_rank


def inject(fault: FaultConfig, rank: int, step: int) -> None:
    """Trigger `fault` if this is its rank and step; otherwise do nothing."""
    if fault.kind in ("none", "wrong_split") or rank != fault.rank or step != fault.at_step:
        return
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "stall":
        time.sleep(STALL_S)
    elif fault.kind == "raise":
        raise RuntimeError(f"fault injected on rank {rank} at step {step}")
    elif fault.kind == "alloc":
        import torch

        # ones() writes every page, so the memory is resident (not just reserved)
        held = torch.ones(int(fault.alloc_gib * 2**30), dtype=torch.uint8)
        time.sleep(ALLOC_HOLD_S)
        del held
