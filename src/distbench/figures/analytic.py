"""Predicted memory, communication and step time of a training layout, before anything runs.

Pure functions of the architecture, the layout and the hardware (no torch import), each with
its source, so `distbench plan` can rank strategies in seconds and a measured run can be
compared with its prediction (`pred_vs_measured`). Bytes are per device unless named otherwise.

    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm     # uses predict/recommend
    python -c "from distbench.figures.analytic import *; print(zero_model_states_bytes(7e9, 8, 3))"

Every byte is named (`Memory.terms`) and has its source:
- model states per engine and precision recipe (`engine_state_terms`): the ZeRO paper's
  2 + 2 + 12 bytes/param (Rajbhandari et al. 2020) where the engine does that, and what torch
  AdamW, DDP, FSDP2 and DeepSpeed's optimizers really allocate where they differ (DeepSpeed's
  own `estimate_zero2/zero3_model_states_mem_needs` agree within 15 %: a test pins it). TP
  divides the decoder layers by tp (DeepSpeed: everything; torch_tp replicates embedding and
  head); PP keeps the heaviest stage; offload moves the optimizer states and fp32 gradients
  (and parameters) to the host unless the device *is* the host (CPU ranks).
- buffers from the run's own zero_optimization block (bucket sizes, ZeRO-3 live and
  prefetched parameters), DDP's gradient buckets, FSDP2's gathered layers.
- activations as HF's layers save them (`hf_activation_bytes_per_layer`, no s² term with
  SDPA), times the micro-batches a pipeline stage holds, plus the loss's logits.
- the peak is the resident terms + max(forward/backward activations, optimizer-step
  temporaries); on CPU + the process runtime (CPU_RUNTIME_GIB); on GPU fitting also needs
  the CUDA context (CUDA_CONTEXT_GIB) and fragmentation.
- communication per group on its link: a group within a node on hardware.interconnect_gbps
  (NVLink), one across nodes on hardware.internode_gbytes_per_s (the NIC per GPU).
- step time = compute + bubble + exposed communication + optimizer step + offload. Exposed:
  on GPUs the torch engine's data-parallel traffic runs under compute (`hidden_comm_s`:
  DDP's gradient buckets under backward, FSDP2's prefetched gathers and reduce-scatters under
  forward and backward); DeepSpeed runs with overlap_comm false (conf/ds_zero) and CPU ranks
  have one core for both, so nothing hides there. The optimizer step is memory-bound
  (`optimizer_step_s`: AdamW's bytes over hardware.mem_bandwidth_gbps); on CPU, where no
  bandwidth is catalogued, it stays inside the measured efficiency.
- not modelled: activation checkpointing unless --recompute, kernels' own workspaces.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from distbench.compose.schema import DEFAULT_PP_SCHEDULE, ModelConfig
from distbench.figures.metrics import (
    GIB,
    cost_usd_per_1m_tokens,
    tokens_per_step,
    train_flops_per_token,
)
from distbench.job import Job, Layout
from distbench.precision import is_mixed, precision_tag
from distbench.ranks.models import count_params

GB = 1e9
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# Model FLOPs utilisation assumed for the compute term. GPU: 0.4, what well-tuned dense
# transformer training reaches (Megatron-LM and PaLM report 40-55 % MFU; one H100 measured
# 21.7 % for llama_1b batch=medium, ../shared/gpu/README.md, 2026-11-23). CPU: 0.6, measured on
# this project's 2-core host (2026-11-24, strategy=single batch=small fp32: tiny 65.6 % and
# gpt2_124m with 2 layers 54.9 % of the cpuinfo peak); what the other strategies lose is
# their communication. `distbench plan --efficiency` overrides.
DEFAULT_EFFICIENCY = {"cuda": 0.4, "cpu": 0.6}
# Per-collective latency (the α of the α-β model). NCCL: ~10 µs within a node (nccl-tests
# small-message times); gloo over loopback TCP: ~100 µs.
DEFAULT_LATENCY_S = {"cuda": 10e-6, "cpu": 100e-6}
# Link between ranks when hardware.interconnect_gbps is unset: CPU ranks on one host talk
# gloo over loopback TCP; the reduction runs on the same busy core, so the effective rate is
# far below the socket's: 0.25 GB/s fits this host (2026-11-24, tiny ddp vs single at 2
# ranks: 0.134 s more per step for a 28 MB ring all-reduce, 0.21 GB/s; fsdp 0.29 GB/s).
DEFAULT_CPU_INTERCONNECT_GBPS = 0.25
# Host link for offload (GB/s): PCIe 4.0 x16 is 32 GB/s raw, ~25 effective.
HOST_LINK_GBPS = 25.0
# CPU optimizer throughput for offload (parameters/s): torch AdamW (foreach off) on the host,
# the optimizer distbench hands DeepSpeed; DeepSpeed's CPUAdam is ~5x faster (ZeRO-Offload).
CPU_ADAM_PARAMS_PER_S = 2e8
# Elements per DeepSpeed communication bucket (conf/ds_zero/*.yaml reduce_bucket_size).
DEFAULT_BUCKET_ELEMENTS = 5_000_000
# Process RSS of a CPU rank that is not model states or activations: the interpreter, torch,
# transformers, gloo, the engine, allocator caches; DeepSpeed adds its modules and its CPU
# communication op. Measured on this host (2026-11-24, model=tiny batch=small fp32): the
# init_mem_gib of single/ddp/fsdp runs is 0.40 GiB with 0.03 GiB of parameters, of a dp run
# 0.53. Counted in the predicted peak on CPU only (`Memory.runtime`): the measured CPU peak is
# VmHWM, the whole process; on a GPU the peak is CUDA max allocated, which has no runtime.
CPU_RUNTIME_GIB = {"torch": 0.37, "deepspeed": 0.49}
# What a CPU rank that communicates adds to its RSS during the steps beyond the buffers
# modelled: gloo's per-collective copies, and DeepSpeed's shared-memory CPU communication
# workspace. Fitted on this host (2026-11-24, benchmarks/plan_vs_measured.py, tiny and gpt2_2l
# at 2 ranks: measured peak − prediction without it, 0.06-0.17 GiB torch, 0.10-0.29 DeepSpeed).
CPU_COMM_RUNTIME_GIB = {"torch": 0.1, "deepspeed": 0.15}
# What CUDA max allocated does not show but a device must hold: the CUDA context and
# cuBLAS/NCCL workspaces (~0.5-1 GiB on an H100) and the caching allocator's fragmentation.
# Added when deciding whether a layout fits, not to pred_peak_mem_gib.
CUDA_CONTEXT_GIB = 0.75
ALLOCATOR_FRAGMENTATION = 0.05
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

    With 7.5B params on 64 devices the paper gives 120, 31.4, 16.6 and 1.9 GB. The textbook
    figure; what each engine really holds is `engine_state_terms`."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage}; choose 0, 1, 2 or 3")
    return {
        "params": state.param * num_params / (dp if zero_stage >= 3 else 1),
        "grads": state.grad * num_params / (dp if zero_stage >= 2 else 1),
        "optimizer": state.optimizer * num_params / (dp if zero_stage >= 1 else 1),
    }


NEVER = 4  # `sharded_from` of a buffer no ZeRO stage shards


@dataclass(frozen=True)
class StateTerm:
    """One per-parameter buffer an engine allocates: its name, the Memory field it counts in
    (params | grads | optimizer), bytes per parameter, the ZeRO stage from which it is split
    over the dp ranks (NEVER: whole on every rank), and whether it exists only inside the
    optimizer step (its bytes then compete with the activations for the peak, not add)."""

    name: str
    kind: str
    bytes_per_param: int
    sharded_from: int
    step_only: bool = False


def engine_state_terms(engine: str, dtype: str, precision: str, zero_stage: int) -> list[StateTerm]:
    """What each engine really allocates per parameter, by precision recipe (precision.py).

    torch (single, ddp, torch_tp/pp; fsdp with zero_stage=3): torch AdamW keeps exp_avg and
    exp_avg_sq in the parameters' dtype (torch.optim.AdamW), gradients are the parameters'
    dtype. fp32 / bf16-pure: w + w + 2w with w = 4 or 2 (16 or 8 B); bf16-mixed: fp32
    weights, grads and states (16 B), plus the bf16 copies autocast makes of every weight,
    which the backward keeps (torch.autocast's weight-cast cache; FSDP2 gathers bf16 instead,
    counted with its gathered layers). DDP's reducer adds its flat gradient buckets, a second
    copy of the gradients (DistributedDataParallel with gradient_as_bucket_view=False, the
    default): counted here as `ddp_buckets` only when dp > 1 (`state_terms_for`).

    deepspeed, fp32 (no bf16 block): ZeRO-0 is the client AdamW on fp32 weights (16 B);
    ZeRO-1/2 (DeepSpeedZeroOptimizer) clone the fp32 partition as their master copy
    (`single_partition_of_fp32_groups`), so 4 + 4 + (4 + 8)/Nd at stage 1 (gradients whole
    until the boundary) and 4 + (4 + 4 + 8)/Nd at stage 2; ZeRO-3 likewise (4 + 4 + 4 + 8)/Nd.
    deepspeed, bf16-mixed (DeepSpeed's bf16 block): bf16 weights and gradients, fp32 master,
    exp_avg, exp_avg_sq, and an fp32 gradient: ZeRO-0 (DDP_BFLOAT16 wrapper) 2 + 2 + 12 = 16 B
    during forward/backward and the fp32 gradients (4 B) made inside the step; ZeRO-1 runs
    DeepSpeed's BF16_Optimizer with fp32 gradient accumulation (distbench's
    grad_accum_dtype=fp32): a whole fp32 gradient buffer, master and states / Nd; ZeRO-2/3:
    2 (stage 3: /Nd) + (2 + 4 + 4 + 8)/Nd, DeepSpeed's own count
    (`estimate_zero2_model_states_mem_needs`: "2 = params_16bit, 18 = 2_grads_16bit +
    4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit"), the fp32 gradient partition
    made at the step (ZeRO-3: for the optimizer sub-group, `sub_group_size`)."""
    w = DTYPE_BYTES[dtype]
    mixed = is_mixed(dtype, precision)
    if engine == "torch":
        if mixed:
            return [
                StateTerm("params_fp32", "params", 4, 3),
                StateTerm("autocast_weight_copies_bf16", "params", w, 3),
                StateTerm("grads_fp32", "grads", 4, 3),
                StateTerm("adam_exp_avg_fp32", "optimizer", 4, 3),
                StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 3),
            ]
        return [
            StateTerm(f"params_{dtype}", "params", w, 3),
            StateTerm(f"grads_{dtype}", "grads", w, 3),
            StateTerm(f"adam_exp_avg_{dtype}", "optimizer", w, 3),
            StateTerm(f"adam_exp_avg_sq_{dtype}", "optimizer", w, 3),
        ]
    if engine != "deepspeed":
        raise ValueError(f"engine={engine!r}; choose torch or deepspeed")
    if not mixed:  # fp32
        terms = [
            StateTerm("params_fp32", "params", 4, 3),
            StateTerm("grads_fp32", "grads", 4, 2),
            StateTerm("adam_exp_avg_fp32", "optimizer", 4, 1),
            StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 1),
        ]
        if zero_stage >= 1:
            terms.append(StateTerm("master_params_fp32", "optimizer", 4, 1))
        return terms
    terms = [
        StateTerm(f"params_{dtype}", "params", w, 3),
        StateTerm(f"grads_{dtype}", "grads", w, 2),
        StateTerm("master_params_fp32", "optimizer", 4, 1),
        StateTerm("adam_exp_avg_fp32", "optimizer", 4, 1),
        StateTerm("adam_exp_avg_sq_fp32", "optimizer", 4, 1),
    ]
    if zero_stage == 0:
        terms.append(StateTerm("grads_fp32_at_step", "grads", 4, NEVER, step_only=True))
    elif zero_stage == 1:
        terms.append(StateTerm("grads_fp32_accumulation", "grads", 4, NEVER))
    else:
        terms.append(StateTerm("grads_fp32_partition_at_step", "grads", 4, 1, step_only=True))
    return terms


def state_term_bytes(
    terms: list[StateTerm], num_params: float, dp: int, zero_stage: int
) -> dict[str, float]:
    """Bytes per device of each term: bytes_per_param × Ψ, divided by dp from its stage on."""
    return {
        t.name: t.bytes_per_param * num_params / (dp if zero_stage >= t.sharded_from else 1)
        for t in terms
    }


def deepspeed_buffer_bytes(
    zero_block: dict[str, Any],
    zero_stage: int,
    shard_params: float,
    *,
    param_bytes: int,
    grad_bytes: int,
    comm_fp32: bool,
    dp: int,
    largest_matrix: float,
) -> dict[str, float]:
    """DeepSpeed's communication buffers and ZeRO-3's gathered parameters, from the run's own
    zero_optimization block (DeepSpeed's defaults where a key is absent:
    reduce_bucket_size / allgather_bucket_size 5e8, stage3_prefetch_bucket_size 5e7,
    stage3_max_live_parameters 1e9; DeepSpeed docs, "ZeRO optimizations").

    - reduce bucket (ZeRO-0..3): gradients are flattened into buckets of reduce_bucket_size
      elements before each reduction, in communication_data_type (fp32 here under bf16), so
      an fp32 copy of the bucket joins the bf16 one;
    - all-gather bucket (ZeRO-1/2): the updated partitions are gathered allgather_bucket_size
      elements at a time, in the parameters' dtype;
    - ZeRO-3: the live gathered parameters (stage3_max_live_parameters caps them; within
      stage3_max_reuse_distance a gathered weight is kept for its reuse in backward, so a small
      model stays gathered whole) plus the prefetch bucket, and the largest single weight with
      its gradient before the reduce-scatter (DeepSpeed's estimator counts 4 B × the largest
      layer: bf16 weight + bf16 gradient).
    A bucket never exceeds the parameters it holds."""
    shard = max(shard_params, 1.0)
    if dp == 1 and zero_stage < 3:
        return {}
    reduce = min(float(zero_block.get("reduce_bucket_size", 5e8)), shard)
    out = {"reduce_bucket": reduce * (grad_bytes + (4 if comm_fp32 and grad_bytes != 4 else 0))}
    if zero_stage in (1, 2):
        gather = min(float(zero_block.get("allgather_bucket_size", 5e8)), shard)
        out["allgather_bucket"] = gather * param_bytes
    if zero_stage == 3:
        live = min(float(zero_block.get("stage3_max_live_parameters", 1e9)), shard)
        prefetch = min(float(zero_block.get("stage3_prefetch_bucket_size", 5e7)), shard)
        out["zero3_live_params"] = max(live, largest_matrix) * param_bytes
        out["zero3_prefetch_bucket"] = prefetch * param_bytes
        out["zero3_largest_weight_grad"] = largest_matrix * grad_bytes
    return out


def fsdp_buffer_bytes(
    split: ParamSplit, tp: int, *, compute_bytes: int, reduce_bytes: int
) -> dict[str, float]:
    """FSDP2's unsharded working set (torch.distributed.fsdp.fully_shard per decoder layer,
    then the root): the root's parameters (embedding, final norm, LM head) stay gathered from
    forward to backward (FSDP2 does not reshard the root after forward), plus the current and
    the prefetched decoder layer, in the compute dtype (MixedPrecisionPolicy.param_dtype), and
    the unsharded gradients of the largest group before its reduce-scatter (reduce_dtype)."""
    root = (split.input_embedding + split.output_head) / tp
    layer = split.per_layer / tp
    return {
        "fsdp_gathered_params": compute_bytes * (root + 2 * layer),
        "fsdp_unsharded_grads": reduce_bytes * max(root, layer),
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
    attention_scores_stored=False. fp32 training (dtype_bytes=4) doubles every term. The
    textbook figure (GPT-3's layer); what HF's models save is `hf_activation_bytes_per_layer`."""
    s, b, h, a, t = seq_len, micro_batch_size, hidden_size, num_heads, tp
    scale = dtype_bytes / 2
    if recompute:
        return 2.0 * s * b * h * scale
    scores = 5.0 * a * s / (h * t) if attention_scores_stored else 0.0
    return s * b * h * (10.0 + 24.0 / t + scores) * scale


