"""Predicted memory, communication and step time of a training layout, before anything runs.

Pure functions of the architecture, the layout and the hardware (no torch import), each with
its source, so `distbench plan` can rank strategies in seconds and a measured run can be
compared with its prediction (`pred_vs_measured`). Bytes are per device unless named otherwise.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm     # uses predict/recommend
    python -c "from distbench.figures.analytic import *; print(zero_model_states_bytes(7e9, 8, 3))"

What is modelled and what is not:
- model states: the ZeRO paper's per-stage formulas; TP divides every tensor by tp (Megatron's
  vocab-parallel embedding; norms are replicated in practice, a rounding error); PP keeps the
  heaviest stage (its layers plus the input embedding or the LM head); offload moves what it
  offloads to the host, except when the device *is* the host (CPU ranks).
- ZeRO-3 gathers one weight at a time: its working set is the largest single weight matrix.
- activations: Korthikanti et al. 2022 per micro-batch, times the micro-batches a pipeline
  stage holds in flight (1F1B), plus the fp32 cross-entropy logits.
- not modelled: DeepSpeed's communication buckets (5e6 elements here, ~20 MB), the CUDA
  context and allocator fragmentation, temporary buffers of the optimizer step. On CPU the
  measured peak is the process RSS: see `pred_vs_measured`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from distbench.compose.schema import ModelConfig
from distbench.figures.metrics import (
    GIB,
    cost_usd_per_1m_tokens,
    tokens_per_step,
    train_flops_per_token,
)
from distbench.job import Job, Layout
from distbench.ranks.models import count_params

GB = 1e9
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# Model FLOPs utilisation assumed for the compute term. GPU: 0.4, what well-tuned dense
# transformer training reaches (Megatron-LM and PaLM report 40-55 % MFU). CPU: 0.1, measured
# here (model=tiny strategy=dp world_size=2 batch=small fp32, gloo: mfu_pct 9.5): eager PyTorch
# on one core per rank is far from the FMA peak. `distbench plan --efficiency` overrides.
DEFAULT_EFFICIENCY = {"cuda": 0.4, "cpu": 0.1}
# Per-collective latency (the α of the α-β model). NCCL: ~10 µs within a node (nccl-tests
# small-message times); gloo over loopback TCP: ~100 µs.
DEFAULT_LATENCY_S = {"cuda": 10e-6, "cpu": 100e-6}
# Link between ranks when hardware.interconnect_gbps is unset: CPU ranks on one host talk
# gloo over loopback TCP (a few GB/s).
DEFAULT_CPU_INTERCONNECT_GBPS = 2.0
# Host link for offload (GB/s): PCIe 4.0 x16 is 32 GB/s raw, ~25 effective.
HOST_LINK_GBPS = 25.0
# CPU optimizer throughput for offload (parameters/s): torch AdamW (foreach off) on the host,
# the optimizer distbench hands DeepSpeed; DeepSpeed's CPUAdam is ~5x faster (ZeRO-Offload).
CPU_ADAM_PARAMS_PER_S = 2e8
# Elements per DeepSpeed communication bucket (conf/ds_zero/*.yaml reduce_bucket_size).
DEFAULT_BUCKET_ELEMENTS = 5_000_000
# Process RSS of a CPU rank that is not model states or activations: the interpreter, torch,
# transformers, DeepSpeed (0.37 GiB after the imports on this host) plus gloo, the engine and
# allocator caches (init_mem_gib 0.52 of a dp tiny run whose parameters are 0.03 GiB). Added to
# the predicted peak on CPU only: the measured CPU peak is VmHWM, the whole process.
CPU_RUNTIME_OVERHEAD_GIB = 0.5
# Weight matrices per layer (what ZeRO-3 gathers one by one): Llama q, k, v, o, gate, up, down;
# GPT-2 c_attn, attn c_proj, c_fc, mlp c_proj. Norms stay resident (persistence threshold).
MATRICES_PER_LAYER = {"llama": 7, "gpt2": 4}
# Order used to break near-ties (within TIE_FRACTION of the fastest): least sharded first,
# the course's "use DDP when it fits, ZeRO when needed, offload last".
PREFERENCE = ("dp", "zero1", "zero2", "tp", "pp", "zero3", "zero2_offload", "zero3_offload")
TIE_FRACTION = 0.02


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states: parameter, gradient, optimizer (K)."""

    param: int
    grad: int
    optimizer: int


