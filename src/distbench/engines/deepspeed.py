"""The DeepSpeed engine for every deepspeed strategy: dp, ZeRO-1/2/3 (+ offload), AutoTP, pipeline.

`ds_config()` is pure: job → DeepSpeed's config dict; `check()` refuses what DeepSpeed cannot
run. `initialize()` wraps the model, in this order: pipeline split (pp > 1, pipeline.py) →
activation checkpointing of the model's (or this stage's) decoder layers picked by
`activation_checkpointing` (torch's non-reentrant checkpoint, ranks/layers.py: the recompute
runs ZeRO-3's fetch hooks again) → `workload.compile` (torch.compile per decoder layer) →
DeepSpeed engine (AutoTP sharding when tp > 1, then ZeRO partitioning of what is left, offload
last).
The optimizer is torch's AdamW (`workload.optimizer_impl`: fused by default, the same kernel the
torch engine runs) handed to DeepSpeed, so no DeepSpeed Adam kernel has to be compiled; offload
then needs `zero_force_ds_cpu_optimizer: false`. bf16 is DeepSpeed's bf16 block: fp32 master
weights and optimizer states, gradients reduced in fp32 (`communication_data_type`).
Its strategy schema, `DeepSpeedStrategyConfig` (`schema/strategy_deepspeed`), adds the ZeRO stage
and offload fields to the shared layout.

    python -m torch.distributed.run --nproc_per_node=2 -m distbench.ranks.worker RUN_DIR
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from distbench.compose.checks import one_of
from distbench.compose.schema import ZERO_STAGES, ConfigError, StrategyConfig
from distbench.engines import EngineSpec, register
from distbench.job import Job, Layout
from distbench.precision import adamw_kwargs

OFFLOAD_DEVICES = ("none", "cpu")
# DeepSpeed's PipelineEngine refuses ZeRO-2/3: gradients must stay whole per stage.
MAX_ZERO_STAGE_WITH_PIPELINE = 1


@dataclass
class DeepSpeedStrategyConfig(StrategyConfig):
    """A deepspeed strategy: the shared layout, its ZeRO stage and what it offloads."""

    engine: str = "deepspeed"
    # A stage the strategy fixes (zero3 -> 3); None lets the zero_stage key choose.
    zero_stage: int | None = None
    default_zero_stage: int = 0  # the stage when neither pins one
    offload_optimizer: str = "none"  # none | cpu
    offload_param: str = "none"  # none | cpu


SPEC = register(
    EngineSpec(name="deepspeed", module=__name__, strategy_schema=DeepSpeedStrategyConfig)
)


def resolve_zero_stage(strategy: DeepSpeedStrategyConfig, chosen: int | None) -> int:
    """The stage that runs: pinned by the strategy, chosen by zero_stage=, or the default."""
    pinned = strategy.zero_stage
    if pinned is not None and chosen is not None and int(chosen) != int(pinned):
        raise ConfigError(
            f"strategy={strategy.name} pins zero_stage={pinned} but zero_stage={chosen} was given; "
            f"drop zero_stage= or use strategy=dp zero_stage={chosen}"
        )
    stage = int(next(s for s in (pinned, chosen, strategy.default_zero_stage) if s is not None))
    one_of("zero_stage", stage, ZERO_STAGES)
    return stage


def check(job: Job) -> None:
    """What DeepSpeed runs: ZeRO-0/1 under a pipeline, tp or pp (not both), offload with the
    stage that shards what it offloads, compiled layers below ZeRO-3."""
    strategy, layout = job.strategy, job.layout
    stage, tp, pp = layout.zero_stage, layout.tp, layout.pp
    one_of("strategy.offload_optimizer", strategy.offload_optimizer, OFFLOAD_DEVICES)
    one_of("strategy.offload_param", strategy.offload_param, OFFLOAD_DEVICES)
    if pp > 1 and stage > MAX_ZERO_STAGE_WITH_PIPELINE:
        raise ConfigError(
            f"pipeline parallelism (pp={pp}) runs with zero_stage 0 or 1 only, "
            f"got zero_stage={stage} (DeepSpeed's PipelineEngine does not shard gradients)"
        )
    if pp > 1 and tp > 1:
        raise ConfigError(
            f"tp({tp}) with pp({pp}) is not supported by the deepspeed engine here; "
            "use tp or pp alone with dp"
        )
    if strategy.offload_optimizer != "none" and stage == 0:
        raise ConfigError("strategy.offload_optimizer needs zero_stage >= 1, got zero_stage=0")
    if strategy.offload_param != "none" and stage != 3:
        raise ConfigError(f"strategy.offload_param needs zero_stage=3, got zero_stage={stage}")
    if getattr(job.workload, "compile", False) and stage == 3:
        raise ConfigError(
            "workload.compile=true does not run under ZeRO-3: its hooks expect every module's "
            "parameters partitioned, and a torch.compile wrapper's are not; use zero_stage 0-2, "
            "or strategy=fsdp (compiled layers, sharded like ZeRO-3)"
        )


def ds_config(job: Job) -> dict[str, Any]:
    """DeepSpeed's config dict for a job."""
    layout = job.layout
    zero = dict(job.zero_optimization or {})
    zero["stage"] = layout.zero_stage
    if job.strategy.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": job.strategy.offload_optimizer, "pin_memory": False}
    if job.strategy.offload_param != "none":
        zero["offload_param"] = {"device": job.strategy.offload_param, "pin_memory": False}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": job.batch.micro_batch_size,
        "gradient_accumulation_steps": job.batch.grad_accum_steps,
        "zero_optimization": zero,
        "zero_force_ds_cpu_optimizer": False,
        "gradient_clipping": 0.0,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": job.workload.dtype == "bf16"},
        "fp16": {"enabled": job.workload.dtype == "fp16"},
    }
    if job.dtype != "fp32":  # bf16-mixed / 16-mixed (precision.py): fp32 gradient reduction
        config["communication_data_type"] = "fp32"
        if layout.zero_stage == 1 and job.strategy.offload_optimizer == "none":
            # ZeRO-1 accumulates gradients in fp32 (DeepSpeed's BF16_Optimizer); ZeRO-0 and
            # ZeRO-2/3 keep their own accumulation dtype (DeepSpeed refuses fp32 there).
            config["data_types"] = {"grad_accum_dtype": "fp32"}
    if layout.tp > 1:
        config["tensor_parallel"] = {"autotp_size": layout.tp}
    return config