# Elements per token per layer that HF's decoder layers save for backward, outside the
# attention scores, as (× hidden_size, × intermediate_size) and the part of the hidden-size
# term TP does not split (the two norms' inputs and outputs). Counted from the saved tensors
# (torch.autograd.graph.saved_tensors_hooks) of transformers' LlamaDecoderLayer and GPT2Block
# in training mode without dropout, the way distbench builds them; Korthikanti's 34 bytes per
# s·b·h (17 elements) assume GPT-3's layer. tests/unit/test_analytic_references.py measures
# the real models and holds this within 10 %.
HF_SAVED_ELEMENTS = {"llama": (9.0, 4.0, 4.0), "gpt2": (7.0, 5.0, 4.0)}


def hf_activation_bytes_per_layer(
    family: str,
    seq_len: int,
    micro_batch_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_heads: int,
    *,
    tp: int = 1,
    dtype_bytes: int = 2,
    attention_scores_stored: bool = False,
    recompute: bool = False,
) -> float:
    """Bytes one HF decoder layer saves for backward per micro-batch:

        dtype · s·b · (c_h·h + c_i·i)  (HF_SAVED_ELEMENTS; TP splits all but the norms)
        + s·b·a·s · (dtype + 1) / t    with eager attention: the softmax output and the
                                       (p = 0) dropout's 1-byte mask
    SDPA's fused kernels keep only q, k, v, the output and the log-sum-exp: no s² term
    (Dao et al. 2022, FlashAttention). Full recomputation keeps the layer input, 2·s·b·h
    bytes in 16 bits (Korthikanti et al. 2022)."""
    s, b = seq_len, micro_batch_size
    if recompute:
        return float(dtype_bytes * s * b * hidden_size)
    c_h, c_i, replicated = HF_SAVED_ELEMENTS[family]
    elements = (
        replicated * hidden_size + ((c_h - replicated) * hidden_size + c_i * intermediate_size) / tp
    )
    scores = num_heads * s * (dtype_bytes + 1) / tp if attention_scores_stored else 0.0
    return s * b * (dtype_bytes * elements + scores)


