"""One training job's inputs to each term of a prediction: the device's shard of the model,
and the memory, communication, offload, compute and optimizer terms computed from a `Job` with
the pure formulas of figures/memory.py, communication.py and step_time.py.

    python -c "from distbench.figures.job_terms import Shard; print(Shard.__doc__)"

figures/predict.py assembles these into a `Prediction`; each function here only maps a Job's
fields (model, batch, strategy, engine, dtype, recipe, hardware, topology) onto a formula's
arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distbench.engines.torch_native import sequence_parallel, vocab_parallel
from distbench.figures.activations import num_recomputed_layers, recompute_flops_fraction
from distbench.figures.communication import (
    MEGATRON_TP_ALL_REDUCES_PER_LAYER,
    TP_ALL_REDUCES_PER_LAYER,
    Links,
    collectives_per_group,
    comm_bytes_per_group,
    comm_s_per_group,
    dp_collectives,
    resolve_links,
    zero3_gathered_per_layer,
    zero_setting,
)
from distbench.figures.cpu_rss import cpu_runtime_bytes
from distbench.figures.memory import Memory, memory_per_device
from distbench.figures.metrics import (
    BYTES_PER_DTYPE,
    device_train_flops_per_token,
    train_flops_per_token,
)
from distbench.figures.model_states import StateBytes, deepspeed_host_bytes_per_node
from distbench.figures.params import ParamSplit, param_split, params_per_model_shard
from distbench.figures.step_time import (
    cpu_oversubscription,
    eager_scores_s,
    efficiency_compute_s,
    hidden_comm_s,
    measured_compute_s,
    measured_parts_s,
    offload_traffic,
    optimizer_term_s,
    oversubscribed_s,
    pipeline_bubble_s,
    rank_threads,
    ranks_sharing_machine,
)
from distbench.precision import is_mixed
from distbench.ranks.models import layer_matrix_sizes

if TYPE_CHECKING:
    from distbench.job import Job, Layout


def job_precision(job: Job) -> str:
    """The job's recipe, `mixed` or `pure` (workload.precision; `mixed` when the workload has
    none, train's schema default)."""
    return getattr(job.workload, "precision", None) or "mixed"


def zero_equivalent_stage(job: Job) -> int:
    """How sharded the model states are, as a ZeRO stage: DeepSpeed's stage when it runs; on
    the torch engine FSDP (fully_shard) shards parameters, gradients and optimizer states like
    ZeRO-3, and DDP or one device replicate them (0)."""
    if job.layout.zero_stage is not None:
        return job.layout.zero_stage
    return 3 if job.strategy is not None and job.strategy.data_parallel == "fsdp" else 0


@dataclass(frozen=True)
class Shard:
    """What one device of a job holds and moves, the inputs every term shares: the layout
    (its zero_stage the zero-equivalent one), the model's parameter split, the parameters of
    this device's model shard before ZeRO (`params`) and its decoder layers (`layers`), and
    the bytes per element of the gradients reduced and the parameters gathered (`moved`)."""

    layout: Layout
    split: ParamSplit
    params: float
    layers: float
    moved: StateBytes


def communicated_bytes(job: Job) -> StateBytes:
    """Bytes per element of the gradients reduced and the parameters gathered: fp32 gradient
    reduction under bf16-mixed on both engines (communication_data_type / reduce_dtype); the
    torch engine's mixed recipe keeps fp32 parameters, which FSDP2 gathers in bf16."""
    dtype, engine = job.dtype, job.engine
    mixed = is_mixed(dtype, job_precision(job))
    if mixed and engine == "torch" and job.strategy.data_parallel == "fsdp":
        return StateBytes(param=BYTES_PER_DTYPE[dtype], grad=4, optimizer=0)
    return StateBytes(
        param=BYTES_PER_DTYPE[dtype] if not (mixed and engine == "torch") else 4,
        grad=4 if mixed or dtype == "fp32" else BYTES_PER_DTYPE[dtype],
        optimizer=0,
    )


