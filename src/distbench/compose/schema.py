"""Typed config schemas, their registration with Hydra's ConfigStore, and validate().

The YAML files under conf/ hold the values; the dataclasses here hold the types and the
required fields. `validate()` is pure: it takes the composed config and either returns the
resolved `Layout` or raises `ConfigError` with a one-line message that names the bad value and
what is allowed, before any process is started.

    python -c "from distbench.compose.schema import register_configs; register_configs()"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from distbench.workloads import WORKLOAD_MODULES
from distbench.workloads.collectives.metrics import COLLECTIVES
from distbench.workloads.gemm.metrics import SHARDINGS

ENGINES = ("deepspeed", "torch")
# The torch engine's data parallelism across replicas and its pipeline schedules.
TORCH_DATA_PARALLEL = ("ddp", "fsdp")
PP_SCHEDULES = ("gpipe", "1f1b")
DTYPES = ("fp32", "bf16", "fp16")
MODEL_FAMILIES = ("llama", "gpt2")
TRACKING_BACKENDS = ("sqlite", "server", "none")
OFFLOAD_DEVICES = ("none", "cpu")
ZERO_STAGES = (0, 1, 2, 3)
# Plain torch.distributed workloads: no model, no strategy; every rank is one data shard.
RAW_WORKLOADS = ("gemm", "collectives")
GEMM_MODES = ("sharded", "single")
# DeepSpeed's PipelineEngine refuses ZeRO-2/3: gradients must stay whole per stage.
MAX_ZERO_STAGE_WITH_PIPELINE = 1
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


@dataclass
class StrategyConfig:
    """Parallel layout. dp=-1 means "the rest of the ranks": world_size // (tp * pp)."""

    name: str = MISSING
    engine: str = "deepspeed"
    dp: int = -1
    tp: int = 1
    pp: int = 1
    # A stage the strategy fixes (zero3 -> 3); None lets the zero_stage group choose.
    zero_stage: int | None = None
    default_zero_stage: int = 0
    offload_optimizer: str = "none"  # none | cpu
    offload_param: str = "none"  # none | cpu
    # engine=torch only (None for deepspeed): ddp | fsdp across replicas (None: ddp), and the
    # torch.distributed.pipelining schedule gpipe | 1f1b (None: gpipe).
    data_parallel: str | None = None
    pp_schedule: str | None = None


@dataclass
class BatchConfig:
    name: str = MISSING
    micro_batch_size: int = MISSING  # sequences per rank per micro-step
    grad_accum_steps: int = 1  # micro-steps per optimizer step (pipeline: micro-batches)
    seq_len: int = MISSING


@dataclass
class WorkloadConfig:
    name: str = "train"
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
    interconnect_gbps: float | None = None
    devices_per_node: int | None = None  # None: not fixed (CPU: one rank per core)
    price_usd_per_hour: float = 0.0
    # catalog: the figures above (CPU: the cpuinfo estimate); measured: a timed GEMM on this
    # machine, cached (distbench.compose.calibrate).
    peak_source: str = "catalog"


@dataclass
class TrackingConfig:
    backend: str = "sqlite"  # sqlite | server | none
    # None: $MLFLOW_TRACKING_URI if set, else sqlite:///<launch dir>/mlflow.db
    uri: str | None = None
    experiment_name: str = "distbench"
    ui_port: int = 5000


@dataclass
class LimitsConfig:
    """When a job is stopped, and why (the failure kind it gets)."""

    timeout_s: float = 1800.0  # wall clock for one job's worker group → timeout
    # Until every rank's first heartbeat (imports, process group, a first DeepSpeed op compile).
    startup_timeout_s: float = 600.0
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
class GemmConfig:
    """workload=gemm: C[m, n] = A[m, k] @ B[k, n] over the ranks (distbench.workloads.gemm.metrics)."""

    mode: str = "sharded"  # sharded | single (world_size=1: what fits, what sharding needs)
    sharding: str = "rows"  # rows (A by rows) | cols (B by columns) | k (inner dim + all_reduce)
    m: int = 2048
    k: int = 2048
    n: int = 2048
    dtype: str = "fp32"  # fp32 | bf16 | fp16
    check_max_dim: int = 256  # the correctness check runs each dimension capped at this
    plan_world_size: int = 8  # mode=single: memory per rank reported for this many ranks
    mem_cap_gib: float | None = None  # caps the device memory mode=single plans with