def logits_bytes(seq_len: int, micro_batch_size: int, vocab_size: int, tp: int = 1) -> float:
    """The cross-entropy's fp32 logits: 4·s·b·v/t bytes (Korthikanti et al. 2022, section
    4.3). A lower bound: see `loss_logits_bytes` for what the loss really holds."""
    return 4.0 * seq_len * micro_batch_size * vocab_size / tp


# Bytes per logit at the loss's peak, in any model dtype: three fp32 tensors (loss_logits_bytes).
LOSS_PEAK_BYTES_PER_LOGIT = 3.0 * DTYPE_BYTES["fp32"]


def loss_logits_bytes(seq_len: int, micro_batch_size: int, vocab_size: int, tp: int = 1) -> float:
    """The logits at the loss's peak, in log-softmax's backward (at the start of every
    backward, right after nll_loss's): HF's ForCausalLMLoss upcasts the logits to fp32,
    cross_entropy saves its fp32 log-softmax (4 B each), nll_loss's backward hands it a dense
    fp32 gradient (4 B) and log-softmax's backward writes another (4 B): s·b·v·12/t, whatever
    the model's dtype (its 16-bit logits and their gradient come before and after, with fewer
    fp32 tensors alive).
    tests/unit/test_analytic_references.py measures it with the profiler's memory timeline.
    DeepSpeed AutoTP keeps the LM head whole (t = 1 then)."""
    return seq_len * micro_batch_size * vocab_size * LOSS_PEAK_BYTES_PER_LOGIT / tp