def device_shard(job: Job) -> Shard:
    """The job's `Shard` (DeepSpeed divides everything by tp; torch_tp the embedding and LM
    head too when it splits them by vocabulary, else it replicates them, with the final norm)."""
    layout = dataclasses.replace(job.layout, zero_stage=zero_equivalent_stage(job))
    split = param_split(job.model)
    outside_whole = job.engine == "torch" and not vocab_parallel(job)
    params = params_per_model_shard(split, layout.tp, layout.pp, outside_layers_whole=outside_whole)
    return Shard(layout, split, params, split.num_layers / layout.pp, communicated_bytes(job))


# --------------------------------------------------------------------------- the terms


def job_memory(job: Job, shard: Shard, *, recompute: bool) -> Memory:
    """`memory_per_device` with the job's model, batch, engine, recipe and activation
    checkpointing (recompute=True: full, whatever the job's)."""
    model, batch, strategy = job.model, job.batch, job.strategy
    device_is_host = job.device == "cpu"
    return memory_per_device(
        shard.split,
        shard.layout,
        dtype=job.dtype,
        seq_len=batch.seq_len,
        micro_batch_size=batch.micro_batch_size,
        grad_accum_steps=batch.grad_accum_steps,
        hidden_size=model.hidden_size,
        num_heads=model.num_heads,
        vocab_size=model.vocab_size,
        offload_optimizer=strategy.offload_optimizer != "none",
        offload_param=strategy.offload_param != "none",
        device_is_host=device_is_host,
        recompute=recompute,
        attention_scores_stored=model.attn_implementation == "eager",
        engine=job.engine,
        precision=job_precision(job),
        family=model.family,
        intermediate_size=model.intermediate_size,
        data_parallel=strategy.data_parallel,
        zero_block=job.zero_optimization,
        runtime_bytes=cpu_runtime_bytes(job.engine, device_is_host, shard.layout.world_size),
        tied_embeddings=model.tie_word_embeddings,
        pp_schedule=strategy.pp_schedule,
        checkpointing=job.activation_checkpointing,
        checkpointing_every=job.activation_checkpointing_every,
        vocab_parallel=vocab_parallel(job),
        sequence_parallel=sequence_parallel(job),
    )


def host_mem_bytes_per_node(job: Job, shard: Shard) -> float:
    """Host RAM per node an offload run needs (`deepspeed_host_bytes_per_node`); 0 without
    offload or when the device is the host."""
    if job.strategy.offload_optimizer == "none" or job.device == "cpu":
        return 0.0
    return deepspeed_host_bytes_per_node(
        shard.split.total,
        job.topology.ranks_per_node,
        job.topology.num_nodes,
        zero_stage=shard.layout.zero_stage,
        offload_param=job.strategy.offload_param != "none",
    )


def job_comm_bytes(job: Job, shard: Shard) -> dict[str, float]:
    """`comm_bytes_per_group` with the job's batch and model."""
    return comm_bytes_per_group(
        shard.layout,
        shard.params,
        shard.layers,
        micro_batch_size=job.batch.micro_batch_size,
        seq_len=job.batch.seq_len,
        hidden_size=job.model.hidden_size,
        grad_bytes=shard.moved.grad,
        param_bytes=shard.moved.param,
        act_bytes=BYTES_PER_DTYPE[job.dtype],
        grad_accum_steps=job.batch.grad_accum_steps,
        tp_all_reduces_per_layer=tp_all_reduces_per_layer(job),
        tp_head_vocab=job.model.vocab_size if tp_head_gathered(job) else 0,
        tp_vocab_parallel=vocab_parallel(job),
        reduce_scatter_as_all_reduce=job.device == "cpu",  # gloo has no reduce-scatter
    )


# Sequence parallel on the torch engine, per decoder layer and micro-batch, as counted from the
# layouts engines/torch_native.layer_tp_plan declares (not timed): forward all-gathers each
# block's input and reduce-scatters o's and down's outputs (2 all-reduces' bytes in 4
# collectives); backward all-gathers o's and down's output gradients (one all-reduce's bytes in
# 2 more) beside the column-parallel input gradients' all-reduces. Against TP without it: one
# all-reduce's bytes and 4 collectives more.
SEQUENCE_PARALLEL_EXTRA_ALL_REDUCES = 1
SEQUENCE_PARALLEL_EXTRA_COLLECTIVES = 4


