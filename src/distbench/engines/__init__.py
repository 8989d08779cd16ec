"""Strategy engines: each turns a model and a config into an `Engine` the train loop drives.

An engine module exposes `resolve_zero_stage(strategy, chosen)` (the one place its stage is
worked out), `check(job)` (what it cannot run, one line) and `initialize(model, job) -> Engine`;
`ENGINE_MODULES` maps `strategy.engine` to it (deepspeed.py: dp, ZeRO-1/2/3, offload,
AutoTP, pipeline; torch_native.py: single, ddp, fsdp, torch_tp, torch_pp and their 2D/3D
combinations). Importing this package does not import torch (distbench.job reads it).

    python -c "from distbench.engines import get; print(get('torch'))"
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Protocol

ENGINE_MODULES = {
    "deepspeed": "distbench.engines.deepspeed",
    "torch": "distbench.engines.torch_native",
}
# The rank grid's dimensions, slowest first: rank = (dp * pp + pp_rank) * tp + tp_rank for the
# torch engine (picotron's `arange(world).view(dp, pp, tp)`).
GRID_DIMS = ("dp", "pp", "tp")


class Engine(Protocol):
    """What the train loop needs from a wrapped model.

    `dp_rank` picks this rank's slice of the global batch; `coords` is this rank's
    (dp, pp, tp) position in the rank grid; `train_step` runs one optimizer step over this
    replica's micro-batches (token ids, [micro_batch_size, seq_len] each, on the CPU) and
    returns the mean loss over them (every rank of the replica returns the same value);
    `num_params_local` counts the parameter elements this rank holds."""

    dp_rank: int
    coords: tuple[int, int, int]

    def train_step(self, micro_batches: list[Any]) -> float: ...

    def num_params_local(self) -> int: ...


def get(engine: str) -> ModuleType:
    """The module of an engine name: `check(job)`, `resolve_zero_stage(strategy, chosen)` and
    `initialize(model, job)` (importing it does not import torch)."""
    from distbench.compose.checks import one_of

    one_of("strategy.engine", engine, tuple(ENGINE_MODULES))
    return importlib.import_module(ENGINE_MODULES[engine])