def pipeline_logits_held_bytes(
    seq_len: int,
    micro_batch_size: int,
    vocab_size: int,
    num_micro_batches: int,
    *,
    dtype_bytes: int,
    all_forwards_first: bool,
) -> float:
    """What torch.distributed.pipelining's last stage holds of the logits beyond one
    micro-batch's loss (`loss_logits_bytes`): the schedule keeps every micro-batch's stage
    output, its logits in the model's dtype, until the step merges them (m·dtype); GPipe runs
    every forward before the first backward, so the other micro-batches' saved fp32
    log-softmax (4 B each) wait too: s·b·v·(m·dtype + (m−1)·4). Measured on this CPU
    (gpt2_124m cut to 2 layers, untied, pp 2, 4 micro-batches of 4 × 512, fp32): GPipe's last
    stage held 27.8 B per logit more than one loss's 12, this formula 28."""
    m = num_micro_batches
    per_logit = m * dtype_bytes + ((m - 1) * DTYPE_BYTES["fp32"] if all_forwards_first else 0)
    return seq_len * micro_batch_size * vocab_size * per_logit


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


def params_per_model_shard(
    split: ParamSplit, tp: int, pp: int, *, outside_layers_whole: bool = False
) -> float:
    """Parameters one device holds before ZeRO: the heaviest pipeline stage, divided by tp
    (Megatron's vocab-parallel embedding); with outside_layers_whole (torch_tp replicates the
    embedding, final norm and LM head) only the decoder layers are divided."""
    layers = split.num_layers / pp * split.per_layer
    if pp == 1:
        outside = split.total - split.num_layers * split.per_layer
    else:
        outside = max(split.input_embedding, split.output_head)
    return layers / tp + outside / (1 if outside_layers_whole else tp)


