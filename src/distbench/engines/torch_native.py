"""The native PyTorch engine (`engine: torch`): single, ddp, fsdp, torch_tp, torch_pp, 3d.

One composition for every torch strategy, in torchtitan's order (pipeline split first, then
TP → AC → compile → FSDP):

1. rank grid: `init_device_mesh(device, (dp, pp, tp))`, ranks laid out as picotron's
   `arange(world).view(dp, pp, tp)` (tp fastest); each rank's (dp, pp, tp) is its coordinate;
2. pp > 1: this rank keeps its stage (`pipeline.stage_module`: embedding on the first stage,
   decoder layers split evenly, norm + LM head on the last);
3. tp > 1: DTensor `parallelize_module` on each decoder layer over the tp sub-mesh: q/k/v and
   gate/up `ColwiseParallel` (whole heads per rank: the attention's `view(..., -1, head_dim)`
   infers the local head count from the local output), o and down `RowwiseParallel` (their
   outputs are all-reduced, back to plain tensors); norms replicated; the token embedding and
   the LM head split by vocabulary (`strategy.vocab_parallel`, default on: Megatron's
   vocab-parallel embedding and head, torchtitan's loss parallel: each rank's logits are its
   vocabulary slice, which the loss reads under `loss_parallel` without gathering them; off,
   both stay whole on every tp rank); with `strategy.sequence_parallel` (off by default; tp
   without pp) the norms and the residual stream split along the sequence, each block's input
   all-gathered and o/down reduce-scattered (torchtitan's plan); then
   `activation_checkpointing`: the picked decoder layers (of the model, or of this stage)
   recompute in backward (non-reentrant, ranks/layers.py); then `workload.compile`:
   `torch.compile` per decoder layer;
4. dp > 1: `strategy.data_parallel` over the dp sub-mesh: `ddp` (DistributedDataParallel; with
   TP through torch's DTensor→local transform) or `fsdp` (FSDP2 `fully_shard` per decoder layer,
   then the root; sharded like ZeRO-3);
5. torch AdamW(lr; `workload.optimizer_impl`, fused by default, on DTensor too), no clipping;
   bf16-mixed: fp32 weights, forward under autocast (FSDP2: MixedPrecisionPolicy instead);
   pp > 1: `ScheduleGPipe` or `Schedule1F1B` (`strategy.pp_schedule`) over the micro-batches.

One step: each micro-batch's loss / num_micro_batches is back-propagated (DDP syncs gradients on
the last micro-batch only, FSDP reduce-scatters them in each), then one optimizer step: the same
update as DeepSpeed's gradient accumulation. Its strategy schema, `TorchStrategyConfig`
(`schema/strategy_torch`), adds `data_parallel` and `pp_schedule` to the shared layout; ZeRO
stages and offload are DeepSpeed's.

    python run.py strategy=torch_tp world_size=4     # tp 2 × dp 2 (FSDP across replicas)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from distbench.compose.checks import one_of
from distbench.compose.schema import DEFAULT_PP_SCHEDULE, ConfigError, StrategyConfig
from distbench.engines import GRID_DIMS, EngineSpec, register
from distbench.job import Job
from distbench.precision import adamw_kwargs, is_mixed
from distbench.ranks.layers import checkpoint_and_compile, decoder_layer_slots
from distbench.ranks.models import DTYPE_NAMES, materialise_if_meta

# Data parallelism across replicas, and the torch.distributed.pipelining schedules.
TORCH_DATA_PARALLEL = ("ddp", "fsdp")
PP_SCHEDULES = ("gpipe", "1f1b")


@dataclass
class TorchStrategyConfig(StrategyConfig):
    """A torch strategy: the shared layout, how replicas share the model and the pipeline's
    schedule."""

    engine: str = "torch"
    data_parallel: str | None = None  # ddp | fsdp across replicas (None: ddp)
    pp_schedule: str | None = None  # gpipe | 1f1b (None: DEFAULT_PP_SCHEDULE)
    vocab_parallel: bool = True  # tp > 1: embedding and LM head split by vocabulary
    sequence_parallel: bool = False  # tp > 1: norms and residual split along the sequence


def _tp_switch(job: Job, key: str) -> bool:
    """A TorchStrategyConfig switch that acts only under the torch engine's TP (tp > 1)."""
    return job.engine == "torch" and job.layout.tp > 1 and bool(getattr(job.strategy, key))