def state_bytes_per_param(dtype: str) -> StateBytes:
    """Mixed precision (bf16/fp16) with Adam: 2 + 2 + K, K = 12 (fp32 master copy, momentum,
    variance; ZeRO paper section 3.1). Plain fp32 training has no master copy: 4 + 4 + 8."""
    if dtype == "fp32":
        return StateBytes(param=4, grad=4, optimizer=8)
    if dtype in ("bf16", "fp16"):
        return StateBytes(param=2, grad=2, optimizer=12)
    raise ValueError(f"dtype={dtype!r}; choose one of {list(DTYPE_BYTES)}")


MIXED_ADAM = StateBytes(param=2, grad=2, optimizer=12)


def zero_model_states_bytes(
    num_params: float, dp: int, zero_stage: int, state: StateBytes = MIXED_ADAM
) -> dict[str, float]:
    """Model-state bytes per device under ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory
    Optimizations Toward Training Trillion Parameter Models", figure 1), Ψ params, Nd = dp:

        stage 0 (DDP)  (2 + 2 + K) Ψ
        stage 1        2Ψ + 2Ψ + KΨ/Nd          optimizer states sharded
        stage 2        2Ψ + (2 + K) Ψ/Nd        + gradients sharded
        stage 3        (2 + 2 + K) Ψ/Nd         + parameters sharded

    With 7.5B params on 64 devices the paper gives 120, 31.4, 16.6 and 1.9 GB."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage}; choose 0, 1, 2 or 3")
    return {
        "params": state.param * num_params / (dp if zero_stage >= 3 else 1),
        "grads": state.grad * num_params / (dp if zero_stage >= 2 else 1),
        "optimizer": state.optimizer * num_params / (dp if zero_stage >= 1 else 1),
    }


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch_size: int,
    hidden_size: int,
    num_heads: int,
    *,
    tp: int = 1,
    recompute: bool = False,
    dtype_bytes: int = 2,
    attention_scores_stored: bool = True,
) -> float:
    """Activation bytes one transformer layer keeps for backward, per micro-batch.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    section 4 and table 2 (16-bit activations, 1-byte dropout masks):

        no parallelism        s·b·h·(34 + 5·a·s/h)
        tensor parallel t     s·b·h·(10 + 24/t + 5·a·s/(h·t))   (no sequence parallelism,
                                                               as DeepSpeed AutoTP)
        full recomputation    2·s·b·h                            (only the layer's input)

    The 5·a·s/h term is the a·s² attention scores (softmax output, dropout mask and output);
    fused attention (`sdpa`'s flash / memory-efficient kernels) does not store it: pass
    attention_scores_stored=False. fp32 training (dtype_bytes=4) doubles every term, which
    slightly overstates the 1-byte dropout masks (3 of the 34 + 5as/h bytes): close enough,
    and Llama has no dropout anyway. The formula is GPT-3's layer (4h GeLU MLP); a SwiGLU MLP
    of intermediate size ≈ 8h/3 stores a similar amount."""
    s, b, h, a, t = seq_len, micro_batch_size, hidden_size, num_heads, tp
    scale = dtype_bytes / 2
    if recompute:
        return 2.0 * s * b * h * scale
    scores = 5.0 * a * s / (h * t) if attention_scores_stored else 0.0
    return s * b * h * (10.0 + 24.0 / t + scores) * scale


def logits_bytes(seq_len: int, micro_batch_size: int, vocab_size: int, tp: int = 1) -> float:
    """The cross-entropy's fp32 logits: 4·s·b·v/t bytes (Korthikanti et al. 2022, section
    4.3). A lower bound for transformers, which also keeps the 16-bit logits."""
    return 4.0 * seq_len * micro_batch_size * vocab_size / tp


@dataclass(frozen=True)
class ParamSplit:
    """Where a model's parameters sit: per layer, and outside the layers."""

    total: int
    matmul: int
    per_layer: float
    num_layers: int
    input_embedding: int  # token (+ position) tables: on the first pipeline stage
    output_head: int  # LM head (a tied one is a copy of the table) + final norm: last stage
    largest_matrix: int  # the biggest single weight ZeRO-3 gathers at once


def param_split(model_cfg: ModelConfig) -> ParamSplit:
    """Split models.count_params (checked against the built model in tests) into layers and
    the rest, by counting the same architecture with zero layers."""
    counts = count_params(model_cfg)
    outside = count_params(dataclasses.replace(model_cfg, num_layers=0))["total"]
    table = model_cfg.vocab_size * model_cfg.hidden_size
    head = outside - counts["embedding"] + (table if model_cfg.tie_word_embeddings else 0)
    return ParamSplit(
        total=counts["total"],
        matmul=counts["matmul"],
        per_layer=(counts["total"] - outside) / model_cfg.num_layers,
        num_layers=model_cfg.num_layers,
        input_embedding=counts["embedding"],
        output_head=head,
        largest_matrix=max(table, model_cfg.hidden_size * model_cfg.intermediate_size),
    )


def params_per_model_shard(split: ParamSplit, tp: int, pp: int) -> float:
    """Parameters one device holds before ZeRO: the heaviest pipeline stage, divided by tp."""
    if pp == 1:
        return split.total / tp
    stage = split.num_layers / pp * split.per_layer
    return (stage + max(split.input_embedding, split.output_head)) / tp


@dataclass(frozen=True)
class Memory:
    """Predicted bytes per device; `host` is what offload keeps in host memory per device."""

    params: float
    grads: float
    optimizer: float
    activations: float
    host: float = 0.0

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def memory_per_device(
    split: ParamSplit,
    layout: Layout,
    *,
    dtype: str,
    seq_len: int,
    micro_batch_size: int,
    grad_accum_steps: int,
    hidden_size: int,
    num_heads: int,
    vocab_size: int,
    offload_optimizer: bool = False,
    offload_param: bool = False,
    device_is_host: bool = False,
    recompute: bool = False,
    attention_scores_stored: bool = True,
) -> Memory:
    """Model states (ZeRO formulas on this device's model shard) + activations.

    Offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity's CPU tier): the optimizer states
    (and with offload_param the parameter shard) move to `host`, unless the device is the host.
    ZeRO-3 adds its gathered working set (the largest weight, in the training dtype).
    Activations: one micro-batch without pipelining; a 1F1B pipeline's first stage keeps
    min(pp, micro-batches) in flight, each of its L/pp layers (Korthikanti et al. 2022, 4.2.3)."""
    state = state_bytes_per_param(dtype)
    shard = params_per_model_shard(split, layout.tp, layout.pp)
    states = zero_model_states_bytes(shard, layout.dp, layout.zero_stage, state)
    host = 0.0
    if offload_optimizer and not device_is_host:
        host += states["optimizer"]
        states["optimizer"] = 0.0
    if offload_param and not device_is_host:
        host += states["params"]
        states["params"] = 0.0
    if layout.zero_stage == 3:
        states["params"] += state.param * split.largest_matrix / layout.tp
    per_layer = activation_bytes_per_layer(
        seq_len,
        micro_batch_size,
        hidden_size,
        num_heads,
        tp=layout.tp,
        recompute=recompute,
        dtype_bytes=DTYPE_BYTES[dtype],
        attention_scores_stored=attention_scores_stored,
    )
    in_flight = min(layout.pp, grad_accum_steps)
    activations = per_layer * split.num_layers / layout.pp * in_flight
    activations += logits_bytes(seq_len, micro_batch_size, vocab_size, layout.tp)
    return Memory(activations=activations, host=host, **states)


# --------------------------------------------------------------------------- communication


def ring_all_reduce_bytes(num_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `num_bytes`: 2·(n−1)/n · num_bytes
    (Patarasuk & Yuan 2009; nccl-tests doc/PERFORMANCE.md, the bus-bandwidth factor)."""
    return 2.0 * (n - 1) / n * num_bytes


def ring_gather_bytes(num_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-gather or reduce-scatter: (n−1)/n · num_bytes."""
    return (n - 1) / n * num_bytes


def dp_comm_bytes(
    shard_params: float,
    dp: int,
    zero_stage: int,
    *,
    grad_bytes: int,
    param_bytes: int,
    grad_accum_steps: int = 1,
) -> float:
    """Data-parallel bytes sent per device per optimizer step (ZeRO paper, section 7):

        stage 0   all-reduce of the gradients          2Ψ(n−1)/n        once per step
        stage 1   reduce-scatter + all-gather params   2Ψ(n−1)/n        once per step
        stage 2   reduce-scatter every micro-step + all-gather params once
        stage 3   per micro-step: all-gather params in forward and in backward +
                  reduce-scatter grads: 3Ψ(n−1)/n = 1.5× DP

    Ψ in elements × bytes per element. With one micro-step all of this is the paper's; with
    gradient accumulation DeepSpeed reduces stage 2/3 gradients in every backward (they are
    partitioned), and stage 0/1 only at the accumulation boundary."""
    if dp == 1:
        return 0.0
    grads, params = shard_params * grad_bytes, shard_params * param_bytes
    m = grad_accum_steps
    if zero_stage == 0:
        return ring_all_reduce_bytes(grads, dp)
    if zero_stage == 1:
        return ring_gather_bytes(grads, dp) + ring_gather_bytes(params, dp)
    if zero_stage == 2:
        return m * ring_gather_bytes(grads, dp) + ring_gather_bytes(params, dp)
    return m * (2 * ring_gather_bytes(params, dp) + ring_gather_bytes(grads, dp))


def tp_comm_bytes(
    tp: int,
    num_layers_local: float,
    micro_batch_size: int,
    seq_len: int,
    hidden_size: int,
    *,
    act_bytes: int,
    grad_accum_steps: int = 1,
) -> float:
    """Tensor-parallel bytes per device per step: 4 all-reduces of b·s·h per layer per
    micro-batch, 2 in forward (after attention and after the MLP) and 2 in backward
    (Shoeybi et al. 2019, Megatron-LM, section 3 and figure 4), ring factor 2(t−1)/t."""
    if tp == 1:
        return 0.0
    one = micro_batch_size * seq_len * hidden_size * act_bytes
    return grad_accum_steps * num_layers_local * 4 * ring_all_reduce_bytes(one, tp)


def pp_comm_bytes(
    pp: int, micro_batch_size: int, seq_len: int, hidden_size: int, *, act_bytes: int, num_micro
) -> float:
    """Pipeline bytes a middle stage sends per step: per micro-batch its b·s·h activations
    forward and their gradient backward (GPipe / PipeDream point-to-point)."""
    if pp == 1:
        return 0.0
    return 2.0 * num_micro * micro_batch_size * seq_len * hidden_size * act_bytes


def pipeline_bubble_fraction(pp: int, num_micro_batches: int) -> float:
    """Idle fraction of a GPipe/1F1B pipeline step: (p−1)/(m+p−1) (Huang et al. 2019 GPipe;
    Narayanan et al. 2021, Megatron-LM 3D, section 2.2)."""
    return (pp - 1) / (num_micro_batches + pp - 1)


def comm_time_s(
    num_bytes: float, bandwidth_gbps: float, num_collectives: float = 0, latency_s: float = 0.0
) -> float:
    """α-β model (Hockney 1994): num_collectives·α + bytes / β, β in GB/s (1e9 bytes/s)."""
    return num_collectives * latency_s + num_bytes / (bandwidth_gbps * GB)


# --------------------------------------------------------------------------- prediction


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
        if self.device_mem_bytes is None:
            return None
        return self.mem.total <= self.device_mem_bytes

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


def zero_equivalent_stage(job: Job) -> int:
    """How sharded the model states are, as a ZeRO stage: DeepSpeed's stage when it runs; on
    the torch engine FSDP (fully_shard) shards parameters, gradients and optimizer states like
    ZeRO-3, and DDP or one device replicate them (0)."""
    if job.layout.zero_stage is not None:
        return job.layout.zero_stage
    return 3 if job.strategy is not None and job.strategy.data_parallel == "fsdp" else 0


def predict(
    job: Job,
    *,
    efficiency: float | None = None,
    bandwidth_gbps: float | None = None,
    latency_s: float | None = None,
    recompute: bool = False,
) -> Prediction:
    """Predict one training job (its model, batch, layout and resolved hardware).

    step time = compute + pipeline bubble + exposed communication + offload, where
      compute  = model FLOPs per token (metrics.train_flops_per_token: 6N + 12·L·h·s) × this
                 device's tokens / (peak TFLOP/s of the dtype × efficiency)
      bubble   = compute × (p−1)/m, i.e. (p−1)/(m+p−1) of the pipelined time
      comm     = α-β time of every byte: conf/ds_zero sets overlap_comm false, so nothing hides
      offload  = host-link traffic at HOST_LINK_GBPS + the host Adam (GPU devices only)
    job.hardware is resolved (hardware.resolve_hardware): peak_tflops_<dtype>, mem_gib,
    interconnect_gbps (GB/s), price_usd_per_hour. Without a peak, times are None. The
    prediction's layout carries zero_equivalent_stage as its zero_stage."""
    model, batch, strategy, hardware = job.model, job.batch, job.strategy, job.hardware
    if model is None or batch is None or strategy is None:
        raise ValueError(f"workload={job.workload.name} builds no model: nothing to predict")
    layout = dataclasses.replace(job.layout, zero_stage=zero_equivalent_stage(job))
    dtype = job.dtype
    device = job.device
    device_is_host = device == "cpu"
    split = param_split(model)
    s, b, m = batch.seq_len, batch.micro_batch_size, batch.grad_accum_steps
    h = model.hidden_size
    state = state_bytes_per_param(dtype)
    act_bytes = DTYPE_BYTES[dtype]
    offload_optimizer = strategy.offload_optimizer != "none"
    offload_param = strategy.offload_param != "none"

    mem = memory_per_device(
        split,
        layout,
        dtype=dtype,
        seq_len=s,
        micro_batch_size=b,
        grad_accum_steps=m,
        hidden_size=h,
        num_heads=model.num_heads,
        vocab_size=model.vocab_size,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        device_is_host=device_is_host,
        recompute=recompute,
        attention_scores_stored=model.attn_implementation == "eager",
    )
    mem_gib = hardware.mem_gib
    device_mem_bytes = None if mem_gib is None else float(mem_gib) * GIB

    shard = params_per_model_shard(split, layout.tp, layout.pp)
    layers_local = split.num_layers / layout.pp
    comm = {
        "dp": dp_comm_bytes(
            shard,
            layout.dp,
            layout.zero_stage,
            grad_bytes=state.grad,
            param_bytes=state.param,
            grad_accum_steps=m,
        ),
        "tp": tp_comm_bytes(
            layout.tp, layers_local, b, s, h, act_bytes=act_bytes, grad_accum_steps=m
        ),
        "pp": pp_comm_bytes(layout.pp, b, s, h, act_bytes=act_bytes, num_micro=m),
    }
    zero_block = job.zero_optimization or {}
    bucket = float(zero_block.get("reduce_bucket_size", DEFAULT_BUCKET_ELEMENTS))
    buckets = math.ceil(shard / bucket) if layout.dp > 1 else 0
    # Collectives per step: gradient buckets (reduce, plus the all-gather of updated params
    # for stage 1/2); ZeRO-3 all-gathers each weight matrix in forward and in backward.
    reductions = {0: 1, 1: 2, 2: m + 1, 3: m}[layout.zero_stage]
    num_collectives = buckets * reductions
    if layout.zero_stage == 3 and layout.dp > 1:
        gathered = MATRICES_PER_LAYER[model.family] * layers_local + 2  # + embedding, LM head
        num_collectives += 2 * m * gathered
    num_collectives += 4 * layers_local * m * (layout.tp > 1) + 2 * m * (layout.pp > 1)

    shard_dp = shard / layout.dp
    offload_bytes = 0.0
    offload_s = 0.0
    if not device_is_host:
        if offload_optimizer:  # gradients down, updated parameters up, once per step
            offload_bytes += shard_dp * (state.grad + state.param)
            offload_s += shard_dp / CPU_ADAM_PARAMS_PER_S
        if offload_param:  # the parameter shard comes up for forward and for backward
            offload_bytes += 2 * m * shard_dp * state.param
        offload_s += offload_bytes / (HOST_LINK_GBPS * GB)

    num_params = split.total
    flops = train_flops_per_token(split.matmul, split.num_layers, h, s)
    num_tokens = tokens_per_step(b, m, s, layout.dp)
    eff = efficiency if efficiency is not None else DEFAULT_EFFICIENCY.get(device, 0.4)
    bw = bandwidth_gbps or hardware.interconnect_gbps or DEFAULT_CPU_INTERCONNECT_GBPS
    alpha = latency_s if latency_s is not None else DEFAULT_LATENCY_S.get(device, 10e-6)
    assumptions = {
        "efficiency": eff,
        "bandwidth_gbps": float(bw),
        "latency_s": alpha,
        "recompute": recompute,
    }

    peak = getattr(hardware, f"peak_tflops_{dtype}")
    time_s: dict[str, float] = {}
    step = tokens_s = cost = None
    if peak:
        device_flops = flops * b * m * s / (layout.tp * layout.pp)
        compute = device_flops / (float(peak) * 1e12 * eff)
        time_s = {
            "compute": compute,
            "bubble": compute * (layout.pp - 1) / m,
            "comm": comm_time_s(sum(comm.values()), bw, num_collectives, alpha),
            "offload": offload_s,
        }
        step = sum(time_s.values())
        tokens_s = num_tokens / step
        cost = cost_usd_per_1m_tokens(
            layout.world_size, float(hardware.price_usd_per_hour or 0.0), step, num_tokens
        )
    return Prediction(
        strategy=strategy.name,
        layout=layout,
        num_params=num_params,
        mem=mem,
        device_mem_bytes=device_mem_bytes,
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


def recommend(predictions: list[Prediction]) -> tuple[str | None, str]:
    """The fastest predicted strategy among those that fit in device memory, and why.

    The course's rule ("use DDP when the model fits, ZeRO-1/2 when it barely does, ZeRO-3 when
    it needs sharding, more devices or model parallelism beyond") made quantitative: fit is
    the predicted total against the device's memory, and among what fits the predicted
    throughput (tokens/s: layouts with tp or pp have fewer replicas, so step times alone do
    not compare) decides; within TIE_FRACTION of the fastest, the least sharded (PREFERENCE)
    wins. Unknown memory counts as fitting; unknown speed ranks last. None when nothing fits."""
    if not predictions:
        return None, "no strategy validated at this world size"
    fitting = [p for p in predictions if p.fits is not False]
    too_big = sorted(
        (p for p in predictions if p.fits is False), key=lambda p: p.mem.total, reverse=True
    )
    not_fitting = "; ".join(f"{p.strategy} does not fit ({_gib(p.mem.total)} GiB)" for p in too_big)
    if not fitting:
        least = min(predictions, key=lambda p: p.mem.total)
        return None, (
            f"nothing fits: the smallest is {least.strategy} at {_gib(least.mem.total)} of "
            f"{_gib(least.device_mem_bytes)} GiB per device; add devices, or cut "
            "batch.micro_batch_size or batch.seq_len, or recompute activations (--recompute)"
        )

    def s_per_token(p: Prediction) -> float:
        return 1.0 / p.tokens_per_s if p.tokens_per_s else math.inf

    fastest = min(fitting, key=s_per_token)
    near = [p for p in fitting if s_per_token(p) <= s_per_token(fastest) * (1 + TIE_FRACTION)]
    best = min(near, key=lambda p: (_rank(p.strategy), s_per_token(p)))
    mem = f"{_gib(best.mem.total)} of {_gib(best.device_mem_bytes)} GiB"
    if best.tokens_per_s is None:
        speed = "no peak FLOP/s is known, so it is the least sharded that fits"
    elif best is fastest:
        speed = (
            f"is fastest among fitting ({best.tokens_per_s:,.0f} tokens/s, "
            f"{best.step_time_s:.3g} s/step)"
        )
    else:
        speed = (
            f"is within {TIE_FRACTION:.0%} of the fastest ({best.tokens_per_s:,.0f} vs "
            f"{fastest.strategy} {fastest.tokens_per_s:,.0f} tokens/s) with less sharding"
        )
    reason = f"{best.strategy}: fits ({mem}) and {speed}"
    return best.strategy, reason + (f"; {not_fitting}" if not_fitting else "")


def pred_vs_measured(job: Job, metrics: dict[str, float]) -> dict[str, float]:
    """Predicted figures for a finished job and their relative errors against what it measured:
    `pred_peak_mem_gib`, `pred_step_time_s`, `pred_comm_bytes_per_step`, and
    `mem_pred_rel_err` = (pred − measured)/measured against `peak_mem_gib`,
    `time_pred_rel_err` likewise against `step_time_s_p50` (each only when both exist).

    On GPU the measured peak is CUDA max allocated: model states and activations, as
    predicted. On CPU it is the process's peak RSS, which also holds the Python/torch/DeepSpeed
    runtime (~0.3–0.5 GiB per process), so the CPU prediction adds CPU_RUNTIME_OVERHEAD_GIB.
    On CPU the model also leaves the library defaults as assumptions (efficiency, loopback
    bandwidth); the errors say how good they were."""
    pred = predict(job)
    overhead = CPU_RUNTIME_OVERHEAD_GIB if job.device == "cpu" else 0.0
    out = {
        "pred_peak_mem_gib": pred.mem.total / GIB + overhead,
        "pred_comm_bytes_per_step": pred.comm_bytes_per_step,
    }
    if pred.step_time_s is not None:
        out["pred_step_time_s"] = pred.step_time_s
    if metrics.get("peak_mem_gib"):
        out["mem_pred_rel_err"] = _rel_err(out["pred_peak_mem_gib"], metrics["peak_mem_gib"])
    if pred.step_time_s is not None and metrics.get("step_time_s_p50"):
        out["time_pred_rel_err"] = _rel_err(pred.step_time_s, metrics["step_time_s_p50"])
    return out


def _rel_err(pred: float, measured: float) -> float:
    return (pred - measured) / measured


def _rank(strategy: str) -> int:
    return PREFERENCE.index(strategy) if strategy in PREFERENCE else len(PREFERENCE)


def _gib(num_bytes: float | None) -> str:
    return "?" if num_bytes is None else f"{num_bytes / GIB:.1f}"