@dataclass
class CollectivesConfig:
    """workload=collectives: nccl-tests' sweep; sizes min_bytes * factor^i up to max_bytes."""

    ops: list[str] = field(default_factory=lambda: list(COLLECTIVES))
    min_bytes: int = 1024
    max_bytes: int | None = None  # None: 4 MiB on CPU, 256 MiB on GPU
    factor: int = 2
    dtype: str = "fp32"
    # Collectives to run as their standard equivalent even where the backend has them.
    emulate: list[str] = field(default_factory=list)


DECODINGS = ("greedy",)


@dataclass
class InferenceConfig:
    """workload=inference: per request batch (a step), every data-parallel replica prefills
    batch_size prompts of prompt_len tokens and decodes num_new_tokens greedily (KV cache)."""

    num_new_tokens: int = 16  # >= 2: the first comes from prefill, the rest are decode steps
    prompt_len: int | None = None  # None: batch.seq_len
    batch_size: int | None = None  # prompts per replica; None: batch.micro_batch_size
    decoding: str = "greedy"  # argmax, no sampling (deterministic across layouts)


@dataclass
class Config:
    model: ModelConfig = MISSING
    strategy: StrategyConfig = MISSING
    # None: the strategy's stage. The stage's block is conf/ds_zero/<stage>.yaml.
    zero_stage: int | None = None
    # Extra keys of DeepSpeed's zero_optimization block, merged over the stage's block.
    zero_optimization: dict[str, Any] = field(default_factory=dict)
    batch: BatchConfig = MISSING
    workload: WorkloadConfig = MISSING
    hardware: HardwareConfig = MISSING
    tracking: TrackingConfig = MISSING
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    gemm: GemmConfig = field(default_factory=GemmConfig)
    collectives: CollectivesConfig = field(default_factory=CollectivesConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    world_size: int = 2  # all ranks: num_nodes × ranks per node
    # None: as few nodes as the hardware's devices_per_node allows (1 when it is not fixed)
    num_nodes: int | None = None
    rank_launcher: str = "auto"  # one of RANK_LAUNCHERS
    tp_across_nodes: bool = False  # run a TP group that spans nodes anyway (with a warning)
    # Skip jobs whose signature already has a FINISHED run (FAILED ones too, unless retry_failed).
    resume: bool = False
    retry_failed: bool = False


def register_configs() -> None:
    """Store the schemas so YAML options can start with `defaults: [base_<group>]`."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, node in [
        ("model", ModelConfig),
        ("strategy", StrategyConfig),
        ("batch", BatchConfig),
        ("workload", WorkloadConfig),
        ("hardware", HardwareConfig),
        ("tracking", TrackingConfig),
    ]:
        cs.store(group=group, name=f"base_{group}", node=node)


@dataclass(frozen=True)
class Layout:
    """What validate() resolved: the degrees and the ZeRO stage that will run."""

    world_size: int
    dp: int
    tp: int
    pp: int
    zero_stage: int

    def as_dict(self) -> dict[str, int]:
        return {
            "world_size": self.world_size,
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "zero_stage": self.zero_stage,
        }


def _one_of(what: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{what}={value!r} is not allowed; choose one of {list(allowed)}")


def _positive(what: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{what}={value} must be >= 1")


def resolve_degrees(world_size: int, dp: int, tp: int, pp: int) -> tuple[int, int, int]:
    """Fill dp=-1 with the rest of the ranks and check dp * tp * pp == world_size."""
    _positive("world_size", world_size)
    _positive("strategy.tp", tp)
    _positive("strategy.pp", pp)
    if dp == -1:
        if world_size % (tp * pp):
            raise ConfigError(
                f"world_size({world_size}) is not divisible by tp({tp}) * pp({pp}); "
                f"use a world_size that is a multiple of {tp * pp}"
            )
        dp = world_size // (tp * pp)
    _positive("strategy.dp", dp)
    if dp * tp * pp != world_size:
        raise ConfigError(f"dp({dp}) * tp({tp}) * pp({pp}) != world_size({world_size})")
    return dp, tp, pp


def resolve_zero_stage(strategy: Any, chosen: int | None) -> int:
    """The stage that runs: pinned by the strategy, chosen by zero_stage=, or the default."""
    pinned = strategy.zero_stage
    if pinned is not None and chosen is not None and int(chosen) != int(pinned):
        raise ConfigError(
            f"strategy={strategy.name} pins zero_stage={pinned} but zero_stage={chosen} was given; "
            f"drop zero_stage= or use strategy=dp zero_stage={chosen}"
        )
    stage = int(next(s for s in (pinned, chosen, strategy.default_zero_stage) if s is not None))
    _one_of("zero_stage", stage, ZERO_STAGES)
    return stage


def validate_model_choices(cfg: Any) -> None:
    """Engine, dtype and model family: the choices of every workload that builds a model."""
    _one_of("strategy.engine", cfg.strategy.engine, ENGINES)
    _one_of("workload.dtype", cfg.workload.dtype, DTYPES)
    _one_of("model.family", cfg.model.family, MODEL_FAMILIES)


def resolve_num_nodes(cfg: Any) -> int:
    """num_nodes, or when unset the fewest nodes whose devices hold world_size ranks."""
    if cfg.num_nodes is not None:
        return cfg.num_nodes
    devices = cfg.hardware.get("devices_per_node")
    return -(-cfg.world_size // devices) if devices else 1


def ranks_per_node(cfg: Any) -> int:
    """Ranks each node starts (validate_topology checks that num_nodes divides world_size)."""
    return cfg.world_size // max(1, resolve_num_nodes(cfg))


def tp_spans_nodes(tp: int, per_node: int) -> bool:
    """Ranks are laid out tp fastest, so a TP group is `tp` consecutive ranks: it stays inside a
    node exactly when tp divides the ranks per node."""
    return tp > 1 and per_node % tp != 0


def validate_topology(cfg: Any, tp: int = 1) -> None:
    """Nodes × ranks per node: num_nodes divides world_size, a node holds no more ranks than the
    hardware has devices, and TP stays inside a node (its all-reduces run every layer: across
    nodes they leave NVLink) unless tp_across_nodes=true."""
    ws, num_nodes = cfg.world_size, resolve_num_nodes(cfg)
    _positive("num_nodes", num_nodes)
    _one_of("rank_launcher", cfg.rank_launcher, RANK_LAUNCHERS)
    if ws % num_nodes:
        raise ConfigError(
            f"world_size({ws}) is not divisible by num_nodes({num_nodes}); "
            "world_size = num_nodes × ranks per node"
        )
    per_node = ws // num_nodes
    devices = cfg.hardware.get("devices_per_node")
    if devices and per_node > devices:
        raise ConfigError(
            f"{per_node} ranks per node (world_size({ws}) / num_nodes({num_nodes})) > "
            f"hardware.devices_per_node({devices}) of {cfg.hardware.name}; "
            f"use num_nodes={-(-ws // devices)} or more"
        )
    if tp_spans_nodes(tp, per_node) and not cfg.tp_across_nodes:
        raise ConfigError(
            f"tp({tp}) does not divide the {per_node} ranks of a node: TP groups would span "
            "nodes; set tp_across_nodes=true to run it anyway"
        )


def validate_run(cfg: Any, tp: int = 1) -> None:
    """What every workload checks: step counts, nodes and ranks per node, limits.* (positive
    times, a positive memory cap) and fault.* (a fault on an existing rank)."""
    _positive("workload.num_steps", cfg.workload.num_steps)
    if cfg.workload.num_warmup_steps < 0:
        raise ConfigError(f"workload.num_warmup_steps={cfg.workload.num_warmup_steps} must be >= 0")
    validate_topology(cfg, tp)
    limits, fault = cfg.limits, cfg.fault
    for what in ("timeout_s", "startup_timeout_s", "stall_timeout_s"):
        if getattr(limits, what) <= 0:
            raise ConfigError(f"limits.{what}={getattr(limits, what)} must be > 0")
    if limits.max_mem_gib is not None and limits.max_mem_gib <= 0:
        raise ConfigError(f"limits.max_mem_gib={limits.max_mem_gib} must be > 0 (or null)")
    _one_of("fault.kind", fault.kind, FAULT_KINDS)
    if fault.kind != "none" and not 0 <= fault.rank < cfg.world_size:
        raise ConfigError(f"fault.rank={fault.rank} is not a rank of world_size({cfg.world_size})")


def validate_engine(cfg: Any, tp: int, pp: int) -> None:
    """What each engine runs: the torch engine has no ZeRO stage, no offload, TP of Llama only,
    untied embeddings under pp and 1F1B with at least pp micro-batches; its fields
    (data_parallel, pp_schedule) are refused on the deepspeed engine."""
    strategy, model, name = cfg.strategy, cfg.model, cfg.strategy.name
    if strategy.engine != "torch":
        for what in ("data_parallel", "pp_schedule"):
            if strategy[what] is not None:
                raise ConfigError(
                    f"strategy.{what}={strategy[what]!r} is the torch engine's; strategy={name} "
                    "runs on deepspeed (ZeRO stages shard, its PipelineEngine runs 1F1B)"
                )
        return
    stage = next(
        (s for s in (cfg.zero_stage, strategy.zero_stage) if s is not None),
        strategy.default_zero_stage or None,
    )
    if stage is not None:
        raise ConfigError(
            f"strategy={name} has no ZeRO stage (zero_stage={stage} given); ZeRO is the "
            "deepspeed engine's (fsdp shards like ZeRO-3)"
        )
    for what in ("offload_optimizer", "offload_param"):
        if strategy[what] != "none":
            raise ConfigError(
                f"strategy={name} has no offload (strategy.{what}={strategy[what]!r}); "
                "offload is the deepspeed engine's (strategy=zero2_offload, zero3_offload)"
            )
    if strategy.data_parallel is not None:
        _one_of("strategy.data_parallel", strategy.data_parallel, TORCH_DATA_PARALLEL)
    if strategy.pp_schedule is not None:
        _one_of("strategy.pp_schedule", strategy.pp_schedule, PP_SCHEDULES)
    if tp > 1 and model.family != "llama":
        raise ConfigError(
            f"strategy={name} with tp({tp}) shards Llama's q/k/v/o and gate/up/down projections; "
            f"model.family={model.family} is not llama (use the deepspeed engine: strategy=tp)"
        )
    if tp > 1 and model.intermediate_size % tp:
        raise ConfigError(
            f"model.intermediate_size({model.intermediate_size}) is not divisible by tp({tp}); "
            "the MLP's gate/up/down are split evenly"
        )
    if pp > 1 and model.tie_word_embeddings:
        raise ConfigError(
            f"model.tie_word_embeddings=true cannot be split over pp({pp}) stages by the torch "
            "engine (embedding and LM head sit on different stages); use strategy=pp"
        )
    micro_batches = cfg.batch.grad_accum_steps
    if pp > 1 and strategy.pp_schedule == "1f1b" and micro_batches < pp:
        raise ConfigError(
            f"strategy.pp_schedule=1f1b needs batch.grad_accum_steps({micro_batches}) >= pp({pp}) "
            "micro-batches; raise grad_accum_steps or use pp_schedule=gpipe"
        )


def baseline_on_one_device(cfg: Any) -> tuple[Any, int | None]:
    """`strategy=single` is the one-device baseline of every grid: in a sweep at world_size N it
    runs on one rank (so `strategy=single,ddp,fsdp world_size=2` compares against it). Returns
    the config to run (a copy with world_size=1) and the world_size that was asked for, or the
    config itself and None when nothing changes."""
    import copy

    if cfg.strategy.name != "single" or cfg.world_size == 1:
        return cfg, None
    pinned = copy.deepcopy(cfg)
    pinned.world_size = 1
    pinned.num_nodes = None
    return pinned, int(cfg.world_size)


def validate(cfg: Any) -> Layout:
    """Check a composed config; return its Layout or raise ConfigError (one line, numbers in it)."""
    model, strategy, batch, workload = cfg.model, cfg.strategy, cfg.batch, cfg.workload
    _one_of("workload", workload.name, tuple(WORKLOAD_MODULES))
    _one_of("tracking.backend", cfg.tracking.backend, TRACKING_BACKENDS)
    _one_of("hardware.peak_source", cfg.hardware.peak_source, ("catalog", "measured"))
    if workload.name in RAW_WORKLOADS:
        return validate_raw(cfg)
    if workload.name == "inference":
        return validate_inference(cfg)
    validate_model_choices(cfg)
    _one_of("strategy.offload_optimizer", strategy.offload_optimizer, OFFLOAD_DEVICES)
    _one_of("strategy.offload_param", strategy.offload_param, OFFLOAD_DEVICES)

    if strategy.name == "single" and cfg.world_size != 1:  # run.py pins it first
        raise ConfigError(
            f"strategy=single runs on one device, got world_size={cfg.world_size}; "
            "use world_size=1 (run.py runs it on one rank in any sweep) or strategy=ddp"
        )
    dp, tp, pp = resolve_degrees(cfg.world_size, strategy.dp, strategy.tp, strategy.pp)
    validate_engine(cfg, tp, pp)
    zero_stage = resolve_zero_stage(strategy, cfg.zero_stage)

    for what in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size"):
        _positive(f"model.{what}", getattr(model, what))
    if model.hidden_size % model.num_heads:
        raise ConfigError(
            f"model.hidden_size({model.hidden_size}) is not divisible by "
            f"model.num_heads({model.num_heads})"
        )
    if model.num_heads % model.num_kv_heads:
        raise ConfigError(
            f"model.num_heads({model.num_heads}) is not divisible by "
            f"model.num_kv_heads({model.num_kv_heads})"
        )
    for heads in ("num_heads", "num_kv_heads"):
        if getattr(model, heads) % tp:
            raise ConfigError(
                f"model.{heads}({getattr(model, heads)}) is not divisible by tp({tp}); "
                f"tensor parallelism splits whole heads"
            )
    if model.num_layers < pp:
        raise ConfigError(
            f"model.num_layers({model.num_layers}) < pp({pp}); every pipeline stage needs a layer"
        )
    if model.num_layers % pp:
        raise ConfigError(
            f"model.num_layers({model.num_layers}) is not divisible by pp({pp}); "
            f"stages would be unbalanced"
        )
    if model.pretrained_path is not None and not Path(model.pretrained_path).is_dir():
        raise ConfigError(f"model.pretrained_path={model.pretrained_path!r} is not a directory")

    _positive("batch.micro_batch_size", batch.micro_batch_size)
    _positive("batch.grad_accum_steps", batch.grad_accum_steps)
    _positive("batch.seq_len", batch.seq_len)
    if batch.seq_len > model.max_position_embeddings:
        raise ConfigError(
            f"batch.seq_len({batch.seq_len}) > model.max_position_embeddings"
            f"({model.max_position_embeddings})"
        )

    if pp > 1 and zero_stage > MAX_ZERO_STAGE_WITH_PIPELINE:
        raise ConfigError(
            f"pipeline parallelism (pp={pp}) runs with zero_stage 0 or 1 only, "
            f"got zero_stage={zero_stage} (DeepSpeed's PipelineEngine does not shard gradients)"
        )
    if strategy.engine == "deepspeed" and pp > 1 and tp > 1:
        raise ConfigError(
            f"tp({tp}) with pp({pp}) is not supported by the deepspeed engine here; "
            "use tp or pp alone with dp"
        )
    if strategy.offload_optimizer != "none" and zero_stage == 0:
        raise ConfigError("strategy.offload_optimizer needs zero_stage >= 1, got zero_stage=0")
    if strategy.offload_param != "none" and zero_stage != 3:
        raise ConfigError(f"strategy.offload_param needs zero_stage=3, got zero_stage={zero_stage}")
    if cfg.hardware.device == "cpu" and workload.dtype == "fp16":
        raise ConfigError("workload.dtype='fp16' does not train on CPU; use fp32 or bf16")
    validate_run(cfg, tp)
    return Layout(world_size=cfg.world_size, dp=dp, tp=tp, pp=pp, zero_stage=zero_stage)


def validate_raw(cfg: Any) -> Layout:
    """Checks of workload=gemm / collectives: no strategy or model checks apply; the layout is
    one data-parallel group of all ranks."""
    workload, ws = cfg.workload, cfg.world_size
    _positive("world_size", ws)
    validate_run(cfg)
    if workload.name == "gemm":
        g = cfg.gemm
        _one_of("gemm.mode", g.mode, GEMM_MODES)
        _one_of("gemm.sharding", g.sharding, SHARDINGS)
        _one_of("gemm.dtype", g.dtype, DTYPES)
        for what in ("m", "k", "n", "check_max_dim", "plan_world_size"):
            _positive(f"gemm.{what}", getattr(g, what))
        if g.mode == "single" and ws != 1:
            raise ConfigError(f"gemm.mode=single runs on one device, got world_size={ws}")
        dim = {"rows": "m", "cols": "n", "k": "k"}[g.sharding]
        if getattr(g, dim) % ws:
            raise ConfigError(
                f"gemm.{dim}({getattr(g, dim)}) is not divisible by world_size({ws}); "
                f"gemm.sharding={g.sharding} splits {dim} across ranks"
            )
    else:
        c = cfg.collectives
        for op in c.ops:
            _one_of("collectives.ops", op, COLLECTIVES)
        for op in c.emulate:
            _one_of("collectives.emulate", op, ("all_gather", "reduce_scatter", "all_to_all"))
        _one_of("collectives.dtype", c.dtype, DTYPES)
        _positive("collectives.min_bytes", c.min_bytes)
        if c.max_bytes is not None and c.max_bytes < c.min_bytes:
            raise ConfigError(
                f"collectives.max_bytes({c.max_bytes}) < collectives.min_bytes({c.min_bytes})"
            )
        if c.factor < 2:
            raise ConfigError(f"collectives.factor={c.factor} must be >= 2 (sizes must grow)")
    return Layout(world_size=ws, dp=ws, tp=1, pp=1, zero_stage=0)


def inference_sizes(inference: Any, batch: Any) -> tuple[int, int]:
    """(prompt_len, batch_size per replica) of workload=inference: inference.prompt_len and
    inference.batch_size, or batch.seq_len and batch.micro_batch_size where those are null."""
    prompt_len = inference["prompt_len"]
    batch_size = inference["batch_size"]
    return (
        int(batch["seq_len"] if prompt_len is None else prompt_len),
        int(batch["micro_batch_size"] if batch_size is None else batch_size),
    )


def validate_inference(cfg: Any) -> Layout:
    """Checks of workload=inference: whole-weight data-parallel replicas (dp, ddp, zero1/2: their
    training state does not exist at inference) or DeepSpeed AutoTP (strategy.tp > 1); no
    pipeline, nothing that shards or moves the weights across replicas."""
    model, strategy, workload, inf = cfg.model, cfg.strategy, cfg.workload, cfg.inference
    validate_model_choices(cfg)
    _one_of("inference.decoding", inf.decoding, DECODINGS)
    dp, tp, pp = resolve_degrees(cfg.world_size, strategy.dp, strategy.tp, strategy.pp)
    zero_stage = resolve_zero_stage(strategy, cfg.zero_stage)
    name = strategy.name
    if pp > 1:
        raise ConfigError(
            f"workload=inference runs data-parallel replicas or tensor parallelism, not pp({pp}); "
            "use strategy=dp or strategy=tp"
        )
    if tp > 1 and strategy.engine != "deepspeed":
        raise ConfigError(
            f"workload=inference splits tp({tp}) with DeepSpeed AutoTP (init_inference), "
            f"strategy={name} is engine={strategy.engine}; use strategy=tp"
        )
    sharded = zero_stage == 3 or strategy.offload_param != "none"
    if sharded or strategy.get("data_parallel") == "fsdp":
        how = (
            f"zero_stage={zero_stage}, offload_param={strategy.offload_param}"
            if sharded
            else "data_parallel=fsdp"
        )
        raise ConfigError(
            f"workload=inference keeps whole weights on every replica; strategy={name} "
            f"({how}) shards or offloads them; use strategy=dp or strategy=tp"
        )
    for what in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size"):
        _positive(f"model.{what}", getattr(model, what))
    for heads in ("num_heads", "num_kv_heads"):
        if getattr(model, heads) % tp:
            raise ConfigError(
                f"model.{heads}({getattr(model, heads)}) is not divisible by tp({tp}); "
                f"tensor parallelism splits whole heads"
            )
    if model.pretrained_path is not None and not Path(model.pretrained_path).is_dir():
        raise ConfigError(f"model.pretrained_path={model.pretrained_path!r} is not a directory")
    prompt_len, batch_size = inference_sizes(inf, cfg.batch)
    _positive("inference.prompt_len (or batch.seq_len)", prompt_len)
    _positive("inference.batch_size (or batch.micro_batch_size)", batch_size)
    if inf.num_new_tokens < 2:
        raise ConfigError(
            f"inference.num_new_tokens={inf.num_new_tokens} must be >= 2: the first token "
            "comes from prefill, decode needs at least one more"
        )
    if prompt_len + inf.num_new_tokens > model.max_position_embeddings:
        raise ConfigError(
            f"prompt_len({prompt_len}) + inference.num_new_tokens({inf.num_new_tokens}) > "
            f"model.max_position_embeddings({model.max_position_embeddings})"
        )
    if cfg.hardware.device == "cpu" and workload.dtype == "fp16":
        raise ConfigError("workload.dtype='fp16' does not run on CPU; use fp32 or bf16")
    validate_run(cfg, tp)
    return Layout(world_size=cfg.world_size, dp=dp, tp=tp, pp=1, zero_stage=zero_stage)
