"""Typed config schemas and their registration with Hydra's ConfigStore.

The YAML files under conf/ hold the values; the dataclasses here hold the types and the
required fields. The checks live in compose/checks.py, the engines and the workloads;
distbench.job turns the composed config into a typed `Job` or raises `ConfigError` (one line:
the bad value and what is allowed) before any process is started.

    python -c "from distbench.compose.schema import register_configs; register_configs()"
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# What the torch engine's strategy.pp_schedule=None runs (engines/torch_native.py; the
# step-time formulas in figures/ read it too).
DEFAULT_PP_SCHEDULE = "gpipe"
DTYPES = ("fp32", "bf16", "fp16")
MODEL_FAMILIES = ("llama", "gpt2")
TRACKING_BACKENDS = ("sqlite", "server", "none")
# hardware.time_source: how the compute term of a prediction is priced (HardwareConfig)
TIME_SOURCES = ("auto", "efficiency", "measured")
ZERO_STAGES = (0, 1, 2, 3)
# activation_checkpointing: which decoder layers recompute their activations in backward (none;
# full: every layer; selective: every activation_checkpointing_every-th layer).
ACTIVATION_CHECKPOINTING_MODES = ("none", "full", "selective")
# Who starts the ranks: auto = srun inside a SLURM allocation, else torchrun on this node;
# local_nodes = num_nodes torchrun agents on this machine (the multi-node path, locally).
RANK_LAUNCHERS = ("auto", "torchrun", "srun", "local_nodes")


class ConfigError(ValueError):
    """A config that cannot run; the message is one line with the numbers in it."""


@dataclass
class ModelConfig:
    """Architecture of a transformers causal LM, built with random weights."""

    name: str = MISSING
    family: str = MISSING  # llama | gpt2
    vocab_size: int = MISSING
    hidden_size: int = MISSING
    num_layers: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    intermediate_size: int = MISSING
    max_position_embeddings: int = MISSING
    tie_word_embeddings: bool = False
    attn_implementation: str = "sdpa"
    # A local directory saved with `save_pretrained`; when set, its weights are loaded.
    pretrained_path: str | None = None


# The built-in engines' own strategy fields with the value that means "not used": what a
# strategy of the other engine reads for them (StrategyConfig's read-only properties).
UNUSED_STRATEGY_FIELDS: dict[str, Any] = {
    "zero_stage": None,  # deepspeed's
    "default_zero_stage": 0,
    "offload_optimizer": "none",
    "offload_param": "none",
    "data_parallel": None,  # torch's
    "pp_schedule": None,
}


def _unused(name: str) -> property:
    return property(lambda _self: UNUSED_STRATEGY_FIELDS[name], doc=f"{name}: not this engine's")


@dataclass
class StrategyConfig:
    """Parallel layout, the fields every engine shares. dp=-1 means "the rest of the ranks":
    world_size // (tp * pp). Each engine subclasses it with its own fields (its
    `strategy_schema`: engines/deepspeed.py, engines/torch_native.py), stored as
    `schema/strategy_<engine>`, which the strategy's YAML extends."""

    name: str = MISSING
    engine: str = MISSING  # a registered engine (distbench.engines.registry())
    dp: int = -1
    tp: int = 1
    pp: int = 1

    # The built-in engines' own fields, read-only here with the value that means "not used",
    # so that code reading a strategy of either engine (figures, plan) reads them by name.
    # Properties are no Hydra fields: composing stays strict (strategy=fsdp
    # strategy.offload_optimizer=cpu is refused); the engine's schema overrides each with a
    # field of its own.
    zero_stage = _unused("zero_stage")
    default_zero_stage = _unused("default_zero_stage")
    offload_optimizer = _unused("offload_optimizer")
    offload_param = _unused("offload_param")
    data_parallel = _unused("data_parallel")
    pp_schedule = _unused("pp_schedule")


