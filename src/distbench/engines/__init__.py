"""Strategy engines as plug-ins: each engine module registers an `EngineSpec`, the way each
workload registers a `WorkloadSpec` (distbench/workloads/__init__.py).

An engine module `distbench.engines.<module>` (or any importable module named in
$DISTBENCH_PLUGINS, comma-separated) holds, without importing torch at import time:

    SPEC = register(EngineSpec(name, module=__name__, strategy_schema=MyStrategyConfig))
    resolve_zero_stage(strategy, chosen)   # the one place its ZeRO stage is worked out (or None)
    check(job)                             # what it cannot run: ConfigError, one line
    initialize(model, job) -> Engine       # on every rank (imports torch there)

Its strategy schema is a `StrategyConfig` subclass (compose/schema.py: name, engine, dp, tp,
pp) with its own fields; `register` stores it in Hydra's ConfigStore as
`schema/strategy_<name>`, which its conf/strategy/*.yaml options extend
(`defaults: [/schema/strategy_<name>@_here_]`): another engine's field is refused by Hydra
when the config is composed. Built in: deepspeed.py (dp, ZeRO-1/2/3, offload, AutoTP,
pipeline) and torch_native.py (single, ddp, fsdp, torch_tp, torch_pp and their 2D/3D
combinations); every module of this package but HELPER_MODULES is imported to find them.
Importing this package or an engine module does not import torch (distbench.job reads the
registry when it resolves a job; tests/unit/test_lean_orchestrator.py checks it).

    python -c "from distbench import engines; print(sorted(engines.registry()))"
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

PLUGINS_ENV = "DISTBENCH_PLUGINS"  # the variable workloads/__init__.py reads too
# Modules here that are no engine (the engines import them on the ranks; they import torch).
HELPER_MODULES = ("pipeline",)
# The rank grid's dimensions, slowest first: rank = (dp * pp + pp_rank) * tp + tp_rank for the
# torch engine (picotron's `arange(world).view(dp, pp, tp)`).
GRID_DIMS = ("dp", "pp", "tp")


@dataclass(frozen=True)
class EngineSpec:
    """What the rest of distbench knows of an engine."""

    name: str  # the value of strategy.engine
    module: str  # its module: resolve_zero_stage, check, initialize
    strategy_schema: type  # its `strategy` node: a StrategyConfig subclass with its fields


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


_REGISTRY: dict[str, EngineSpec] = {}


def schema_name(engine: str) -> str:
    """The ConfigStore name of an engine's strategy schema, in the `schema` group."""
    return f"strategy_{engine}"


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine and store its strategy schema as `schema/strategy_<name>`; returns it."""
    from hydra.core.config_store import ConfigStore

    _REGISTRY[spec.name] = spec
    ConfigStore.instance().store(
        group="schema", name=schema_name(spec.name), node=spec.strategy_schema
    )
    return spec


def discover() -> None:
    """Import every engine module of this package and every plug-in named in
    $DISTBENCH_PLUGINS."""
    found = pkgutil.iter_modules(__path__)
    names = [f"{__name__}.{m.name}" for m in found if m.name not in HELPER_MODULES]
    names += [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        importlib.import_module(name)


def registry() -> dict[str, EngineSpec]:
    discover()
    return dict(_REGISTRY)


def register_options(_config_store: Any = None) -> None:
    """Store every engine's strategy schema (register() does it on import)."""
    discover()


def get_spec(engine: str) -> EngineSpec:
    """The spec of a strategy.engine value, or ConfigError naming the engines there are."""
    from distbench.compose.checks import one_of

    specs = registry()
    one_of("strategy.engine", engine, tuple(sorted(specs)))
    return specs[engine]


def get(engine: str) -> ModuleType:
    """The module of an engine name: `check(job)`, `resolve_zero_stage(strategy, chosen)` and
    `initialize(model, job)` (importing it does not import torch)."""
    return importlib.import_module(get_spec(engine).module)