@dataclass(frozen=True)
class Memory:
    """Predicted bytes per device, by term. The peak is the resident terms (params, grads,
    optimizer, buffers, runtime) plus the larger of the forward/backward peak (activations)
    and the optimizer step's temporaries (step_temp): they do not coexist. `host` is what
    offload keeps in host memory per device; `terms` names every byte."""

    params: float
    grads: float
    optimizer: float
    activations: float
    host: float = 0.0
    buffers: float = 0.0
    step_temp: float = 0.0
    runtime: float = 0.0
    terms: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        resident = self.params + self.grads + self.optimizer + self.buffers + self.runtime
        return resident + max(self.activations, self.step_temp)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in asdict(self).items() if k != "terms"}
        return {**out, "total": self.total}


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
    engine: str = "deepspeed",
    precision: str = "mixed",
    family: str = "llama",
    intermediate_size: int | None = None,
    data_parallel: str | None = None,
    zero_block: dict[str, Any] | None = None,
    runtime_bytes: float = 0.0,
    tied_embeddings: bool = False,
    pp_schedule: str | None = None,
) -> Memory:
    """Every byte one device holds at its peak, by term (see `Memory`).

    Model states: `engine_state_terms` on this device's model shard (the heaviest pipeline
    stage / tp). Buffers: DeepSpeed's buckets and ZeRO-3's gathered weights from the run's
    zero_optimization block, DDP's gradient buckets, FSDP2's gathered layers. Offload
    (ZeRO-Offload, Ren et al. 2021): the optimizer states, the fp32 gradient partition (and
    with offload_param the parameter shard) move to `host`, unless the device is the host.
    Activations: HF's saved tensors per layer (`hf_activation_bytes_per_layer`) for one
    micro-batch, times the micro-batches a pipeline stage holds (1F1B: min(pp, m); torch_pp's
    GPipe, its default `pp_schedule`: all m), plus the loss's logits (under torch_pp, those its
    last stage keeps: `pipeline_logits_held_bytes`)."""
    inter = intermediate_size or 4 * hidden_size
    stage = layout.zero_stage or 0
    shard = params_per_model_shard(
        split, layout.tp, layout.pp, outside_layers_whole=engine == "torch"
    )
    terms_spec = engine_state_terms(engine, dtype, precision, stage)
    if data_parallel == "fsdp":  # FSDP2 casts by its MixedPrecisionPolicy, no autocast copies
        terms_spec = [t for t in terms_spec if not t.name.startswith("autocast")]
    by_term = state_term_bytes(terms_spec, shard, layout.dp, stage)
    mixed = is_mixed(dtype, precision)
    w = DTYPE_BYTES[dtype]
    weight_bytes = 4 if (mixed and engine == "torch") else w
    sums = {"params": 0.0, "grads": 0.0, "optimizer": 0.0}
    step_temp, host = 0.0, 0.0
    offloaded_kinds = {"optimizer"} | ({"params"} if offload_param else set())
    for term in terms_spec:
        value = by_term[term.name]
        if (
            offload_optimizer
            and not device_is_host
            and (term.kind in offloaded_kinds or term.name.startswith("grads_fp32"))
        ):
            host += value
            by_term[term.name] = 0.0
            continue
        if term.step_only:
            step_temp += value
        else:
            sums[term.kind] += value
    buffers: dict[str, float] = {}
    if engine == "deepspeed":
        buffers = deepspeed_buffer_bytes(
            zero_block or {},
            stage,
            shard,
            param_bytes=w,
            grad_bytes=w,
            comm_fp32=mixed,
            dp=layout.dp,
            largest_matrix=split.largest_matrix / layout.tp,
        )
    elif data_parallel == "fsdp" and layout.dp > 1:
        buffers = fsdp_buffer_bytes(
            split, layout.tp, compute_bytes=w, reduce_bytes=4 if mixed else w
        )
    elif layout.dp > 1:  # DDP's reducer buckets: a second copy of the gradients
        buffers = {"ddp_buckets": weight_bytes * shard}
    per_layer = hf_activation_bytes_per_layer(
        family,
        seq_len,
        micro_batch_size,
        hidden_size,
        inter,
        num_heads,
        tp=layout.tp,
        dtype_bytes=w,
        attention_scores_stored=attention_scores_stored,
        recompute=recompute,
    )
    torch_pipeline = engine == "torch" and layout.pp > 1
    torch_gpipe = torch_pipeline and (pp_schedule or DEFAULT_PP_SCHEDULE) == "gpipe"
    in_flight = grad_accum_steps if torch_gpipe else min(layout.pp, grad_accum_steps)
    layer_acts = per_layer * split.num_layers / layout.pp * in_flight
    # Both engines keep the LM head whole under TP (torch_tp replicates it, AutoTP too).
    logits = loss_logits_bytes(seq_len, micro_batch_size, vocab_size)
    if torch_pipeline:
        logits += pipeline_logits_held_bytes(
            seq_len,
            micro_batch_size,
            vocab_size,
            grad_accum_steps,
            dtype_bytes=w,
            all_forwards_first=torch_gpipe,
        )
    # Backward materialises a weight's gradient before accumulating it into .grad; a tied
    # embedding gets two (from the LM head and from the lookup) at once.
    transient = w * split.largest_matrix / layout.tp * (2 if tied_embeddings else 1)
    terms = {
        **{k: v for k, v in by_term.items() if v},
        **buffers,
        "activations_layers": layer_acts,
        "activations_logits": logits,
        "backward_grad_transient": transient,
        "runtime": runtime_bytes,
    }
    return Memory(
        activations=layer_acts + logits + transient,
        host=host,
        buffers=sum(buffers.values()),
        step_temp=step_temp,
        runtime=runtime_bytes,
        terms=terms,
        **sums,
    )


