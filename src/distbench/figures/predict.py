"""Predicted memory, communication and step time of one training job, before anything runs,
and the same figures against what a finished run measured.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm     # predict + recommend
    python -c "from distbench.figures.predict import predict; print(predict.__doc__)"

`predict` assembles named terms, each a pure function with its source: memory
(figures/memory.py), communication (figures/communication.py), step time
(figures/step_time.py), FLOPs per token (figures/metrics.py):

    step time = compute + pipeline bubble + exposed communication + optimizer + offload
      compute  = model FLOPs per token (metrics.train_flops_per_token: 6N + 12·L·h·s) × this
                 device's tokens / (peak TFLOP/s of the dtype × efficiency), + eager
                 attention's score traffic at the memory bandwidth (eager_scores_s); with
                 hardware.time_source=measured, the micro-batch's measured parts instead
                 (measured_compute_s), and the measured memory bandwidth for the optimizer;
                 for ZeRO-3 its engine's host work per micro-batch and per step, probed
                 (workloads/train/engine_probe.py)
      bubble   = compute × (p−1)/m, i.e. (p−1)/(m+p−1) of the pipelined time
      comm     = α-β time of every byte, less what runs under compute (hidden_comm_s: the
                 torch engine's data-parallel traffic on GPUs; DeepSpeed's overlap_comm is
                 false in conf/ds_zero); assumptions["comm_hidden_s"] holds the hidden part
      optimizer= AdamW's memory-bound step over this device's shard (optimizer_step_s)
      offload  = host-link traffic at HOST_LINK_GBPS + the host Adam (GPU devices only)
      oversubscribed = (k − 1) × the terms above on a CPU host whose cores are asked for k > 1
                 times over (ranks × threads / cores: job_terms.job_oversubscription); the
                 prediction's assumptions["oversubscription"] and a run's
                 `pred_oversubscription` say so
    compute is the busiest device's: its pipeline stage, its tp share of the layers, and the
    LM head whole where the engine replicates it (metrics.device_train_flops_per_token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distbench.engines.torch_native import sequence_parallel, vocab_parallel
from distbench.figures.communication import Links
from distbench.figures.job_terms import (
    device_shard,
    host_mem_bytes_per_node,
    job_collectives,
    job_comm_bytes,
    job_links,
    job_memory,
    job_offload,
    job_oversubscription,
    job_precision,
    step_time_terms,
)
from distbench.figures.memory import Memory, fits_device, gpu_headroom_bytes
from distbench.figures.metrics import (
    GIB,
    cost_usd_per_1m_tokens,
    tokens_per_step,
    train_flops_per_token,
)
from distbench.figures.step_time import hardware_efficiency, measured_parts_s
from distbench.precision import precision_tag

if TYPE_CHECKING:
    from distbench.job import Job, Layout


@dataclass(frozen=True)
class Prediction:
    """What one strategy is predicted to need and take, per device and per optimizer step."""

    strategy: str
    layout: Layout
    num_params: int
    mem: Memory
    device_mem_bytes: float | None
    comm_bytes: dict[str, float]  # dp / tp / pp bytes sent per device per step
    offload_bytes_per_step: float
    time_s: dict[str, float]  # compute, bubble, comm, offload (None when the peak is unknown)
    num_tokens_per_step: int
    flops_per_token: float
    step_time_s: float | None
    tokens_per_s: float | None
    cost_usd_per_1m_tokens: float | None
    assumptions: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool | None:
        """Predicted peak ≤ device memory − headroom (figures/memory.py fits_device)."""
        return fits_device(self.mem, self.device_mem_bytes)

    @property
    def mem_needed_bytes(self) -> float:
        """The predicted peak plus, on a GPU, the headroom a fit keeps free (the CUDA context
        and a share of the device: figures/memory.py gpu_headroom_bytes)."""
        if self.mem.runtime or self.device_mem_bytes is None:
            return self.mem.total
        return self.mem.total + gpu_headroom_bytes(self.device_mem_bytes)

    @property
    def comm_bytes_per_step(self) -> float:
        return sum(self.comm_bytes.values())

    def as_dict(self) -> dict[str, Any]:
        """The public JSON of one prediction (`distbench plan --json`)."""
        return {
            "strategy": self.strategy,
            **self.layout.as_dict(),
            "num_params": self.num_params,
            "mem_bytes": self.mem.as_dict(),
            "mem_gib": {k: v / GIB for k, v in self.mem.as_dict().items()},
            "mem_terms_gib": {k: v / GIB for k, v in self.mem.terms.items()},
            "mem_needed_gib": self.mem_needed_bytes / GIB,
            "host_mem_gib_per_node": (self.assumptions.get("host_mem_bytes_per_node") or 0.0) / GIB,
            "device_mem_gib": None
            if self.device_mem_bytes is None
            else self.device_mem_bytes / GIB,
            "fits": self.fits,
            "comm_bytes_per_step": self.comm_bytes_per_step,
            "comm_bytes": self.comm_bytes,
            "offload_bytes_per_step": self.offload_bytes_per_step,
            "time_s": self.time_s,
            "step_time_s": self.step_time_s,
            "tokens_per_step": self.num_tokens_per_step,
            "tokens_per_s": self.tokens_per_s,
            "model_flops_per_token": self.flops_per_token,
            "cost_usd_per_1m_tokens": self.cost_usd_per_1m_tokens,
            "assumptions": self.assumptions,
        }


def assumptions_of(
    job: Job, links: Links, efficiency: float, recompute: bool, host_per_node: float
) -> dict[str, Any]:
    """What a prediction assumed, as `distbench plan --json` shows it."""
    return {
        "efficiency": efficiency,
        "bandwidth_gbps": links.intra_gbps,
        "internode_gbytes_per_s": links.internode_gbytes_per_s,
        "ranks_per_node": job.topology.ranks_per_node,
        "num_nodes": job.topology.num_nodes,
        "link_gbytes_per_s": links.per_group,
        "latency_s": links.latency_s,
        "recompute": recompute or job.activation_checkpointing != "none",
        "activation_checkpointing": job.activation_checkpointing,
        "activation_checkpointing_every": job.activation_checkpointing_every,
        # the torch engine's TP: embedding and LM head split by vocabulary; norms and residual
        # by sequence (engines/torch_native.py; false off that engine or at tp 1)
        "vocab_parallel": vocab_parallel(job),
        "sequence_parallel": sequence_parallel(job),
        "precision": precision_tag(job.dtype, job_precision(job)),
        "host_mem_bytes_per_node": host_per_node,
        "time_source": (
            "efficiency" if measured_parts_s(job.hardware, job.measured) is None else "measured"
        ),
        # ranks × threads per core of a CPU host (1: each rank has cores of its own)
        "oversubscription": job_oversubscription(job),
        "host_cores": job.measured.host_cores,
    }


# --------------------------------------------------------------------------- the assembly


def predict(
    job: Job,
    *,
    efficiency: float | None = None,
    bandwidth_gbps: float | None = None,
    latency_s: float | None = None,
    recompute: bool = False,
) -> Prediction:
    """Predict one training job (its model, batch, layout and resolved hardware): the terms
    of this module's docstring. job.hardware is resolved (hardware.resolve_hardware):
    peak_tflops_<dtype>, mem_gib, interconnect_gbps (GB/s), price_usd_per_hour. Without a peak
    (and without measured parts), times are None. The prediction's layout carries
    zero_equivalent_stage as its zero_stage. recompute=True predicts the job with
    activation_checkpointing=full (`distbench plan --recompute`)."""
    if recompute:
        job = job.replace(activation_checkpointing="full")
    model, batch, strategy, hardware = job.model, job.batch, job.strategy, job.hardware
    if model is None or batch is None or strategy is None:
        raise ValueError(f"workload={job.workload.name} builds no model: nothing to predict")
    shard = device_shard(job)
    layout, split = shard.layout, shard.split
    flops = train_flops_per_token(split.matmul, split.num_layers, model.hidden_size, batch.seq_len)
    b, m, s = batch.micro_batch_size, batch.grad_accum_steps, batch.seq_len
    num_tokens = tokens_per_step(b, m, s, layout.dp)
    eff = (
        efficiency
        if efficiency is not None
        else hardware_efficiency(hardware.train_efficiency, job.device)
    )
    links = job_links(job, shard, bandwidth_gbps=bandwidth_gbps, latency_s=latency_s)
    comm = job_comm_bytes(job, shard)
    offload_bytes, offload_s = job_offload(job, shard)
    assumptions = assumptions_of(job, links, eff, recompute, host_mem_bytes_per_node(job, shard))
    time_s: dict[str, float] = {}
    step = tokens_s = cost = None
    if getattr(hardware, f"peak_tflops_{job.dtype}") or measured_parts_s(hardware, job.measured):
        collectives = job_collectives(job, shard)
        time_s, assumptions["comm_hidden_s"] = step_time_terms(
            job, shard, comm, collectives, links, flops, eff, offload_s
        )
        step = sum(time_s.values())
        tokens_s = num_tokens / step
        price = float(hardware.price_usd_per_hour or 0.0)
        cost = cost_usd_per_1m_tokens(layout.world_size, price, step, num_tokens)
    mem_gib = hardware.mem_gib
    return Prediction(
        strategy=strategy.name,
        layout=layout,
        num_params=split.total,
        mem=job_memory(job, shard, recompute=recompute),
        device_mem_bytes=None if mem_gib is None else float(mem_gib) * GIB,
        comm_bytes=comm,
        offload_bytes_per_step=offload_bytes,
        time_s=time_s,
        num_tokens_per_step=num_tokens,
        flops_per_token=flops,
        step_time_s=step,
        tokens_per_s=tokens_s,
        cost_usd_per_1m_tokens=cost,
        assumptions=assumptions,
    )


def pred_vs_measured(job: Job, metrics: dict[str, float]) -> dict[str, float]:
    """Predicted figures for a finished job and their relative errors against what it measured:
    `pred_peak_mem_gib`, `pred_step_time_s`, `pred_comm_bytes_per_step`, and
    `mem_pred_rel_err` = (pred − measured)/measured against `peak_mem_gib`,
    `time_pred_rel_err` likewise against `step_time_s_p50` (each only when both exist).

    On GPU the measured peak is CUDA max allocated: model states, buffers and activations, as
    predicted. On CPU it is the process's peak RSS, which also holds the Python/torch/DeepSpeed
    runtime, a term of the CPU prediction (`Memory.runtime`, CPU_RUNTIME_GIB). An offload run
    also logs `pred_host_mem_gib`, the host RAM per node DeepSpeed's estimator asks for; a
    CPU job whose ranks' threads outnumber the host's cores `pred_oversubscription`, how many
    times over (its step time assumes them time-shared: job_terms.job_oversubscription)."""
    pred = predict(job)
    out = {
        "pred_peak_mem_gib": pred.mem.total / GIB,
        "pred_comm_bytes_per_step": pred.comm_bytes_per_step,
    }
    host = pred.assumptions.get("host_mem_bytes_per_node") or 0.0
    if host:
        out["pred_host_mem_gib"] = host / GIB
    if pred.assumptions["oversubscription"] > 1.0:  # the step time assumes shared cores
        out["pred_oversubscription"] = pred.assumptions["oversubscription"]
    if pred.step_time_s is not None:
        out["pred_step_time_s"] = pred.step_time_s
    if metrics.get("peak_mem_gib"):
        out["mem_pred_rel_err"] = _rel_err(out["pred_peak_mem_gib"], metrics["peak_mem_gib"])
    if pred.step_time_s is not None and metrics.get("step_time_s_p50"):
        out["time_pred_rel_err"] = _rel_err(pred.step_time_s, metrics["step_time_s_p50"])
    return out


def _rel_err(pred: float, measured: float) -> float:
    return (pred - measured) / measured
