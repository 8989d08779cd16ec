"""A job, resolved once: the composed Hydra config → a frozen, typed `Job`.

`resolve_job()` is the only place that dispatches on a name: it looks the workload up in the
workload registry and the engine in the engine registry, resolves the layout (degrees and the
ZeRO stage, once), the topology, the hardware figures and DeepSpeed's zero_optimization block,
and runs the checks (the ones every job shares, then the engine's, then the workload's). It
raises `ConfigError` with one line naming the bad value and what is allowed, before anything is
launched. Everything downstream (the orchestrator, the ranks, the figures, tracking) takes the
`Job`; the ranks rebuild it from the job dir's resolved.yaml with `Job.from_tree`.

    python -c "from tests.conftest import compose_config, CONF_DIR; from distbench.job import \
resolve_job; print(resolve_job(compose_config(['strategy=zero3']), CONF_DIR).layout)"
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from distbench.compose import checks
from distbench.compose.hardware import resolve_hardware
from distbench.compose.schema import (
    ACTIVATION_CHECKPOINTING_MODES,
    BatchConfig,
    ConfigError,
    FaultConfig,
    HardwareConfig,
    LimitsConfig,
    ModelConfig,
    StrategyConfig,
    TrackingConfig,
    WorkloadConfig,
    own_strategy_fields,
)
from distbench.figures.fair import grad_accum_for_global_batch
from distbench.probes.parts import MEASUREMENT_FIELDS, Measurements

# The engine a raw torch.distributed workload (gemm, collectives) is tagged with.
RAW_ENGINE = "torch.distributed"


@dataclass(frozen=True)
class Layout:
    """The degrees that run and DeepSpeed's ZeRO stage (None: no ZeRO, i.e. the torch engine
    or a raw workload)."""

    world_size: int
    dp: int
    tp: int = 1
    pp: int = 1
    zero_stage: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return dataclasses.asdict(self)

    @property
    def tag(self) -> str:
        """The stage as the `zero_stage` tag shows it: a number, or `none`."""
        return "none" if self.zero_stage is None else str(self.zero_stage)


@dataclass(frozen=True)
class Topology:
    """Nodes × ranks per node, and who starts the ranks (as configured; launch resolves auto)."""

    num_nodes: int
    ranks_per_node: int
    rank_launcher: str
    tp_across_nodes: bool


# The keys Job.tree() writes besides the optional nodes (model, strategy, batch, the workload's
# options): any other root key of a resolved.yaml is an extra (+key=value).
TREE_KEYS = frozenset(
    {
        "workload",
        "workload_module",
        "world_size",
        "layout",
        "zero_stage",
        "num_nodes",
        "ranks_per_node",
        "rank_launcher",
        "tp_across_nodes",
        "hardware",
        "measured",
        "tracking",
        "limits",
        "fault",
        "resume",
        "retry_failed",
        "zero_optimization",
        "world_size_requested",
        "activation_checkpointing",
        "activation_checkpointing_every",
    }
)


@dataclass(frozen=True)
class Job:
    """Everything one job runs with, typed. `options` is the active workload's own node (e.g.
    GemmConfig), None when it has none; model, strategy and batch are None for a workload that
    builds no model (gemm, collectives). `zero_optimization` is DeepSpeed's block for the stage
    (None off DeepSpeed). `measured` is what prepare_job measured on this machine (empty until
    then): prediction inputs beside the hardware figures, not part of the signature."""

    workload: WorkloadConfig
    workload_module: str  # the workload's package (distbench.workloads.<name> or a plug-in)
    hardware: HardwareConfig
    tracking: TrackingConfig
    limits: LimitsConfig
    fault: FaultConfig
    layout: Layout
    topology: Topology
    options: Any = None
    options_key: str | None = None  # the config key `options` lives under (gemm, inference, ...)
    model: ModelConfig | None = None
    strategy: StrategyConfig | None = None
    batch: BatchConfig | None = None
    zero_optimization: dict[str, Any] | None = None
    world_size_requested: int | None = None  # strategy=single in a sweep at this world_size
    # Which decoder layers recompute their forward in backward (ACTIVATION_CHECKPOINTING_MODES;
    # selective: every activation_checkpointing_every-th); the engines apply it, figures/ price it.
    activation_checkpointing: str = "none"
    activation_checkpointing_every: int = 2
    resume: bool = False
    retry_failed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # unknown root keys (+key=value)
    measured: Measurements = field(default_factory=Measurements)

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def dtype(self) -> str:
        return self.workload.dtype

    @property
    def device(self) -> str:
        return self.hardware.device

    @property
    def precision(self) -> str:
        """The recipe's tag: fp32, bf16-mixed, bf16-pure (distbench/precision.py). A workload
        without `precision` runs everything in its dtype."""
        from distbench.precision import precision_tag

        return precision_tag(self.dtype, getattr(self.workload, "precision", "pure"))

    @property
    def weights_dtype(self) -> str:
        """The dtype of the model's weights and AdamW states (fp32 under a mixed recipe)."""
        from distbench.precision import weights_dtype

        return weights_dtype(self.dtype, getattr(self.workload, "precision", "pure"))

    @property
    def optimizer_impl(self) -> str | None:
        """torch AdamW's kernel (fused, foreach, for-loop) for a training job, else None."""
        from distbench.precision import resolve_optimizer_impl

        chosen = getattr(self.workload, "optimizer_impl", None)
        return resolve_optimizer_impl(chosen) if chosen else None

    @property
    def engine(self) -> str:
        """deepspeed | torch for model workloads; torch.distributed for raw ones."""
        return self.strategy.engine if self.strategy else RAW_ENGINE

    @property
    def builds_model(self) -> bool:
        return self.model is not None

    @property
    def spec(self) -> Any:
        """The workload's WorkloadSpec."""
        from distbench.workloads import spec_of_module

        return spec_of_module(self.workload_module)

    def tree(self) -> dict[str, Any]:
        """The job as a plain tree: resolved.yaml, the run's params and its signature. Only the
        active workload's node appears (a training run carries no gemm.* keys)."""
        tree: dict[str, Any] = {
            "workload": _plain(self.workload),
            "workload_module": self.workload_module,
            "world_size": self.world_size,
            "layout": self.layout.as_dict(),
            "zero_stage": self.layout.zero_stage,
            "num_nodes": self.topology.num_nodes,
            "ranks_per_node": self.topology.ranks_per_node,
            "rank_launcher": self.topology.rank_launcher,
            "tp_across_nodes": self.topology.tp_across_nodes,
            "hardware": _plain(self.hardware),
            "measured": _plain(self.measured),
            "tracking": _plain(self.tracking),
            "limits": _plain(self.limits),
            "fault": _plain(self.fault),
            "resume": self.resume,
            "retry_failed": self.retry_failed,
            **self.extra,
        }
        for key in ("model", "strategy", "batch"):
            if getattr(self, key) is not None:
                tree[key] = _plain(getattr(self, key))
        if "batch" in tree and tree["batch"].get("global_batch_tokens") is None:
            tree["batch"].pop("global_batch_tokens", None)  # unset: the signature stays as it was
        if self.zero_optimization is not None:
            tree["zero_optimization"] = dict(self.zero_optimization)
        if self.options_key:
            tree[self.options_key] = _plain(self.options)
        if self.world_size_requested:
            tree["world_size_requested"] = self.world_size_requested
        if self.builds_model:  # hashed only when not `none` (tracking/signature.py)
            tree["activation_checkpointing"] = self.activation_checkpointing
            tree["activation_checkpointing_every"] = self.activation_checkpointing_every
        return tree

    @classmethod
    def from_tree(cls, tree: dict[str, Any]) -> Job:
        """The Job a rank runs: rebuilt from resolved.yaml (what `tree()` wrote)."""
        from distbench import workloads

        tree = _measured_apart(copy.deepcopy(tree))
        spec = workloads.spec_of_module(tree["workload_module"])
        options_key = spec.options_key
        optional = {
            "model": ModelConfig,
            "strategy": _strategy_schema(tree.get("strategy")),
            "batch": BatchConfig,
        }
        if tree.get("strategy"):  # the other engine's unused fields of an older resolved.yaml
            tree["strategy"] = own_strategy_fields(optional["strategy"], tree["strategy"])
        kwargs = {key: _typed(kind, tree[key]) for key, kind in optional.items() if key in tree}
        known = {*TREE_KEYS, options_key, *optional}
        return cls(
            workload=_typed(spec.schema, tree["workload"]),
            workload_module=tree["workload_module"],
            hardware=_typed(HardwareConfig, tree["hardware"]),
            measured=_typed(Measurements, tree["measured"]),
            tracking=_typed(TrackingConfig, tree["tracking"]),
            limits=_typed(LimitsConfig, tree["limits"]),
            fault=_typed(FaultConfig, tree["fault"]),
            layout=Layout(**tree["layout"]),
            topology=Topology(
                num_nodes=tree["num_nodes"],
                ranks_per_node=tree["ranks_per_node"],
                rank_launcher=tree["rank_launcher"],
                tp_across_nodes=tree["tp_across_nodes"],
            ),
            options=_typed(spec.options_schema, tree[options_key]) if options_key else None,
            options_key=options_key,
            zero_optimization=tree.get("zero_optimization"),
            world_size_requested=tree.get("world_size_requested"),
            activation_checkpointing=tree.get("activation_checkpointing", "none"),
            activation_checkpointing_every=tree.get("activation_checkpointing_every", 2),
            resume=tree["resume"],
            retry_failed=tree["retry_failed"],
            extra={k: v for k, v in tree.items() if k not in known},
            **kwargs,
        )

    def to_yaml(self) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(self.tree()))

    @classmethod
    def load(cls, run_dir: Path) -> Job:
        """The Job of a job dir (its resolved.yaml)."""
        tree = OmegaConf.to_container(OmegaConf.load(Path(run_dir) / "resolved.yaml"))
        return cls.from_tree(tree)

    def replace(self, **changes: Any) -> Job:
        return dataclasses.replace(self, **changes)

    def with_hardware(self, **changes: Any) -> Job:
        """The job with these HardwareConfig fields changed."""
        return self.replace(hardware=dataclasses.replace(self.hardware, **changes))

    def with_measured(self, **changes: Any) -> Job:
        """The job with these Measurements fields changed."""
        return self.replace(measured=self.measured.replace(**changes))