def deepspeed_host_bytes_per_node(
    num_params: float,
    ranks_per_node: int,
    num_nodes: int,
    *,
    zero_stage: int,
    offload_param: bool,
    buffer_factor: float = 1.5,
) -> float:
    """Host RAM per node an offload run needs, DeepSpeed's own figure
    (`estimate_zero2_model_states_mem_needs(cpu_offload=True)`: Ψ·max(4·N, 16)·1.5;
    `estimate_zero3_model_states_mem_needs(cpu_offload=True, zero_init=True)`: 18Ψ/nodes·1.5
    with the parameters offloaded, 16Ψ/nodes·1.5 without), 1.5 = additional_buffer_factor."""
    total_devices = ranks_per_node * num_nodes
    if zero_stage == 3:
        return num_params * (18 if offload_param else 16) / num_nodes * buffer_factor
    return num_params * max(4 * total_devices, 16) * buffer_factor


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


def default_efficiency(device: str) -> float:
    """The assumed fraction of the peak a step reaches when nothing measured says otherwise."""
    return DEFAULT_EFFICIENCY.get(device, 0.4)


def default_latency_s(device: str) -> float:
    """The assumed latency of one collective (s) when neither a flag nor a fit gives one."""
    return DEFAULT_LATENCY_S.get(device, 10e-6)


def pipeline_bubble_fraction(pp: int, num_micro_batches: int) -> float:
    """Idle fraction of a GPipe/1F1B pipeline step: (p−1)/(m+p−1) (Huang et al. 2019 GPipe;
    Narayanan et al. 2021, Megatron-LM 3D, section 2.2)."""
    return (pp - 1) / (num_micro_batches + pp - 1)


def comm_time_s(
    num_bytes: float, bandwidth_gbps: float, num_collectives: float = 0, latency_s: float = 0.0
) -> float:
    """α-β model (Hockney 1994): num_collectives·α + bytes / β, β in GB/s (1e9 bytes/s)."""
    return num_collectives * latency_s + num_bytes / (bandwidth_gbps * GB)


# DDP's default bucket (torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25): the last
# one is reduced after backward ends, so at least its time is exposed.
DDP_BUCKET_BYTES = 25 * 1024**2
# Backward is 2/3 of a step's FLOPs (6N: 2N forward, 4N backward).
BACKWARD_FRACTION = 2 / 3


def hidden_comm_s(
    engine: str,
    data_parallel: str | None,
    device: str,
    compute_s: float,
    dp_comm_s: float,
    grad_bytes: float,
    num_layers: float,
    grad_accum_steps: int,
) -> float:
    """Seconds of the data-parallel communication that run under compute, on GPUs, for the
    torch engine. DDP launches each gradient bucket's all-reduce as backward fills it (Li et
    al. 2020, "PyTorch Distributed", VLDB), in the last micro-batch only (the engine runs the
    others under no_sync): all but the last bucket (of `grad_bytes`, the gradients reduced)
    can hide under that micro-batch's backward. FSDP2 prefetches the next layer's all-gather
    and reduce-scatters the last one's gradients while a layer computes, every micro-batch
    (torchtitan's defaults): all but about one layer's traffic can hide under forward and
    backward. DeepSpeed here runs with overlap_comm false (conf/ds_zero), and a CPU rank has
    one core for its compute and its gloo traffic: 0."""
    if device != "cuda" or engine != "torch" or dp_comm_s <= 0:
        return 0.0
    if data_parallel == "ddp":
        last_bucket_s = dp_comm_s * min(1.0, DDP_BUCKET_BYTES / max(grad_bytes, 1.0))
        last_backward_s = BACKWARD_FRACTION * compute_s / max(grad_accum_steps, 1)
        return max(0.0, min(dp_comm_s - last_bucket_s, last_backward_s))
    if data_parallel == "fsdp":
        one_layer_s = dp_comm_s / max(num_layers, 1.0)
        return max(0.0, min(dp_comm_s - one_layer_s, compute_s))
    return 0.0


def optimizer_step_s(
    num_params: float, state_bytes: int, bf16_copy: bool, mem_bandwidth_gbps: float | None
) -> float:
    """AdamW's step over the parameters a device updates, memory-bound: it reads the parameter,
    its gradient and both moments and writes the parameter and both moments (7 values of
    `state_bytes`; the fused and foreach kernels touch each once), plus the bf16 copy that
    DeepSpeed's mixed recipe writes back (`bf16_copy`; the torch engine's mixed recipes keep
    fp32 parameters). 0 without a device bandwidth (CPU: inside the measured efficiency)."""
    if not mem_bandwidth_gbps:
        return 0.0
    bytes_per_param = 7 * state_bytes + (2 if bf16_copy else 0)
    return num_params * bytes_per_param / (mem_bandwidth_gbps * GB)


def measured_parts_s(hardware: Any) -> tuple[float, float] | None:
    """(device seconds, host seconds) of one micro-batch from hardware.time_source=measured's
    parts, or None when the compute term is the efficiency model's. Attention is 0 in records
    made before it was timed apart (then inside the other kernels)."""
    if hardware.time_source != "measured" or hardware.micro_batch_gemm_s is None:
        return None
    device_s = (
        hardware.micro_batch_gemm_s
        + (hardware.micro_batch_attention_s or 0.0)
        + hardware.micro_batch_other_s
    )
    return device_s, hardware.micro_batch_host_s