def _tp_per_layer(job: Job, sequence_parallel_extra: int) -> int:
    """The model family's tensor-parallel all-reduces per decoder layer per micro-batch
    (communication.TP_ALL_REDUCES_PER_LAYER; Megatron's 4 for another), plus
    `sequence_parallel_extra` when the job runs sequence parallel."""
    base = TP_ALL_REDUCES_PER_LAYER.get(job.model.family, MEGATRON_TP_ALL_REDUCES_PER_LAYER)
    return base + (sequence_parallel_extra if sequence_parallel(job) else 0)


def tp_all_reduces_per_layer(job: Job) -> int:
    """The tensor-parallel bytes per decoder layer per micro-batch, in all-reduces of b·s·h."""
    return _tp_per_layer(job, SEQUENCE_PARALLEL_EXTRA_ALL_REDUCES)


def tp_collectives_per_layer(job: Job) -> int:
    """The tensor-parallel collectives per decoder layer per micro-batch (each pays the
    latency once)."""
    return _tp_per_layer(job, SEQUENCE_PARALLEL_EXTRA_COLLECTIVES)


def tp_head_gathered(job: Job) -> bool:
    """Whether the LM head is split over tp with its logits gathered (DeepSpeed's AutoTP:
    column-parallel, LinearLayer(gather_output=True))."""
    return job.layout.tp > 1 and job.engine != "torch"


def tp_head_split(job: Job) -> bool:
    """Whether the LM head's compute is split over tp: DeepSpeed's AutoTP (its logits
    gathered), the torch engine's vocab-parallel head (its logits stay split:
    torch_native.vocab_parallel); the torch engine without it replicates the head."""
    return tp_head_gathered(job) or vocab_parallel(job)


def job_collectives(job: Job, shard: Shard) -> dict[str, float]:
    """`collectives_per_group` with the job's engine, zero_optimization block and model."""
    zero_block = job.zero_optimization
    threshold = zero_setting(zero_block, "stage3_param_persistence_threshold")
    sizes = layer_matrix_sizes(job.model)
    dp = dp_collectives(
        shard.layout,
        shard.params,
        shard.layers,
        job.batch.grad_accum_steps,
        zero_block,
        data_parallel=job.strategy.data_parallel if job.engine == "torch" else None,
        grad_bytes=shard.moved.grad,
        gathered_per_layer=zero3_gathered_per_layer(sizes, shard.layout.tp, threshold),
        stays_gathered=shard.params <= zero_setting(zero_block, "stage3_max_live_parameters"),
    )
    return collectives_per_group(
        shard.layout,
        dp,
        shard.layers,
        job.batch.grad_accum_steps,
        tp_all_reduces_per_layer=tp_collectives_per_layer(job),
        tp_head_collectives=tp_head_collectives(job),
    )


# The loss under loss_parallel (vocab-parallel logits): all-reduces of the max, of the sum of
# exponentials and of the target's logit over the vocabulary's shards (3 per micro-batch more
# in torch_tp's traces than the layers and the split head account for).
LOSS_PARALLEL_COLLECTIVES = 3


def tp_head_collectives(job: Job) -> int:
    """The tp collectives of the embedding, head and loss per micro-batch: 2 where the head is
    split (the gathered head's all-gather and all-reduce, or the vocab-parallel embedding's and
    head's all-reduces), plus the vocab-parallel loss's (`LOSS_PARALLEL_COLLECTIVES`)."""
    if not tp_head_split(job):
        return 0
    return 2 + (LOSS_PARALLEL_COLLECTIVES if vocab_parallel(job) else 0)


def job_links(
    job: Job, shard: Shard, *, bandwidth_gbps: float | None, latency_s: float | None
) -> Links:
    """`resolve_links` for the job's hardware, layout and nodes."""
    return resolve_links(
        job.hardware,
        job.measured,
        shard.layout,
        job.topology.ranks_per_node,
        job.device,
        bandwidth_gbps=bandwidth_gbps,
        latency_s=latency_s,
    )


