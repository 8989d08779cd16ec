"""Activation bytes a device keeps for backward: per transformer layer (Korthikanti et al.'s
textbook figure and what HF's decoder layers really save), the loss's logits, and what a
pipeline's last stage holds of them.

    python -c "from distbench.figures.activations import *; print(loss_logits_bytes(1024, 4, 8))"

Bytes per micro-batch unless named otherwise; pure functions. `activation_terms` assembles
them into one device's forward/backward peak terms (figures/memory.py adds the rest).
tests/unit/test_analytic_references.py measures the real HF models' saved tensors and the
loss's peak against these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distbench.compose.schema import DEFAULT_PP_SCHEDULE
from distbench.figures.metrics import BYTES_PER_DTYPE

if TYPE_CHECKING:
    from distbench.figures.params import ParamSplit
    from distbench.job import Layout


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
# Norms per layer that upcast their input to fp32 and save that copy (LlamaRMSNorm's
# `hidden_states.to(torch.float32)`; GPT-2's LayerNorm runs in the input's dtype). Where the
# activations are 16-bit tensors (not under autocast, whose residual stream is fp32), each such
# norm keeps 4 bytes per element where HF_SAVED_ELEMENTS (counted in fp32) prices the dtype's:
# saved-tensor hooks on a Llama layer (h 256, i 688) count 5,354 fp32 element-equivalents per
# token and 5,876 in bf16, +2.04·h.
FP32_UPCAST_NORMS = {"llama": 2.0, "gpt2": 0.0}


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
    sequence_parallel: bool = False,
    norms_upcast: bool = False,
) -> float:
    """Bytes one HF decoder layer saves for backward per micro-batch:

        dtype · s·b · (c_h·h + c_i·i)  (HF_SAVED_ELEMENTS; TP splits all but the norms,
                                       sequence parallel the norms too)
        + s·b·a·s · (dtype + 1) / t    with eager attention: the softmax output and the
                                       (p = 0) dropout's 1-byte mask
    SDPA's fused kernels keep only q, k, v, the output and the log-sum-exp: no s² term
    (Dao et al. 2022, FlashAttention). Full recomputation keeps the layer input, 2·s·b·h
    bytes in 16 bits (Korthikanti et al. 2022), its sequence slice under sequence parallel.
    Sequence parallel (torch's SequenceParallel norms): the norms' tensors are saved for the
    rank's slice of the sequence; the all-gathered inputs of q/k/v and gate/up stay whole
    (2·s·b·h: DTensor saves the gathered tensor, Megatron gathers again in backward), which is
    what the norms' outputs cost without it (saved-tensor hooks on a tp=2 Llama layer:
    4·s·b·h of norm tensors become 4·s·b·h/t, the rest unchanged). norms_upcast: the
    activations are 16-bit tensors (no autocast), so the FP32_UPCAST_NORMS norms each keep an
    fp32 copy of their input: (4 − dtype)·h bytes more per token each."""
    s, b = seq_len, micro_batch_size
    if recompute:
        return layer_input_bytes(s, b, hidden_size, dtype_bytes, tp if sequence_parallel else 1)
    c_h, c_i, replicated = HF_SAVED_ELEMENTS[family]
    whole = replicated / (tp if sequence_parallel else 1)
    elements = (
        whole * hidden_size + ((c_h - replicated) * hidden_size + c_i * intermediate_size) / tp
    )
    scores = num_heads * s * (dtype_bytes + 1) / tp if attention_scores_stored else 0.0
    upcast = 0.0
    if norms_upcast and dtype_bytes < 4:
        norms = FP32_UPCAST_NORMS.get(family, 0.0) / (tp if sequence_parallel else 1)
        upcast = norms * (4 - dtype_bytes) * hidden_size
    return s * b * (dtype_bytes * elements + upcast + scores)


def logits_bytes(seq_len: int, micro_batch_size: int, vocab_size: float, tp: int = 1) -> float:
    """The cross-entropy's fp32 logits: 4·s·b·v/t bytes (Korthikanti et al. 2022, section
    4.3). A lower bound: see `loss_logits_bytes` for what the loss really holds."""
    return 4.0 * seq_len * micro_batch_size * vocab_size / tp


# Bytes per logit at the loss's peak, in any model dtype: three fp32 tensors (loss_logits_bytes).
LOSS_PEAK_BYTES_PER_LOGIT = 3.0 * BYTES_PER_DTYPE["fp32"]
# The same under torch's loss_parallel (logits split by vocabulary, per local logit): its
# log-softmax is decomposed into DTensor ops (the shifted logits and their exp, fp32 tensors
# each) where cross_entropy's kernel fuses them. The profiler's memory timeline of HF's
# causal-LM loss and its backward on a (2, 256, 8192) problem, the logits not held beyond it
# (as the engines drop the model's output): 16.1 B per local logit in fp32 and in bf16, on 1
# and on 2 gloo ranks (tests/unit/test_analytic_references.py).
LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT = 16.0


def loss_logits_bytes(
    seq_len: int,
    micro_batch_size: int,
    vocab_size: float,
    tp: int = 1,
    per_logit: float = LOSS_PEAK_BYTES_PER_LOGIT,
) -> float:
    """The logits at the loss's peak, in log-softmax's backward (at the start of every
    backward, right after nll_loss's): HF's ForCausalLMLoss upcasts the logits to fp32,
    cross_entropy saves its fp32 log-softmax (4 B each), nll_loss's backward hands it a dense
    fp32 gradient (4 B) and log-softmax's backward writes another (4 B): s·b·v·12/t, whatever
    the model's dtype (its 16-bit logits and their gradient come before and after, with fewer
    fp32 tensors alive).
    tests/unit/test_analytic_references.py measures it with the profiler's memory timeline.
    DeepSpeed AutoTP keeps the LM head whole (t = 1 then). Under loss_parallel, per_logit is
    LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT."""
    return seq_len * micro_batch_size * vocab_size * per_logit / tp


def pipeline_logits_held_bytes(
    seq_len: int,
    micro_batch_size: int,
    vocab_size: float,
    num_micro_batches: int,
    *,
    dtype_bytes: int,
    all_forwards_first: bool,
) -> float:
    """What torch.distributed.pipelining's last stage holds of the logits beyond one
    micro-batch's loss (`loss_logits_bytes`): the schedule keeps every micro-batch's stage
    output, its logits in the model's dtype, until the step merges them (m·dtype); GPipe runs
    every forward before the first backward, so the other micro-batches' saved fp32
    log-softmax (4 B each) wait too: s·b·v·(m·dtype + (m−1)·4).
    tests/distributed/test_torch_engine.py holds a real last stage's peak to it."""
    m = num_micro_batches
    per_logit = m * dtype_bytes + ((m - 1) * BYTES_PER_DTYPE["fp32"] if all_forwards_first else 0)
    return seq_len * micro_batch_size * vocab_size * per_logit