def measured_compute_s(
    device: str,
    device_s: float,
    host_s: float,
    tp: int,
    pp: int,
    grad_accum_steps: int,
    engine_host_s: float = 0.0,
) -> float:
    """Forward + backward of a step from one micro-batch's measured parts
    (compose/step_parts.py): its kernels' time on the device, split over tp·pp (a tp
    rank runs 1/tp of each layer's work, a pp stage 1/pp of the layers), and its host time, split
    over pp only (a tp rank launches every kernel of its layers, smaller). On a GPU the host
    queues kernels while the device runs them: a micro-batch takes the longer of the two
    (Williams et al. 2009's roofline bound, with the launch path as one more ceiling). On a CPU
    both run on the rank's one core: they add up. `engine_host_s` (ZeRO-3's fetch / release
    hooks, compose/engine_probe.py) is added on both: DeepSpeed's parameter coordinator waits
    for the device once two fetch events are outstanding (partitioned_param_coordinator.py,
    __max_ongoing_fetch_events), so the host runs at most two fetches ahead of the kernels,
    not a whole micro-batch."""
    kernels_s = device_s / (tp * pp)
    launch_s = host_s / pp
    per_micro_batch = max(kernels_s, launch_s) if device == "cuda" else kernels_s + launch_s
    return grad_accum_steps * (per_micro_batch + engine_host_s)


def engine_step_host_s(engine_step_s: float | None, optimizer_kernels_s: float) -> float:
    """What an engine's optimizer step takes beyond its kernels: the probe's measured step of
    the whole model on one rank (compose/engine_probe.py) less the memory-bound AdamW kernels
    of the same parameters (optimizer_step_s). Taken as per-parameter bookkeeping, which does
    not shrink with the shard (an assumption: measured at world size 1 only; the step's other
    kernels, such as the gradient norm, are inside it); 0 without a probe."""
    if engine_step_s is None:
        return 0.0
    return max(engine_step_s - optimizer_kernels_s, 0.0)


def group_spans_nodes(group: str, layout: Layout, ranks_per_node: int) -> bool:
    """Whether a dp, tp or pp group crosses a node boundary. Ranks are
    arange(world).view(dp, pp, tp), tp fastest (engines/__init__.py): a tp group is tp
    consecutive ranks, a pp group spans tp·pp ranks, a dp group the whole world; nodes hold
    ranks_per_node consecutive ranks."""
    size = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp}[group]
    span = {"dp": layout.world_size, "tp": layout.tp, "pp": layout.tp * layout.pp}[group]
    return size > 1 and span > ranks_per_node


def hardware_internode_gbytes_per_s(hardware: Any) -> float | None:
    """The inter-node link per device in GB/s (hardware.internode_gbytes_per_s), None if the
    catalog entry has none. A ring whose group crosses nodes runs at its slowest link, this
    one (Patarasuk & Yuan 2009: ring time is bounded by the slowest hop)."""
    value = getattr(hardware, "internode_gbytes_per_s", None)
    return None if value is None else float(value)


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
        return self.mem_needed_bytes <= self.device_mem_bytes

    @property
    def mem_needed_bytes(self) -> float:
        """The predicted peak plus, on a GPU, what CUDA max allocated does not show."""
        if self.mem.runtime or self.device_mem_bytes is None:
            return self.mem.total
        return self.mem.total * (1 + ALLOCATOR_FRAGMENTATION) + CUDA_CONTEXT_GIB * GIB

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