def job_offload(job: Job, shard: Shard) -> tuple[float, float]:
    """`offload_traffic` (bytes, seconds per step) of this device's ZeRO shard."""
    return offload_traffic(
        shard.params / shard.layout.dp,
        grad_bytes=shard.moved.grad,
        param_bytes=shard.moved.param,
        grad_accum_steps=job.batch.grad_accum_steps,
        offload_optimizer=job.strategy.offload_optimizer != "none",
        offload_param=job.strategy.offload_param != "none",
        device_is_host=job.device == "cpu",
    )


def recompute_fraction(job: Job, shard: Shard) -> float:
    """What activation checkpointing adds to a step's compute: the recomputed layers of this
    device's stage (`num_recomputed_layers`, × pp for the model's) run their forward once more,
    a fraction of the step's model FLOPs (`recompute_flops_fraction`); 0 without it."""
    model, seq_len = job.model, job.batch.seq_len
    per_stage = num_recomputed_layers(
        job.activation_checkpointing, job.activation_checkpointing_every, shard.layers
    )
    layer_forward = 2.0 * shard.split.per_layer + 4.0 * model.hidden_size * seq_len
    flops = train_flops_per_token(
        shard.split.matmul, shard.split.num_layers, model.hidden_size, seq_len
    )
    return recompute_flops_fraction(layer_forward, per_stage * shard.layout.pp, flops)


def compute_s(job: Job, shard: Shard, flops_per_token: float, efficiency: float) -> float:
    """Forward + backward of a step, with the recompute of checkpointed layers
    (`recompute_fraction`): the measured parts' (`measured_compute_s`, with ZeRO-3's probed
    host work per micro-batch) when hardware.time_source=measured, else the efficiency
    model's (`efficiency_compute_s`)."""
    return (1.0 + recompute_fraction(job, shard)) * _fwd_bwd_s(
        job, shard, flops_per_token, efficiency
    )


def device_flops_per_token(job: Job, shard: Shard, *, whole_pipeline: bool = False) -> float:
    """Training FLOPs per token of the job's busiest device (its pipeline stage, its tp share;
    metrics.device_train_flops_per_token); whole_pipeline: of all its stages together."""
    split, layout = shard.split, shard.layout
    return device_train_flops_per_token(
        split.per_layer,
        split.num_layers,
        split.matmul - split.num_layers * split.per_layer,
        job.model.hidden_size,
        job.batch.seq_len,
        tp=layout.tp,
        pp=1 if whole_pipeline else layout.pp,
        head_split_by_tp=tp_head_split(job),
    )


def _fwd_bwd_s(job: Job, shard: Shard, flops_per_token: float, efficiency: float) -> float:
    """A step's forward + backward on the busiest device, without recompute (compute_s):
    `flops_per_token` is the model's, of which that device runs `device_flops_per_token`. The
    efficiency model adds, for eager attention, its scores' memory traffic (eager_scores_s);
    measured parts time it with the rest."""
    hardware, batch, layout = job.hardware, job.batch, shard.layout
    device_flops = device_flops_per_token(job, shard)
    parts = measured_parts_s(hardware, job.measured)
    if parts:
        engine_host = job.measured.micro_batch_engine_host_s or 0.0
        return measured_compute_s(
            job.device,
            *parts,
            layout.tp,
            layout.pp,
            batch.grad_accum_steps,
            engine_host,
            kernel_share=device_flops / flops_per_token,
        )
    peak = getattr(hardware, f"peak_tflops_{job.dtype}")
    flops_s = efficiency_compute_s(
        device_flops,
        batch.micro_batch_size,
        batch.grad_accum_steps,
        batch.seq_len,
        1,
        1,
        peak,
        efficiency,
    )
    if job.model.attn_implementation != "eager":
        return flops_s
    scores_s = eager_scores_s(
        batch.micro_batch_size,
        batch.seq_len,
        job.model.num_heads / layout.tp,
        shard.layers,
        BYTES_PER_DTYPE[job.dtype],
        hardware.mem_bandwidth_gbps,
    )
    return flops_s + batch.grad_accum_steps * scores_s