def vocab_parallel(job: Job) -> bool:
    """Whether the job's token embedding and LM head are split over tp by vocabulary (the
    torch engine's TP with strategy.vocab_parallel; DeepSpeed's AutoTP splits its head too, but
    gathers the logits: figures/job_terms.py)."""
    return _tp_switch(job, "vocab_parallel")


def sequence_parallel(job: Job) -> bool:
    """Whether the job's torch TP runs sequence parallel (strategy.sequence_parallel, tp > 1):
    the norms, the residual stream and each checkpointed layer's input split along the
    sequence over tp."""
    return _tp_switch(job, "sequence_parallel")


SPEC = register(EngineSpec(name="torch", module=__name__, strategy_schema=TorchStrategyConfig))


def resolve_zero_stage(strategy: TorchStrategyConfig, chosen: int | None) -> None:
    """None: ZeRO is DeepSpeed's; a stage given to a torch strategy is refused."""
    if chosen is not None:
        raise ConfigError(
            f"strategy={strategy.name} has no ZeRO stage (zero_stage={chosen} given); ZeRO is "
            "the deepspeed engine's (fsdp shards like ZeRO-3)"
        )
    return None


def check(job: Job) -> None:
    """What the torch engine runs: TP of Llama only (whole MLP splits, the vocabulary split
    evenly), untied embeddings under pp, and 1F1B with at least pp micro-batches."""
    strategy, model, name = job.strategy, job.model, job.strategy.name
    tp, pp = job.layout.tp, job.layout.pp
    if strategy.data_parallel is not None:
        one_of("strategy.data_parallel", strategy.data_parallel, TORCH_DATA_PARALLEL)
    if strategy.pp_schedule is not None:
        one_of("strategy.pp_schedule", strategy.pp_schedule, PP_SCHEDULES)
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
    if tp > 1 and strategy.vocab_parallel and model.vocab_size % tp:
        raise ConfigError(
            f"model.vocab_size({model.vocab_size}) is not divisible by tp({tp}); the embedding and "
            "LM head are split by vocabulary evenly (set strategy.vocab_parallel=false)"
        )
    if tp > 1 and strategy.sequence_parallel:
        _check_sequence_parallel(job)
    if pp > 1 and model.tie_word_embeddings:
        raise ConfigError(
            f"model.tie_word_embeddings=true cannot be split over pp({pp}) stages by the torch "
            "engine (embedding and LM head sit on different stages); use strategy=pp"
        )
    micro_batches = job.batch.grad_accum_steps
    if pp > 1 and strategy.pp_schedule == "1f1b" and micro_batches < pp:
        raise ConfigError(
            f"strategy.pp_schedule=1f1b needs batch.grad_accum_steps({micro_batches}) >= pp({pp}) "
            "micro-batches; raise grad_accum_steps or use pp_schedule=gpipe"
        )


def _check_sequence_parallel(job: Job) -> None:
    """Sequence parallel runs with the vocab-parallel embedding (which hands the first layer
    its sequence slices), without a pipeline split (its stages would pass DTensors) and on a
    sequence tp divides."""
    tp, pp, seq_len = job.layout.tp, job.layout.pp, job.batch.seq_len
    if not job.strategy.vocab_parallel:
        raise ConfigError(
            "strategy.sequence_parallel=true needs strategy.vocab_parallel=true (the embedding "
            "hands the first layer its sequence slices)"
        )
    if pp > 1:
        raise ConfigError(
            f"strategy.sequence_parallel=true is not built under pp({pp}); set "
            "strategy.sequence_parallel=false or strategy.pp=1"
        )
    if seq_len % tp:
        raise ConfigError(
            f"batch.seq_len({seq_len}) is not divisible by tp({tp}); sequence parallel splits "
            "the sequence evenly"
        )