def job_precision(job: Job) -> str:
    """The job's recipe, `mixed` or `pure` (workload.precision; `mixed` when the workload has
    none, the README's default)."""
    return getattr(job.workload, "precision", None) or "mixed"


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

    step time = compute + pipeline bubble + exposed communication + optimizer + offload, where
      compute  = model FLOPs per token (metrics.train_flops_per_token: 6N + 12·L·h·s) × this
                 device's tokens / (peak TFLOP/s of the dtype × efficiency); with
                 hardware.time_source=measured, the micro-batch's measured parts instead
                 (measured_compute_s), and the measured memory bandwidth for the optimizer;
                 for ZeRO-3 its engine's host work per micro-batch and per step, probed
                 (compose/engine_probe.py)
      bubble   = compute × (p−1)/m, i.e. (p−1)/(m+p−1) of the pipelined time
      comm     = α-β time of every byte, less what runs under compute (hidden_comm_s: the
                 torch engine's data-parallel traffic on GPUs; DeepSpeed's overlap_comm is
                 false in conf/ds_zero); assumptions["comm_hidden_s"] holds the hidden part
      optimizer= AdamW's memory-bound step over this device's shard (optimizer_step_s)
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
    precision = job_precision(job)
    mixed = is_mixed(dtype, precision)
    # Bytes of the gradients reduced and the parameters gathered: fp32 gradient reduction
    # under bf16-mixed on both engines (communication_data_type / reduce_dtype).
    state = StateBytes(
        param=DTYPE_BYTES[dtype] if not (mixed and job.engine == "torch") else 4,
        grad=4 if mixed or dtype == "fp32" else DTYPE_BYTES[dtype],
        optimizer=0,
    )
    if mixed and job.engine == "torch" and strategy.data_parallel == "fsdp":
        state = StateBytes(param=DTYPE_BYTES[dtype], grad=4, optimizer=0)  # gathers bf16
    act_bytes = DTYPE_BYTES[dtype]
    offload_optimizer = strategy.offload_optimizer != "none"
    offload_param = strategy.offload_param != "none"
    runtime_gib = 0.0
    if device_is_host:
        runtime_gib = CPU_RUNTIME_GIB.get(job.engine, 0.0)
        if layout.world_size > 1:
            runtime_gib += CPU_COMM_RUNTIME_GIB.get(job.engine, 0.0)
    eager = model.attn_implementation == "eager"

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
        attention_scores_stored=eager,
        engine=job.engine,
        precision=precision,
        family=model.family,
        intermediate_size=model.intermediate_size,
        data_parallel=strategy.data_parallel,
        zero_block=job.zero_optimization,
        runtime_bytes=runtime_gib * GIB,
        tied_embeddings=model.tie_word_embeddings,
        pp_schedule=strategy.pp_schedule,
    )
    mem_gib = hardware.mem_gib
    device_mem_bytes = None if mem_gib is None else float(mem_gib) * GIB
    ranks_per_node = job.topology.ranks_per_node
    host_per_node = 0.0
    if offload_optimizer and not device_is_host:
        host_per_node = deepspeed_host_bytes_per_node(
            split.total,
            ranks_per_node,
            job.topology.num_nodes,
            zero_stage=layout.zero_stage,
            offload_param=offload_param,
        )

    shard = params_per_model_shard(
        split, layout.tp, layout.pp, outside_layers_whole=job.engine == "torch"
    )
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
    collectives = {"dp": float(buckets * reductions)}
    if layout.zero_stage == 3 and layout.dp > 1:
        gathered = MATRICES_PER_LAYER[model.family] * layers_local + 2  # + embedding, LM head
        collectives["dp"] += 2 * m * gathered
    collectives["tp"] = 4 * layers_local * m * (layout.tp > 1)
    collectives["pp"] = 2.0 * m * (layout.pp > 1)

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
    eff = efficiency if efficiency is not None else default_efficiency(device)
    measured = hardware.link_source == "measured"  # the store's collectives fit, if any
    bw = (
        bandwidth_gbps
        or (measured and hardware.measured_interconnect_gbps)
        or hardware.interconnect_gbps
        or DEFAULT_CPU_INTERCONNECT_GBPS
    )
    internode = (
        measured and hardware.measured_internode_gbytes_per_s
    ) or hardware_internode_gbytes_per_s(hardware)
    alpha = latency_s
    if alpha is None:
        measured_us = hardware.link_latency_us if measured else None
        alpha = measured_us * 1e-6 if measured_us is not None else default_latency_s(device)
    spans = {g: group_spans_nodes(g, layout, ranks_per_node) for g in ("dp", "tp", "pp")}
    link = {g: float(internode if spans[g] and internode else bw) for g in spans}
    assumptions = {
        "efficiency": eff,
        "bandwidth_gbps": float(bw),
        "internode_gbytes_per_s": internode,
        "ranks_per_node": ranks_per_node,
        "num_nodes": job.topology.num_nodes,
        "link_gbytes_per_s": link,
        "latency_s": alpha,
        "recompute": recompute,
        "precision": precision_tag(dtype, precision),
        "host_mem_bytes_per_node": host_per_node,
    }

    peak = getattr(hardware, f"peak_tflops_{dtype}")
    parts = measured_parts_s(hardware)
    assumptions["time_source"] = "efficiency" if parts is None else "measured"
    mem_bandwidth = hardware.mem_bandwidth_gbps
    time_s: dict[str, float] = {}
    step = tokens_s = cost = None
    if peak or parts:
        if parts:
            engine_host = hardware.micro_batch_engine_host_s or 0.0
            compute = measured_compute_s(device, *parts, layout.tp, layout.pp, m, engine_host)
            mem_bandwidth = hardware.measured_mem_bandwidth_gbps or mem_bandwidth
        else:
            device_flops = flops * b * m * s / (layout.tp * layout.pp)
            compute = device_flops / (float(peak) * 1e12 * eff)
        comm_s = {g: comm_time_s(comm[g], link[g], collectives[g], alpha) for g in comm}
        hidden = hidden_comm_s(
            job.engine,
            strategy.data_parallel,
            device,
            compute,
            comm_s["dp"],
            shard * state.grad,
            layers_local,
            m,
        )
        assumptions["comm_hidden_s"] = hidden
        # Pure bf16 keeps its AdamW states in bf16; fp32 and the mixed recipes in fp32.
        state_value_bytes = 4 if mixed or dtype == "fp32" else DTYPE_BYTES[dtype]
        optimizer_params = shard if layout.zero_stage == 0 else shard_dp  # ZeRO-1+, FSDP: a shard
        bf16_copy = mixed and job.engine == "deepspeed"
        # ZeRO-3's step beyond its kernels (its probe timed the whole model on one rank)
        step_host = engine_step_host_s(
            hardware.engine_step_s if parts else None,
            optimizer_step_s(split.total, state_value_bytes, bf16_copy, mem_bandwidth),
        )
        time_s = {
            "compute": compute,
            "bubble": compute * (layout.pp - 1) / m,
            "comm": sum(comm_s.values()) - hidden,  # exposed
            "optimizer": 0.0
            if offload_optimizer and not device_is_host  # the host's Adam: in offload
            else optimizer_step_s(optimizer_params, state_value_bytes, bf16_copy, mem_bandwidth)
            + step_host,
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

    On GPU the measured peak is CUDA max allocated: model states, buffers and activations, as
    predicted. On CPU it is the process's peak RSS, which also holds the Python/torch/DeepSpeed
    runtime, a term of the CPU prediction (`Memory.runtime`, CPU_RUNTIME_GIB). An offload run
    also logs `pred_host_mem_gib`, the host RAM per node DeepSpeed's estimator asks for."""
    pred = predict(job)
    out = {
        "pred_peak_mem_gib": pred.mem.total / GIB,
        "pred_comm_bytes_per_step": pred.comm_bytes_per_step,
    }
    host = pred.assumptions.get("host_mem_bytes_per_node") or 0.0
    if host:
        out["pred_host_mem_gib"] = host / GIB
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
