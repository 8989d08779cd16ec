"""Workloads a worker rank runs, by name. Each is a module with three functions:

    run(cfg, layout, run_dir, device) -> dict        # on every rank: this rank's raw figures
    combine(per_rank: list[dict]) -> dict             # on rank 0: the body of result.json
    measure(resolved: dict, layout, result) -> Measured   # in the orchestrator: the metrics

`run` may import torch; `combine` and `measure` must not (the orchestrator stays light).

    python -c "from distbench.workloads import load; print(load('train'))"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

WORKLOAD_MODULES = {
    "train": "distbench.workloads.train.workload",
    "gemm": "distbench.workloads.gemm.workload",
    "collectives": "distbench.workloads.collectives.workload",
    "inference": "distbench.workloads.inference.workload",
}


@dataclass
class Measured:
    """What a job logs: scalar metrics, stepped series (name, value, step), extra artifacts."""

    metrics: dict[str, float]
    series: list[tuple[str, float, int]] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)


def load(name: str) -> ModuleType:
    """The module of a workload name (validate() has checked the name)."""
    return importlib.import_module(WORKLOAD_MODULES[name])
