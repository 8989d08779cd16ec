"""Workloads as plug-ins: each is one folder (one package) that registers a `WorkloadSpec`.

A workload package `distbench.workloads.<name>` (or any importable package named in
$DISTBENCH_PLUGINS, comma-separated) holds, without importing torch at import time:

    __init__.py   SPEC = register(WorkloadSpec(name, module=__name__, schema, check, ...))
    workload.py   run(job, run_dir) -> dict         # on every rank: this rank's raw figures
                  combine(per_rank: list[dict]) -> dict   # on rank 0: the body of result.json
                  measure(job, result, job_dir) -> Measured   # in the orchestrator: metrics,
                                                    # series, artifacts, tags (and a failure)

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
    # The metrics its measure() logs that tables, `compare`, `report` and run.py's objective
    # know by name: unit, better direction, label, format (MetricSpec).
    metrics: tuple[MetricSpec, ...] = ()
    # Keys of its own that the run is tagged with, when present: result.json's (combine()'s
    # output) and measure()'s tags (a resumed job's outcome takes them from the earlier run).
    tag_keys: tuple[str, ...] = ()
    # Before launch, in the orchestrator (and in `plan`): what this workload measures on this
    # machine to predict itself (train: step parts, ZeRO-3's engine probe), attached to the
    # Job it returns. None: nothing to measure. Never called by resolve_job.
    prepare: Callable[[Job], Job] | None = None
    # Once its ranks have exited, in the orchestrator: what changes its prediction now that
    # nothing waits on a probe (train: the parts `auto` left unmeasured; on a CPU, the
    # micro-batch re-timed), returned as a new Job (the same object: nothing changed).
    after_run: Callable[[Job], Job] | None = None
    # Files a run logs besides its job dir's (train on DeepSpeed: ds_config.json), written
    # into the folder it is given.
    artifacts: Callable[[Job, Path], list[Path]] | None = None
    # The run name's strategy part from the Job (None: a config that did not resolve) and its
    # tags: e.g. "dp-z2" for train (None: the default, "<workload>-<strategy>", e.g.
    # "inference-tp", or the workload alone for a raw one).
    run_label: Callable[[Job | None, dict[str, str]], str] | None = None
    # The sweep table names its jobs by the strategy alone ("dp"), not "<workload>/<strategy>".
    named_by_strategy: bool = False
    # Its tokens per step are the batch group's global batch (micro × accum × seq_len × dp):
    # the tables work them out from a run's params when its metrics lack them.
    batch_tokens: bool = False


@dataclass(frozen=True)
class MetricSpec:
    """One metric a workload logs, as every table and comparison shows it."""

    name: str  # the public MLflow metric name, unit in it (step_time_s_p50)
    unit: str  # s, tokens/s, GiB, %, USD, ...
    goal: str  # "min": lower is better; "max": higher is better
    label: str  # a column header with its unit: "step time p50 (s)"
    fmt: str = ".4g"  # format spec of a table cell
    headline: bool = False  # in the report's pivots and verdicts
    step_time: bool = False  # computed from the step time: its noise includes the step spread
    column: str | None = None  # its header in the end-of-sweep table (None: not shown there)


@dataclass
class Measured:
    """What a job logs: scalar metrics, stepped series (name, value, step), extra artifacts and
    tags (e.g. train's equivalence check: equivalent=true); `failure` (failure_kind, reason)
    when the ranks completed but their result is not a valid measurement (train: `diverged`):
    the run is FAILED with what it measured."""

    metrics: dict[str, float]
    series: list[tuple[str, float, int]] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    failure: tuple[str, str] | None = None


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


def metric_catalog() -> dict[str, MetricSpec]:
    """Every registered workload's metrics by name: common_metrics.COMMON_METRICS first, then
    each workload's (the first declaration of a name wins)."""
    from distbench.workloads.common_metrics import COMMON_METRICS

    catalog: dict[str, MetricSpec] = {m.name: m for m in COMMON_METRICS}
    for spec in registry().values():
        for metric in spec.metrics:
            catalog.setdefault(metric.name, metric)
    return catalog


def counts_batch_tokens(name: str | None) -> bool:
    """Whether a workload's tokens per step are its batch group's global batch (its spec's
    `batch_tokens`). A run recorded without a workload name is from before the name was
    logged, when training was the only workload: it counts its batch."""
    if name is None:
        return True
    specs = registry()
    return name in specs and specs[name].batch_tokens


def spec_of_module(module: str) -> WorkloadSpec:
    """The spec a workload package registers (the ranks find theirs by resolved.yaml's path)."""
    return importlib.import_module(module).SPEC