def own_strategy_fields(schema: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` less the fields `schema` lacks that hold their unused value: a resolved.yaml
    written when one schema held every engine's fields (data_parallel: null on deepspeed)
    still loads; any other unknown key is left for the schema to refuse."""
    own = {f.name for f in fields(schema)}
    return {
        key: value
        for key, value in values.items()
        if key in own or key not in UNUSED_STRATEGY_FIELDS or value != UNUSED_STRATEGY_FIELDS[key]
    }


@dataclass
class BatchConfig:
    name: str = MISSING
    micro_batch_size: int = MISSING  # sequences per rank per micro-step
    grad_accum_steps: int = 1  # micro-steps per optimizer step (pipeline: micro-batches)
    seq_len: int = MISSING
    # Tokens per optimizer step over all replicas. Set, it replaces grad_accum_steps: each
    # layout accumulates global_batch_tokens / (micro_batch_size × dp × seq_len) micro-steps
    # (job.py), so a grid of layouts compares at one global batch. None: grad_accum_steps.
    global_batch_tokens: int | None = None


@dataclass
class WorkloadConfig:
    """What every workload's `workload` node holds; a workload's schema subclasses it (its
    defaults, its own fields) in workloads/<name>/."""

    name: str = MISSING
    num_warmup_steps: int = 3
    num_steps: int = 10
    dtype: str = "fp32"  # fp32 | bf16 | fp16 (fp16 only on GPU)
    lr: float = 1e-4
    seed: int = 1234


@dataclass
class HardwareConfig:
    """Per-device figures. On CPU one rank is one device (one core, OMP_NUM_THREADS=1)."""

    name: str = MISSING
    device: str = MISSING  # cuda | cpu | auto
    # None: estimated on the host at launch (CPU: cpuinfo MHz x FLOPs/cycle).
    peak_tflops_fp32: float | None = None
    peak_tflops_bf16: float | None = None
    peak_tflops_fp16: float | None = None
    mem_gib: float | None = None
    # Device memory bandwidth, GB/s (HBM; datasheet): the optimizer step's rate
    # (step_time.optimizer_step_s). None: no separate term (CPU: inside the measured efficiency).
    mem_bandwidth_gbps: float | None = None
    interconnect_gbps: float | None = None  # GB/s per device within a node (NVLink, PCIe)
    # GB/s per device between nodes (its NIC: 400 Gb/s InfiniBand NDR = 50 GB/s); a collective
    # whose group spans nodes runs at this rate (figures/communication.py). None: one node only.
    internode_gbytes_per_s: float | None = None
    devices_per_node: int | None = None  # None: not fixed (CPU: one rank per core)
    price_usd_per_hour: float = 0.0
    # The fraction of peak_tflops_<dtype> a dense transformer's training step reaches under
    # time_source=efficiency (model FLOPs utilisation). None: step_time.DEFAULT_EFFICIENCY of the
    # device (GPU 0.4, CPU 0.6). Prediction input only: not part of the run's signature.
    train_efficiency: float | None = None
    # The user's choices of figures; what they measure is attached to the Job before launch
    # (Job.measured, probes/parts.py Measurements; distbench/prepare.py).
    # catalog: the figures above (CPU: the cpuinfo estimate); measured: a timed GEMM on this
    # machine, cached (distbench.probes.calibrate), replaces peak_tflops_<dtype>; a failed
    # calibration sets it back to catalog.
    peak_source: str = "catalog"
    # The device hardware=auto found (compose/hardware.py).
    detected: str | None = None
    # catalog: the link figures above; measured: the α-β fits of the collectives runs of this
    # hardware in the run's own MLflow store (figures/links.py), which predictions prefer.
    # Prediction input only: not part of the run's signature.
    link_source: str = "catalog"
    # efficiency: compute = model FLOPs / (peak x an efficiency constant); measured: a
    # micro-batch's GEMMs and fused attention timed at the model's shapes, its other kernels at
    # the measured memory bandwidth and its host time per kernel (probes/step_parts.py); auto
    # (the default): measured for a training job whose hardware is this machine's device, else
    # efficiency, unless $DISTBENCH_TIME_SOURCE names one (workloads/train/prepare.py,
    # resolve_time_source). After prepare it holds the source resolved. Prediction input only:
    # not part of the run's signature.
    time_source: str = "auto"


@dataclass
class TrackingConfig:
    backend: str = "sqlite"  # sqlite | server | none
    # None: $MLFLOW_TRACKING_URI if set, else sqlite:///<launch dir>/mlflow.db
    uri: str | None = None
    experiment_name: str = "distbench"
    ui_port: int = 5000
    # MLflow's system metrics (system/cpu_utilization_percentage, memory, GPU via pynvml) on each
    # child run while its ranks run, sampled every this many seconds; 0 turns them off.
    system_metrics_interval_s: float = 10.0


@dataclass
class LimitsConfig:
    """When a job is stopped, and why (the failure kind it gets)."""

    timeout_s: float = 1800.0  # wall clock for one job's worker group → timeout
    # Until every rank's first heartbeat (imports, process group, a first DeepSpeed op compile).
    startup_timeout_s: float = 600.0  # until every rank has reached its first step
    stall_timeout_s: float = 300.0  # a rank whose heartbeat is older than this → timeout
    max_mem_gib: float | None = None  # per-rank resident memory cap → oom (None: no cap)


FAULT_KINDS = ("none", "kill", "stall", "alloc", "raise", "wrong_split")


@dataclass
class FaultConfig:
    """A fault injected on purpose into one rank, to test distbench itself (tests, benchmarks)."""

    # none | kill (SIGKILL) | stall (sleeps) | alloc (alloc_gib) | raise | wrong_split (every
    # replica trains on replica 0's rows: a data-sharding bug the equivalence check must catch)
    kind: str = "none"
    rank: int = 0
    at_step: int = 1  # 0-based training step at whose start the fault happens
    alloc_gib: float = 2.0


@dataclass
class Config:
    model: ModelConfig = MISSING
    strategy: StrategyConfig = MISSING  # the chosen strategy's engine schema (a subclass)
    # None: the strategy's stage. The stage's block is conf/ds_zero/<stage>.yaml.
    zero_stage: int | None = None
    # Extra keys of DeepSpeed's zero_optimization block, merged over the stage's block.
    zero_optimization: dict[str, Any] = field(default_factory=dict)
    # One of ACTIVATION_CHECKPOINTING_MODES; selective recomputes every k-th decoder layer of
    # a model (of a pipeline stage), k = activation_checkpointing_every.
    activation_checkpointing: str = "none"
    activation_checkpointing_every: int = 2
    batch: BatchConfig = MISSING
    workload: Any = MISSING  # the chosen workload's own schema (a WorkloadConfig subclass)
    hardware: HardwareConfig = MISSING
    tracking: TrackingConfig = MISSING
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    # The own nodes of the gemm, collectives and inference workloads, under the keys users know
    # (gemm.m, collectives.ops, inference.num_new_tokens): null unless that workload is chosen,
    # when its option (workloads/<name>/) fills them with its schema. A new workload keeps its
    # options in its own `workload` node instead (workloads/__init__.py).
    gemm: Any = None
    collectives: Any = None
    inference: Any = None
    fault: FaultConfig = field(default_factory=FaultConfig)
    world_size: int = 2  # all ranks: num_nodes × ranks per node
    # None: as few nodes as the hardware's devices_per_node allows (1 when it is not fixed)
    num_nodes: int | None = None
    rank_launcher: str = "auto"  # one of RANK_LAUNCHERS
    tp_across_nodes: bool = False  # run a TP group that spans nodes anyway (with a warning)
    # Skip jobs whose signature already has a FINISHED run (FAILED ones too, unless retry_failed).
    resume: bool = False
    retry_failed: bool = False
    # The metric run.py's main() returns, for a Hydra sweeper plugin that searches (Optuna,
    # Nevergrad, Ax): a key of the outcome's metrics. A job without it (FAILED, or refused)
    # returns the worst value (run.py: objective_value). Not part of the run's signature.
    objective: str = "throughput_tokens_per_s"
    # Runs of each configuration, each its own child run (tag `repeat`) with the same signature:
    # compare takes them as samples, the last one logs their spread (orchestrator/repeats.py).
    # Not part of the run's signature.
    repeats: int = 1


# The group each schema validates: conf/<group>/*.yaml extend `/schema/<group>@_here_`. The
# strategy group's schema is its engine's: `/schema/strategy_<engine>@_here_` (engines/).
SCHEMA_NODES: dict[str, type] = {
    "model": ModelConfig,
    "batch": BatchConfig,
    "hardware": HardwareConfig,
    "tracking": TrackingConfig,
}


def register_configs() -> None:
    """Store the schemas, each engine's strategy schema and each workload's option
    (workload=<name>, with its own schema) from their modules. A group's schema is
    `schema/<group>` (a strategy's: `schema/strategy_<engine>`), a group users never pick: each
    YAML option starts with `defaults: [/schema/<group>@_here_]` (validated against it, its
    defaults filled in), and `strategy=` offers only the YAML files."""
    from distbench import engines, workloads

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, node in SCHEMA_NODES.items():
        cs.store(group="schema", name=group, node=node)
    engines.register_options(cs)
    workloads.register_options(cs)