TP_PLAN_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
TP_PLAN_COLWISE += ("mlp.gate_proj", "mlp.up_proj")
TP_PLAN_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def _decoder_layers(module: Any) -> list[Any]:
    """The HF decoder layers inside a model or a pipeline stage, each as its parent holds it
    (the torch.compile wrapper around it, once compiled: FSDP2 shards that, outside the
    compiled region)."""
    return [getattr(parent, name) for parent, name in decoder_layer_slots(module)]


def layer_tp_plan(by_sequence: bool) -> dict[str, Any]:
    """One Llama decoder layer's TP plan. With sequence parallel (torchtitan's plan, Korthikanti
    et al. 2022): the residual stream stays split along the sequence (a DTensor sharded on dim
    1), the norms run on their slice, each block's input is all-gathered (PrepareModuleInput)
    and o/down reduce-scatter their outputs back to sequence slices instead of all-reducing."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan: dict[str, Any] = {name: ColwiseParallel() for name in TP_PLAN_COLWISE}
    if not by_sequence:
        return plan | {name: RowwiseParallel() for name in TP_PLAN_ROWWISE}
    sliced = RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
    return plan | {
        **{name: sliced for name in TP_PLAN_ROWWISE},
        "input_layernorm": SequenceParallel(),
        "post_attention_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)},
            desired_input_kwarg_layouts={"hidden_states": Replicate()},
            use_local_output=True,
        ),
        "mlp": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        ),
    }


def apply_tp(module: Any, tp_mesh: Any, by_sequence: bool = False) -> None:
    """Megatron-style TP of every decoder layer's attention and MLP projections
    (`layer_tp_plan`)."""
    from torch.distributed.tensor.parallel import parallelize_module

    plan = layer_tp_plan(by_sequence)
    for layer in _decoder_layers(module):
        parallelize_module(layer, tp_mesh, plan)


def apply_vocab_parallel(module: Any, model: Any, tp_mesh: Any, by_sequence: bool = False) -> None:
    """The token embedding and the LM head of `module` (`model`, or its pipeline stage: those
    it holds) split over tp by vocabulary, torchtitan's plan: the embedding's rows (each rank
    looks its slice up, the partial sums are all-reduced, or reduce-scattered into sequence
    slices under sequence parallel, where the final norm runs on its slice too), the head's
    output columns (its logits stay a DTensor sharded on the vocabulary, for the loss under
    `loss_parallel`). A tied head keeps sharing the embedding's split table."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    held = {id(sub) for sub in module.modules()}
    tied = head.weight is embedding.weight
    tokens = Shard(1) if by_sequence else Replicate()
    if id(embedding) in held:
        rows = RowwiseParallel(
            input_layouts=Replicate(), output_layouts=tokens, use_local_output=not by_sequence
        )
        parallelize_module(embedding, tp_mesh, rows)
    if id(head) in held:
        if by_sequence:
            parallelize_module(model.base_model.norm, tp_mesh, SequenceParallel())
        columns = ColwiseParallel(
            input_layouts=tokens, output_layouts=Shard(-1), use_local_output=False
        )
        parallelize_module(head, tp_mesh, columns)
        if tied:
            head.weight = embedding.weight


def _loss_context(split_logits: bool) -> Any:
    """`loss_parallel` where the logits are split by vocabulary (forward and backward of
    the loss run inside it), else nothing."""
    if not split_logits:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