def _measured_apart(tree: dict[str, Any]) -> dict[str, Any]:
    """The tree with its `measured` node: a resolved.yaml written before it held the
    measurements under `hardware`, from where they move over."""
    hardware = tree.get("hardware") or {}
    moved = {key: hardware.pop(key) for key in MEASUREMENT_FIELDS if key in hardware}
    tree["measured"] = {**moved, **(tree.get("measured") or {})}
    return tree


def _plain(node: Any) -> Any:
    return dataclasses.asdict(node) if dataclasses.is_dataclass(node) else node


def _typed(kind: type, values: Any) -> Any:
    """A schema dataclass from a plain dict; keys the schema lacks are refused by name."""
    names = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{kind.__name__} has no key {unknown[0]!r}; known: {sorted(names)}")
    return kind(**values)


def _strategy_schema(node: dict[str, Any] | None) -> type:
    """The schema of a strategy node: its engine's (the engine registry's strategy_schema)."""
    from distbench import engines

    return engines.get_spec(node.get("engine")).strategy_schema if node else StrategyConfig


def _node(cfg: DictConfig, key: str, kind: type) -> Any:
    """cfg[key] (resolved) as its schema dataclass."""
    return _typed(kind, OmegaConf.to_container(cfg[key], resolve=True, throw_on_missing=True))