def job_oversubscription(job: Job) -> float:
    """`cpu_oversubscription` of a CPU job: the ranks on one machine (ranks_sharing_machine)
    × each one's threads (rank_threads, the launcher's rule) over the cores they share
    (job.measured.host_cores, attached by prepare_job); 1 on a GPU or when the cores are
    unknown."""
    cores = job.measured.host_cores
    if job.device != "cpu" or not cores:
        return 1.0
    topology = job.topology
    ranks = ranks_sharing_machine(topology.rank_launcher, job.world_size, topology.ranks_per_node)
    return cpu_oversubscription(ranks, rank_threads(cores, ranks), cores)


def optimizer_s(job: Job, shard: Shard) -> float:
    """`optimizer_term_s` for this device: AdamW states in fp32 for fp32 and the mixed recipes,
    in bf16 for pure bf16; ZeRO-1+ and FSDP update a 1/dp shard; DeepSpeed's mixed recipe
    writes a bf16 copy back; the measured memory bandwidth and ZeRO-3's probed step when
    hardware.time_source=measured."""
    hardware, layout, dtype = job.hardware, shard.layout, job.dtype
    mixed = is_mixed(dtype, job_precision(job))
    measured = measured_parts_s(hardware, job.measured) is not None
    mem_bandwidth = hardware.mem_bandwidth_gbps
    if measured:
        mem_bandwidth = job.measured.measured_mem_bandwidth_gbps or mem_bandwidth
    return optimizer_term_s(
        offloaded=job.strategy.offload_optimizer != "none" and job.device != "cpu",
        update_params=shard.params if layout.zero_stage == 0 else shard.params / layout.dp,
        total_params=shard.split.total,
        state_bytes=4 if mixed or dtype == "fp32" else BYTES_PER_DTYPE[dtype],
        bf16_copy=mixed and job.engine == "deepspeed",
        mem_bandwidth_gbps=mem_bandwidth,
        engine_step_s=job.measured.engine_step_s if measured else None,
    )


def step_time_terms(
    job: Job,
    shard: Shard,
    comm: dict[str, float],
    collectives: dict[str, float],
    links: Links,
    flops_per_token: float,
    efficiency: float,
    offload_s: float,
) -> tuple[dict[str, float], float]:
    """The step's terms in seconds (compute, bubble, exposed comm, optimizer, offload, and on
    a CPU host whose cores its ranks time-share what that adds: `oversubscribed`,
    job_oversubscription) and the communication hidden under compute (`hidden_comm_s`)."""
    m = job.batch.grad_accum_steps
    compute = compute_s(job, shard, flops_per_token, efficiency)
    stage_flops = device_flops_per_token(job, shard)
    whole_flops = device_flops_per_token(job, shard, whole_pipeline=True)
    comm_s = comm_s_per_group(comm, collectives, links)
    hidden = hidden_comm_s(
        job.engine,
        job.strategy.data_parallel,
        job.device,
        compute,
        comm_s["dp"],
        shard.params * shard.moved.grad,
        shard.layers,
        m,
    )
    time_s = {
        "compute": compute,
        "bubble": pipeline_bubble_s(compute, m, stage_flops, whole_flops - stage_flops),
        "comm": sum(comm_s.values()) - hidden,  # exposed
        "optimizer": optimizer_s(job, shard),
        "offload": offload_s,
    }
    oversubscription = job_oversubscription(job)
    if oversubscription > 1.0:  # the ranks time-share the host's cores
        # a rank's mean busy time: its stage's share of the pipeline's compute (the bubble is
        # waiting), its communication, optimizer and offload
        mean_compute = compute * whole_flops / (stage_flops * shard.layout.pp)
        busy = mean_compute + sum(v for k, v in time_s.items() if k not in ("compute", "bubble"))
        time_s["oversubscribed"] = oversubscribed_s(time_s, oversubscription, busy)
    return time_s, hidden