def _local(value: Any) -> Any:
    """A loss as a plain tensor (loss_parallel's is a replicated DTensor)."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


def _checkpoint_and_compile(module: Any, job: Job, coords: tuple[int, ...]) -> None:
    """Activation checkpointing, then torch.compile, of this rank's decoder layers (the job's
    activation_checkpointing and workload.compile); the rank says what it did."""
    done = checkpoint_and_compile(
        module,
        job.activation_checkpointing,
        job.activation_checkpointing_every,
        getattr(job.workload, "compile", False),
    )
    if done:
        print(f"rank {dict(zip(GRID_DIMS, coords, strict=True))}: {done}", flush=True)


def apply_data_parallel(
    module: Any, mode: str, dp_mesh: Any, device: str, tp: int, pp: int, compute_dtype: Any = None
) -> Any:
    """Replicate (ddp) or shard (fsdp) `module` across the dp sub-mesh; returns the module.
    fsdp with a `compute_dtype` (bf16-mixed): FSDP2 gathers parameters in it and reduces
    gradients in fp32 (MixedPrecisionPolicy), the sharded fp32 parameters stay the master."""
    import torch

    if mode == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy()
        if compute_dtype is not None:
            policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        for layer in _decoder_layers(module):
            fully_shard(layer, mesh=dp_mesh, mp_policy=policy)
        return fully_shard(module, mesh=dp_mesh, mp_policy=policy)
    from torch.nn.parallel import DistributedDataParallel

    if tp > 1:  # DDP reduces plain tensors: DTensor params become local ones around forward
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform

        _pre_dp_module_transform(module)
    device_ids = [torch.cuda.current_device()] if device == "cuda" else None
    # Under pp the schedule runs several backwards per step; DDP's one-off bucket rebuild then
    # records every parameter once per micro-batch and fails its size check on step 2
    # ("rebuilt parameter indices size is not same"). find_unused_parameters skips the rebuild.
    return DistributedDataParallel(
        module,
        process_group=dp_mesh.get_group(),
        device_ids=device_ids,
        find_unused_parameters=pp > 1,
    )


def param_groups(module: Any) -> list[dict[str, list[Any]]]:
    """The parameters in two groups, DTensors (TP slices) and plain tensors (what TP
    replicates): the fused and foreach AdamW kernels take one kind per call."""
    from torch.distributed.tensor import DTensor

    params = list(module.parameters())
    groups = [[p for p in params if isinstance(p, DTensor)]]
    groups.append([p for p in params if not isinstance(p, DTensor)])
    return [{"params": group} for group in groups if group]


@dataclass
class TorchEngine:
    """A torch-wrapped model (or pipeline stage) behind the `Engine` interface."""

    module: Any
    optimizer: Any
    dp_rank: int
    coords: tuple[int, int, int]
    device: str
    data_parallel: str | None  # ddp | fsdp | None (dp == 1)
    schedule: Any = None  # pp > 1: the pipelining schedule of this rank's stage
    pp_group: Any = None
    stage: tuple[int, int] = (0, 1)  # (this stage, number of stages)
    autocast_dtype: Any = None  # bf16-mixed outside FSDP2: forward under torch.autocast
    split_logits: bool = False  # vocab-parallel head: the loss runs under loss_parallel

    def _autocast(self) -> Any:
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=self.autocast_dtype)

    def _sync(self, last: bool) -> Any:
        """DDP reduces on the last micro-batch only (its gradients are whole either way). FSDP
        reduce-scatters in every micro-batch (torchtitan's default): without that sync FSDP2
        keeps every parameter's unsharded gradient, in reduce_dtype, until the last one
        (FSDPParamGroup.post_backward: unsharded_accumulated_grad), a whole model's
        gradients per rank."""
        if self.data_parallel == "ddp" and not last:
            return self.module.no_sync()
        return contextlib.nullcontext()

    def train_step(self, micro_batches: list[Any]) -> float:
        import torch

        if self.schedule is not None:
            loss = self._pipeline_step(micro_batches)
        else:
            losses = []
            for i, mb in enumerate(micro_batches):
                mb = mb.to(self.device)
                last = i == len(micro_batches) - 1
                with self._sync(last), _loss_context(self.split_logits):
                    with self._autocast():
                        loss = self.module(input_ids=mb, labels=mb).loss.float()
                    (loss / len(micro_batches)).backward()
                losses.append(_local(loss.detach()))
            loss = torch.stack(losses).mean()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss)

    def _pipeline_step(self, micro_batches: list[Any]) -> Any:
        """The schedule splits the concatenated micro-batches back into the same micro-batches;
        the last stage's mean loss is summed into every stage of the replica."""
        import torch
        import torch.distributed as dist

        tokens = torch.cat(micro_batches).to(self.device)
        stage, num_stages = self.stage
        losses: list[Any] = []
        with self._autocast(), _loss_context(self.split_logits):
            if stage == 0:
                self.schedule.step(tokens)
            elif stage == num_stages - 1:
                self.schedule.step(target=tokens, losses=losses)
            else:
                self.schedule.step()
        loss = torch.zeros((), dtype=torch.float32, device=self.device)
        if losses:
            loss = torch.stack([_local(x.detach()).float() for x in losses]).mean()
        dist.all_reduce(loss, group=self.pp_group)
        return loss

    def num_params_local(self) -> int:
        from torch.distributed.tensor import DTensor

        return sum(
            (p.to_local() if isinstance(p, DTensor) else p).numel()
            for p in self.module.parameters()
        )


def initialize(model: Any, job: Job) -> TorchEngine:
    """Wrap `model` for the layout (module docstring: split → TP → AC → compile → data
    parallel → AdamW)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    device = job.hardware.device
    strategy = job.strategy
    layout = job.layout
    dp, pp, tp = layout.dp, layout.pp, layout.tp
    mesh = init_device_mesh(device, (dp, pp, tp), mesh_dim_names=GRID_DIMS)
    coords = tuple(int(c) for c in mesh.get_coordinate())
    data_parallel = (strategy.data_parallel or "ddp") if dp > 1 else None
    mixed = is_mixed(job.dtype, job.workload.precision)
    compute_dtype = getattr(torch, DTYPE_NAMES[job.dtype]) if mixed else None
    seed = job.workload.seed
    # A meta model is materialised as late as its layout allows: after TP and FSDP2 each rank
    # allocates only its slice or shard (torchtitan's meta → parallelize → to_empty → init);
    # a pipeline split, a tied embedding or DDP need the whole model first.
    shards_on_meta = pp == 1 and not job.model.tie_word_embeddings
    if not shards_on_meta:
        materialise_if_meta(model, device, seed)
    module = model.train()
    if pp > 1:
        from distbench.engines.pipeline import stage_module

        module = stage_module(model, coords[1], pp)
    sliced = sequence_parallel(job)
    if tp > 1:
        apply_tp(module, mesh["tp"], sliced)
    split_logits = vocab_parallel(job)
    if split_logits:
        apply_vocab_parallel(module, model, mesh["tp"], sliced)
    _checkpoint_and_compile(module, job, coords)
    if data_parallel == "fsdp":
        module = apply_data_parallel(module, "fsdp", mesh["dp"], device, tp, pp, compute_dtype)
    materialise_if_meta(module, device, seed)
    if data_parallel == "ddp":
        module = apply_data_parallel(module, "ddp", mesh["dp"], device, tp, pp, compute_dtype)
    optimizer = torch.optim.AdamW(
        param_groups(module), lr=job.workload.lr, **adamw_kwargs(job.optimizer_impl)
    )
    engine = TorchEngine(
        module=module,
        optimizer=optimizer,
        dp_rank=coords[0],
        coords=coords,
        device=device,
        data_parallel=data_parallel,
        # torchtitan's rule: FSDP2 casts by its policy; everything else runs under autocast
        autocast_dtype=compute_dtype if data_parallel != "fsdp" else None,
        split_logits=split_logits,
    )
    if pp > 1:
        engine.schedule = _pipeline_schedule(module, job, coords[1], pp, mesh["pp"], device)
        engine.pp_group = mesh["pp"].get_group()
        engine.stage = (coords[1], pp)
    return engine


def _pipeline_schedule(module: Any, job: Job, stage: int, pp: int, pp_mesh: Any, device: str):
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from distbench.engines.pipeline import causal_lm_loss

    where = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else "cpu"
    pipeline_stage = PipelineStage(module, stage, pp, where, group=pp_mesh.get_group())
    schedules = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    schedule = schedules[job.strategy.pp_schedule or DEFAULT_PP_SCHEDULE]
    return schedule(
        pipeline_stage, n_microbatches=job.batch.grad_accum_steps, loss_fn=causal_lm_loss
    )