def baseline_on_one_device(cfg: DictConfig) -> tuple[DictConfig, int | None]:
    """`strategy=single` is the one-device baseline of every grid: in a sweep at world_size N it
    runs on one rank (so `strategy=single,ddp,fsdp world_size=2` compares against it). Returns
    the config to run (a copy with world_size=1) and the world_size that was asked for, or the
    config itself and None when nothing changes."""
    strategy = cfg.get("strategy")
    if strategy is None or strategy.get("name") != "single" or cfg.world_size == 1:
        return cfg, None
    pinned = copy.deepcopy(cfg)
    pinned.world_size = 1
    pinned.num_nodes = None
    return pinned, int(cfg.world_size)


ROOT_KEYS = {
    "model",
    "strategy",
    "batch",
    "workload",
    "hardware",
    "tracking",
    "limits",
    "fault",
    "world_size",
    "num_nodes",
    "rank_launcher",
    "tp_across_nodes",
    "zero_stage",
    "zero_optimization",
    "activation_checkpointing",
    "activation_checkpointing_every",
    "resume",
    "retry_failed",
    "experiments",
}


def resolve_job(cfg: DictConfig, conf_dir: Path) -> Job:
    """The composed config → the Job that runs, or ConfigError (one line, numbers in it).
    Pure: no subprocess, no MLflow store, no probe, no cache. What is measured on this machine
    (measured peaks, links, a workload's step parts) is attached before launch by
    distbench/prepare.py's prepare_job."""
    from distbench import engines, workloads

    spec = workloads.get(cfg.workload.name)
    world_size_requested = None
    if spec.builds_model:  # a raw workload has no strategy to pin
        cfg, world_size_requested = baseline_on_one_device(cfg)
    ws = cfg.world_size
    checks.common(cfg)
    workload = _node(cfg, "workload", spec.schema)
    options = _node(cfg, spec.options_key, spec.options_schema) if spec.options_key else None
    model = strategy = batch = zero_block = None
    if spec.builds_model:
        model = _node(cfg, "model", ModelConfig)
        strategy = _node(cfg, "strategy", engines.get_spec(cfg.strategy.engine).strategy_schema)
        batch = _node(cfg, "batch", BatchConfig)
        checks.model_choices(model, workload)
        dp, tp, pp = checks.resolve_degrees(ws, strategy.dp, strategy.tp, strategy.pp)
        engine = engines.get(strategy.engine)
        zero_stage = engine.resolve_zero_stage(strategy, cfg.zero_stage)
        layout = Layout(world_size=ws, dp=dp, tp=tp, pp=pp, zero_stage=zero_stage)
        batch = batch_for_layout(batch, dp)
        if zero_stage is not None:
            zero_block = zero_optimization_block(
                conf_dir, zero_stage, OmegaConf.to_container(cfg.zero_optimization, resolve=True)
            )
    else:
        layout = Layout(world_size=ws, dp=ws)
    topology = checks.topology(cfg, layout.tp)
    hardware_tree = resolve_hardware(OmegaConf.to_container(cfg.hardware, resolve=True), conf_dir)
    job = Job(
        workload=workload,
        workload_module=spec.module,
        hardware=_typed(HardwareConfig, hardware_tree),
        tracking=_node(cfg, "tracking", TrackingConfig),
        limits=_node(cfg, "limits", LimitsConfig),
        fault=_node(cfg, "fault", FaultConfig),
        layout=layout,
        topology=topology,
        options=options,
        options_key=spec.options_key,
        model=model,
        strategy=strategy,
        batch=batch,
        zero_optimization=zero_block,
        world_size_requested=world_size_requested,
        **activation_checkpointing(cfg, spec.builds_model),
        resume=bool(cfg.resume),
        retry_failed=bool(cfg.retry_failed),
        extra=_extra_keys(cfg, spec.options_key),
    )
    if job.builds_model:
        engines.get(job.engine).check(job)
    spec.check(job)
    return job