def builds_partitioned(job: Job) -> bool:
    """ZeRO-3 without TP or PP: the model is constructed already partitioned."""
    return job.layout.zero_stage == 3 and job.layout.tp == 1 and job.layout.pp == 1


def build_partitioned(job: Job, config: dict[str, Any]) -> Any:
    """The model constructed under `deepspeed.zero.Init`: each module's parameters are
    partitioned as soon as the module is built, so a rank never holds more than its partition
    plus one module; then this rank's partitions get the deterministic weights
    (ranks/models.py), the same values every other layout starts from."""
    import deepspeed
    import torch
    import transformers.integrations.deepspeed as hf_deepspeed
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from distbench.ranks.models import DTYPE_NAMES, hf_config, init_zero3_partitions_

    dtype = getattr(torch, DTYPE_NAMES[job.dtype])  # DeepSpeed holds bf16 params under bf16
    model_config = hf_config(job.model)
    # Imported before zero.Init patches torch's tensor constructors (transformers imports
    # torch._dynamo lazily, which fails under the patch).
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(model_config)]
    # transformers 4.x keeps integer aranges integer under zero.Init's dtype patch; 5.x has no
    # such helper (its rotary tables are recomputed after init anyway: _reset_buffers).
    keep_arange = getattr(hf_deepspeed, "prevent_arange_dtype_change", contextlib.nullcontext)
    with keep_arange(), deepspeed.zero.Init(config_dict_or_path=config):
        model = model_class._from_config(
            model_config, attn_implementation=job.model.attn_implementation, dtype=dtype
        )
    init_zero3_partitions_(model, job.workload.seed)
    return model


@dataclass
class DeepSpeedEngine:
    """A DeepSpeed engine behind the train loop's `Engine` interface (engines/__init__.py).

    Non-pipeline: forward, `engine.backward`, `engine.step` per micro-batch (DeepSpeed scales
    the loss by 1/grad_accum_steps and steps the optimizer at the accumulation boundary).
    Pipeline: `train_batch` over the micro-batches, whose loss every stage returns."""

    engine: Any
    dp_rank: int
    coords: tuple[int, int, int]
    is_pipeline: bool
    device: str

    def train_step(self, micro_batches: list[Any]) -> float:
        engine = self.engine
        batches = [mb.to(self.device) for mb in micro_batches]
        if self.is_pipeline:
            return float(engine.train_batch(data_iter=iter([(mb, mb) for mb in batches])))
        losses = []
        for mb in batches:
            loss = engine(input_ids=mb, labels=mb).loss
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
        return float(sum(losses) / len(losses))

    def num_params_local(self) -> int:
        return sum(p.numel() for p in self.engine.module.parameters())


def _grid_coords(engine: Any, layout: Layout) -> tuple[int, int, int]:
    """This rank's (dp, pp, tp) in DeepSpeed's own grid. AutoTP lays ranks out (dp, tp), tp
    fastest; the PipelineEngine's topology is (pipe, data), data fastest, so under pp > 1 the
    ranks of one stage are consecutive (unlike the torch engine's (dp, pp, tp) grid)."""
    import torch.distributed as dist

    if layout.pp > 1:
        return (engine.grid.get_data_parallel_rank(), engine.grid.get_stage_id(), 0)
    if layout.tp > 1:
        from deepspeed.utils import groups

        return (groups._get_data_parallel_rank(), 0, groups.get_tensor_model_parallel_rank())
    return (dist.get_rank(), 0, 0)


def initialize(model: Any, job: Job) -> DeepSpeedEngine:
    """Wrap `model` for the layout; returns the DeepSpeed engine and this rank's grid position."""
    import deepspeed
    import torch

    from distbench.ranks.layers import checkpoint_and_compile
    from distbench.ranks.models import is_meta, materialise_if_meta

    layout = job.layout
    config = ds_config(job)
    if is_meta(model) and builds_partitioned(job):
        model = build_partitioned(job, config)
    materialise_if_meta(model, job.device, job.workload.seed)  # the whole model, on the device
    if layout.pp > 1:
        from distbench.engines.pipeline import to_pipeline_module

        model = to_pipeline_module(model, num_stages=layout.pp)
    done = checkpoint_and_compile(
        model,
        job.activation_checkpointing,
        job.activation_checkpointing_every,
        getattr(job.workload, "compile", False),
    )
    if done:  # each rank says what its model (or pipeline stage) runs
        print(f"rank {torch.distributed.get_rank()}: {done}", flush=True)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=job.workload.lr, **adamw_kwargs(job.optimizer_impl)
    )
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    coords = _grid_coords(engine, layout)
    return DeepSpeedEngine(
        engine=engine,
        dp_rank=coords[0],
        coords=coords,
        is_pipeline=layout.pp > 1,
        device=job.hardware.device,
    )
