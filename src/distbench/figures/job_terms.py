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

from distbench.figures.activations import num_recomputed_layers, recompute_flops_fraction
from distbench.figures.communication import (
    Links,
    collectives_per_group,
    comm_bytes_per_group,
    comm_s_per_group,
    resolve_links,
)
from distbench.figures.memory import Memory, cpu_runtime_bytes, memory_per_device
from distbench.figures.metrics import BYTES_PER_DTYPE, train_flops_per_token
from distbench.figures.model_states import StateBytes, deepspeed_host_bytes_per_node
from distbench.figures.params import ParamSplit, param_split, params_per_model_shard
from distbench.figures.step_time import (
    efficiency_compute_s,
    hidden_comm_s,
    measured_compute_s,
    measured_parts_s,
    offload_traffic,
    optimizer_term_s,
)
from distbench.precision import is_mixed

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
    """The job's `Shard` (DeepSpeed divides everything by tp; torch_tp replicates the
    embedding, final norm and LM head)."""
    layout = dataclasses.replace(job.layout, zero_stage=zero_equivalent_stage(job))
    split = param_split(job.model)
    params = params_per_model_shard(
        split, layout.tp, layout.pp, outside_layers_whole=job.engine == "torch"
    )
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
    )


def job_collectives(job: Job, shard: Shard) -> dict[str, float]:
    """`collectives_per_group` with the job's zero_optimization block and model family."""
    return collectives_per_group(
        shard.layout,
        shard.params,
        shard.layers,
        job.batch.grad_accum_steps,
        job.zero_optimization,
        job.model.family,
    )


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


def _fwd_bwd_s(job: Job, shard: Shard, flops_per_token: float, efficiency: float) -> float:
    """A step's forward + backward without recompute (compute_s)."""
    hardware, batch, layout = job.hardware, job.batch, shard.layout
    parts = measured_parts_s(hardware, job.measured)
    if parts:
        engine_host = job.measured.micro_batch_engine_host_s or 0.0
        return measured_compute_s(
            job.device, *parts, layout.tp, layout.pp, batch.grad_accum_steps, engine_host
        )
    peak = getattr(hardware, f"peak_tflops_{job.dtype}")
    return efficiency_compute_s(
        flops_per_token,
        batch.micro_batch_size,
        batch.grad_accum_steps,
        batch.seq_len,
        layout.tp,
        layout.pp,
        peak,
        efficiency,
    )


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
    """The step's terms in seconds (compute, bubble, exposed comm, optimizer, offload) and the
    communication hidden under compute (`hidden_comm_s`)."""
    layout, m = shard.layout, job.batch.grad_accum_steps
    compute = compute_s(job, shard, flops_per_token, efficiency)
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
        "bubble": compute * (layout.pp - 1) / m,
        "comm": sum(comm_s.values()) - hidden,  # exposed
        "optimizer": optimizer_s(job, shard),
        "offload": offload_s,
    }
    return time_s, hidden