def activation_checkpointing(cfg: DictConfig, builds_model: bool) -> dict[str, Any]:
    """The Job's activation_checkpointing fields from the composed config, or ConfigError (one
    line) for a mode outside ACTIVATION_CHECKPOINTING_MODES, a period below 1, or a mode other
    than none for a workload that builds no model. A config composed before the keys existed
    reads as none."""
    mode = cfg.get("activation_checkpointing", "none")
    every = cfg.get("activation_checkpointing_every", 2)
    checks.one_of("activation_checkpointing", mode, ACTIVATION_CHECKPOINTING_MODES)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ConfigError(
            f"activation_checkpointing_every={every!r} must be an integer >= 1 (selective "
            "recomputes every k-th decoder layer)"
        )
    if mode != "none" and not builds_model:
        raise ConfigError(
            f"activation_checkpointing={mode}: workload={cfg.workload.name} builds no model; "
            "use activation_checkpointing=none"
        )
    return {"activation_checkpointing": mode, "activation_checkpointing_every": int(every)}


def batch_for_layout(batch: BatchConfig, dp: int) -> BatchConfig:
    """The batch a layout runs: with batch.global_batch_tokens set, its grad_accum_steps is
    derived for this dp (the micro batch kept); else the batch as composed."""
    if batch.global_batch_tokens is None:
        return batch
    try:
        grad_accum = grad_accum_for_global_batch(
            batch.global_batch_tokens, batch.micro_batch_size, dp, batch.seq_len
        )
    except ValueError as exc:  # one line with the numbers
        raise ConfigError(str(exc)) from None
    return dataclasses.replace(batch, grad_accum_steps=grad_accum)


def _extra_keys(cfg: DictConfig, options_key: str | None) -> dict[str, Any]:
    """Root keys outside the schema (`+tracking_note=...`): kept in resolved.yaml and params."""
    inactive = {"gemm", "collectives", "inference"} - {options_key}
    return {
        key: OmegaConf.to_container(cfg, resolve=True)[key]
        for key in cfg
        if key not in ROOT_KEYS and key != options_key and key not in inactive
    }


def zero_optimization_block(conf_dir: Path, stage: int, extra: dict[str, Any]) -> dict[str, Any]:
    """DeepSpeed's zero_optimization block: conf/ds_zero/<stage>.yaml with `extra` merged over."""
    block = OmegaConf.to_container(OmegaConf.load(conf_dir / "ds_zero" / f"{stage}.yaml"))
    return {**block, **extra, "stage": stage}


def rank_module(job: Job) -> Any:
    """The workload module whose run / combine / measure this job uses."""
    return importlib.import_module(f"{job.workload_module}.workload")
