"""Workloads as plug-ins: each is one folder (one package) that registers a `WorkloadSpec`.

A workload package `distbench.workloads.<name>` (or any importable package named in
$DISTBENCH_PLUGINS, comma-separated) holds, without importing torch at import time:

    __init__.py   SPEC = register(WorkloadSpec(name, module=__name__, schema, check, ...))
    workload.py   run(job, run_dir) -> dict         # on every rank: this rank's raw figures
                  combine(per_rank: list[dict]) -> dict   # on rank 0: the body of result.json
                  measure(job, result, job_dir) -> Measured   # in the orchestrator: metrics,
                                                    # series, artifacts and tags

`register` also stores the Hydra option `workload=<name>` (package _global_), whose `workload`
node is the spec's schema (a WorkloadConfig subclass with its defaults) and, for the three
built-in workloads that have one, its own root node (gemm.*, collectives.*, inference.*: public
keys). A new workload keeps its options in its `workload` node. Nothing outside the folder
changes when a workload is added (tests/e2e/test_plugin_workload.py adds one).

    python -c "from distbench import workloads; print(sorted(workloads.registry()))"
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distbench.job import Job

PLUGINS_ENV = "DISTBENCH_PLUGINS"


@dataclass(frozen=True)
class WorkloadSpec:
    """What the rest of distbench knows of a workload."""

    name: str
    module: str  # its package; run / combine / measure live in <module>.workload
    schema: type  # its `workload` node: a WorkloadConfig subclass with its defaults
    check: Callable[[Job], None]  # raises ConfigError (one line) for what it cannot run
    builds_model: bool = True  # False: plain torch.distributed, no model / strategy / batch
    options_key: str | None = None  # its own root node (gemm, collectives, inference)
    options_schema: type | None = None
    # What an out-of-memory reason names: the knob that sets this job's memory, e.g.
    # "batch.micro_batch_size=8" (None: nothing to name).
    memory_knob: Callable[[Job], str] | None = None


@dataclass
class Measured:
    """What a job logs: scalar metrics, stepped series (name, value, step), extra artifacts and
    tags (e.g. train's equivalence check: equivalent=true)."""

    metrics: dict[str, float]
    series: list[tuple[str, float, int]] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


def host_metrics(result: dict[str, Any]) -> dict[str, float]:
    """What every workload logs beside its own metrics: host_peak_rss_gib, the largest host
    resident set of any rank (result.json's per-rank host_peak_rss_bytes)."""
    per_rank = result.get("host_peak_rss_bytes") or []
    return {"host_peak_rss_gib": max(per_rank) / 2**30} if per_rank else {}


_REGISTRY: dict[str, WorkloadSpec] = {}


def register(spec: WorkloadSpec) -> WorkloadSpec:
    """Add a workload and its Hydra option `workload=<name>`; returns the spec."""
    from hydra.core.config_store import ConfigStore

    _REGISTRY[spec.name] = spec
    node: dict[str, Any] = {"workload": spec.schema}
    if spec.options_key:
        node[spec.options_key] = spec.options_schema
    ConfigStore.instance().store(group="workload", name=spec.name, node=node, package="_global_")
    return spec


def discover() -> None:
    """Import every workload package here and every plug-in named in $DISTBENCH_PLUGINS."""
    names = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if m.ispkg]
    names += [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in names:
        importlib.import_module(name)


def registry() -> dict[str, WorkloadSpec]:
    discover()
    return dict(_REGISTRY)


def register_options(_config_store: Any = None) -> None:
    """Store every workload's Hydra option (register() does it on import)."""
    discover()


def get(name: str) -> WorkloadSpec:
    """The spec of a workload name, or ConfigError naming the ones there are."""
    from distbench.compose.schema import ConfigError

    specs = registry()
    if name not in specs:
        raise ConfigError(f"workload={name!r} is not allowed; choose one of {sorted(specs)}")
    return specs[name]


def spec_of_module(module: str) -> WorkloadSpec:
    """The spec a workload package registers (the ranks find theirs by resolved.yaml's path)."""
    return importlib.import_module(module).SPEC