def layer_input_bytes(
    seq_len: int, micro_batch_size: int, hidden_size: int, dtype_bytes: int, seq_shards: int = 1
) -> float:
    """What a checkpointed decoder layer keeps: its input hidden states, s·b·h in the
    activations' dtype (not split by TP without sequence parallelism; its tp slice, seq_shards,
    with it)."""
    return float(dtype_bytes * seq_len * micro_batch_size * hidden_size) / seq_shards


def num_recomputed_layers(mode: str, every: int, num_layers: float) -> float:
    """How many of a device's `num_layers` decoder layers (a pipeline stage's share: may be
    fractional) recompute their forward in backward: none 0; full all; selective every
    `every`-th, ⌊num_layers / every⌋ (ranks/layers.py recomputed_layers picks which)."""
    if mode == "full":
        return float(num_layers)
    if mode == "selective":
        return float(int(num_layers // every))
    return 0.0


def checkpointed_layer_terms(
    per_layer_bytes: float,
    layer_input_bytes: float,
    num_layers: float,
    num_recomputed: float,
    in_flight: int,
    loss_peak_bytes: float,
) -> dict[str, float]:
    """The decoder layers' share of the forward/backward peak with `num_recomputed` of
    `num_layers` layers checkpointed (torch's non-reentrant checkpoint keeps a checkpointed
    layer's inputs and nothing inside it; Chen et al. 2016, Korthikanti et al. 2022 §5):

        activations_layers    = m·((L − r)·per_layer + r·input)   per micro-batch in flight m
        activations_recompute = max(0, per_layer − loss_peak)     when r > 0

    In backward one checkpointed layer at a time runs its forward again and holds what it saves
    (one layer's working set, `per_layer_bytes`), after the loss's backward has freed the
    logits' peak (`loss_peak_bytes`): the two come one after the other, so the recompute adds
    only what exceeds the loss's peak. Without checkpointing: the stored layers alone."""
    stored = (num_layers - num_recomputed) * per_layer_bytes
    terms = {"activations_layers": in_flight * (stored + num_recomputed * layer_input_bytes)}
    if num_recomputed > 0:
        terms["activations_recompute"] = max(0.0, per_layer_bytes - loss_peak_bytes)
    return terms


def recompute_flops_fraction(
    layer_forward_flops_per_token: float, num_recomputed: float, train_flops_per_token: float
) -> float:
    """The compute a step adds by recomputing: the recomputed layers' forward once more
    (`num_recomputed` × a layer's forward FLOPs per token) over the step's model FLOPs per
    token (6N + 12·L·h·s: forward + backward). Full recomputation of every layer adds about a
    third (one more forward: Korthikanti et al. 2022, §5: 33 %)."""
    if train_flops_per_token <= 0:
        return 0.0
    return num_recomputed * layer_forward_flops_per_token / train_flops_per_token


# --------------------------------------------------------------------------- a device's terms


def activation_terms(
    split: ParamSplit,
    layout: Layout,
    *,
    family: str,
    seq_len: int,
    micro_batch_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_heads: int,
    vocab_size: float,
    grad_accum_steps: int,
    dtype_bytes: int,
    attention_scores_stored: bool,
    recompute: bool,
    engine: str,
    pp_schedule: str | None,
    tied_embeddings: bool,
    checkpointing: str = "none",
    checkpointing_every: int = 2,
    sequence_parallel: bool = False,
    norms_upcast: bool = False,
    loss_parallel: bool = False,
) -> dict[str, float]:
    """The forward/backward peak's terms: activations_layers (one HF layer's saved tensors ×
    the stage's layers × the micro-batches it holds: 1F1B min(pp, m), torch_pp's GPipe all m;
    a checkpointed layer keeps its input only, activations_recompute one layer's working set);
    activations_logits (the loss's logits of `vocab_size`, this device's vocabulary: the whole
    one under DeepSpeed's AutoTP, which gathers them, its tp slice under the torch engine's
    vocab-parallel head; plus what torch_pp's last stage keeps); backward_grad_transient (a
    weight's gradient before it is accumulated into .grad; a tied embedding gets two at once)."""
    per_layer = hf_activation_bytes_per_layer(
        family,
        seq_len,
        micro_batch_size,
        hidden_size,
        intermediate_size,
        num_heads,
        tp=layout.tp,
        dtype_bytes=dtype_bytes,
        attention_scores_stored=attention_scores_stored,
        sequence_parallel=sequence_parallel,
        norms_upcast=norms_upcast,
    )
    seq_shards = layout.tp if sequence_parallel else 1
    layer_input = layer_input_bytes(seq_len, micro_batch_size, hidden_size, dtype_bytes, seq_shards)
    stage_layers = split.num_layers / layout.pp
    recomputed = num_recomputed_layers(
        "full" if recompute else checkpointing, checkpointing_every, stage_layers
    )
    m = grad_accum_steps
    torch_pipeline = engine == "torch" and layout.pp > 1
    torch_gpipe = torch_pipeline and (pp_schedule or DEFAULT_PP_SCHEDULE) == "gpipe"
    in_flight = m if torch_gpipe else min(layout.pp, m)
    logits = _logits_bytes(
        seq_len,
        micro_batch_size,
        vocab_size,
        m,
        dtype_bytes,
        torch_pipeline,
        torch_gpipe,
        loss_parallel,
    )
    transient = dtype_bytes * split.largest_matrix / layout.tp * (2 if tied_embeddings else 1)
    layers = checkpointed_layer_terms(
        per_layer, layer_input, stage_layers, recomputed, in_flight, loss_peak_bytes=logits
    )
    return {
        **layers,
        "activations_logits": logits,
        "backward_grad_transient": transient,
    }


def _logits_bytes(
    seq_len: int,
    micro_batch_size: int,
    vocab_size: float,
    num_micro_batches: int,
    dtype_bytes: int,
    torch_pipeline: bool,
    torch_gpipe: bool,
    loss_parallel: bool = False,
) -> float:
    """The loss's logits (under loss_parallel its decomposed log-softmax's peak), plus under
    torch_pp those its last stage keeps."""
    per_logit = LOSS_PARALLEL_PEAK_BYTES_PER_LOGIT if loss_parallel else LOSS_PEAK_BYTES_PER_LOGIT
    logits = loss_logits_bytes(seq_len, micro_batch_size, vocab_size, per_logit=per_logit)
    if torch_pipeline:
        logits += pipeline_logits_held_bytes(
            seq_len,
            micro_batch_size,
            vocab_size,
            num_micro_batches,
            dtype_bytes=dtype_bytes,
            all_forwards_first=torch_gpipe,
        )
    return logits
