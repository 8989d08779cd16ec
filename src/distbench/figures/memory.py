"""Predicted memory per device of a training layout, every byte named (`Memory.terms`).

    python -c "from distbench.figures.memory import *; print(CUDA_CONTEXT_GIB)"
    distbench plan model=llama3_8b world_size=8 hardware=h100_sxm    # prints each term

`memory_per_device` assembles the named parts, each with its source:
- model states (figures/model_states.py) on this device's model shard (figures/params.py:
  the heaviest pipeline stage / tp; DeepSpeed divides everything by tp, torch_tp replicates
  the embedding and head), placed by `place_model_states`: offload (ZeRO-Offload, Ren et al.
  2021) moves the optimizer states and the fp32 gradient partition (and with offload_param
  the parameter shard) to the host, unless the device *is* the host (CPU ranks);
- buffers (`engine_buffer_bytes`): DeepSpeed's buckets and ZeRO-3's gathered weights from the
  run's own zero_optimization block, DDP's gradient buckets, FSDP2's gathered layers;
- activations (`activation_terms`, figures/activations.py): HF's saved tensors per layer for
  one micro-batch, times the micro-batches a pipeline stage holds, plus the loss's logits and
  the backward's transient weight gradient;
- the peak is the resident terms + max(forward/backward activations, optimizer-step
  temporaries); on CPU + the process runtime and what glibc's heap keeps of a micro-batch's
  activations (figures/cpu_rss.py);
- when a term is alive: the torch engine frees its gradients after every step, so a step of
  one micro-batch reaches its activation peak without them (`Memory.grads_transient`);
  autocast's bf16 weight copies of a checkpointed layer die at the end of the forward, unless
  the forward's end is the higher peak (`autocast_copies_recomputed`);
- fitting (`fits_device`): on a GPU the peak must leave `gpu_headroom_bytes` free, the CUDA
  context and FITS_HEADROOM_FRACTION of the device (what CUDA max allocated does not show).
strategy=fsdp at world size 1 has nothing to shard: the torch engine runs it as one device
under autocast (no FSDP2), and it is predicted so (`device_state_terms`).
Activation checkpointing (`checkpointing`: none, full, selective every k-th layer; recompute=True
is full) keeps a checkpointed layer's input and one layer's working set
(activations.checkpointed_layer_terms). Not modelled: kernels' own workspaces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from distbench.figures.activations import activation_terms, num_recomputed_layers
from distbench.figures.alive import grads_freed_between_steps, when_alive
from distbench.figures.communication import zero_setting
from distbench.figures.cpu_rss import (
    activation_tensor_bytes,
    cpu_process_terms,
    heap_activation_bytes,
)
from distbench.figures.metrics import BYTES_PER_DTYPE, GIB
from distbench.figures.model_states import StateTerm, engine_state_terms, state_term_bytes
from distbench.figures.params import ParamSplit, params_per_model_shard
from distbench.precision import is_mixed

if TYPE_CHECKING:
    from distbench.job import Layout

# What CUDA max allocated does not show but a device must hold: the CUDA context and
# cuBLAS/NCCL workspaces (~0.5-1 GiB on an H100). Kept free when deciding whether a layout
# fits (`gpu_headroom_bytes`), not added to pred_peak_mem_gib.
CUDA_CONTEXT_GIB = 0.75
# The share of a GPU's memory (hardware.mem_gib) that a layout which "fits" leaves unused
# beyond the CUDA context: the caching allocator's reserved-but-unallocated blocks at the peak
# (cached or split for other sizes: a request fails although the free bytes add up), and the
# gap between the catalog's figure (nvidia-smi's total) and what torch can allocate. Measured:
# llama3_8b bf16-mixed on one H200 (catalog 140.4 GiB, torch's total capacity 139.8) ran out
# of memory with 134 GiB allocated, 6.4 GiB (4.6 % of 140.4) out of its reach
# (benchmarks/gpu_runs/README.md); rounded up to 5 %.
FITS_HEADROOM_FRACTION = 0.05
ALLOCATOR_FRAGMENTATION = FITS_HEADROOM_FRACTION  # its former name


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
    # The part of `grads` not yet allocated at the forward/backward peak (freed after every
    # step; one micro-batch per step): it counts at the optimizer step, beside step_temp.
    grads_transient: float = 0.0
    terms: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def total(self) -> float:
        grads_held = self.grads - self.grads_transient
        resident = self.params + grads_held + self.optimizer + self.buffers + self.runtime
        return resident + max(self.activations, self.step_temp + self.grads_transient)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in asdict(self).items() if k != "terms"}
        return {**out, "total": self.total}


def gpu_headroom_bytes(device_mem_bytes: float) -> float:
    """What a GPU keeps free beyond the predicted peak (CUDA max allocated) for a layout to
    fit: the CUDA context (CUDA_CONTEXT_GIB) and FITS_HEADROOM_FRACTION of its memory."""
    return CUDA_CONTEXT_GIB * GIB + FITS_HEADROOM_FRACTION * device_mem_bytes


def fits_device(mem: Memory, device_mem_bytes: float | None) -> bool | None:
    """The verdict: on a GPU, fits when the predicted peak ≤ the device's memory − its
    headroom (`gpu_headroom_bytes`); on a CPU rank (a prediction with a runtime term: its peak
    is the whole process's RSS), when it ≤ its share of the host's memory. None: unknown."""
    if device_mem_bytes is None:
        return None
    headroom = 0.0 if mem.runtime else gpu_headroom_bytes(device_mem_bytes)
    return mem.total <= device_mem_bytes - headroom


# --------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class PlacedStates:
    """Model-state bytes by where they are at the peak: resident on the device by Memory field
    (`sums`), made inside the optimizer step only (`step_temp`), offloaded to the host
    (`host`); `by_term` holds each term's device bytes (0 once offloaded)."""

    sums: dict[str, float]
    step_temp: float
    host: float
    by_term: dict[str, float]


def device_state_terms(
    engine: str,
    dtype: str,
    precision: str,
    zero_stage: int,
    data_parallel: str | None,
    dp: int = 2,
) -> list[StateTerm]:
    """`engine_state_terms`, less autocast's weight copies under FSDP2, which casts by its
    MixedPrecisionPolicy instead (its bf16 copies are its gathered layers, a buffer). FSDP2
    wraps only when there is something to shard: at dp = 1 the torch engine runs
    data_parallel=fsdp as one device under autocast (engines/torch_native.py)."""
    terms = engine_state_terms(engine, dtype, precision, zero_stage)
    if data_parallel == "fsdp" and dp > 1:
        terms = [t for t in terms if not t.name.startswith("autocast")]
    return terms


def place_model_states(
    terms: list[StateTerm],
    shard_params: float,
    dp: int,
    zero_stage: int,
    *,
    offload: bool,
    offload_param: bool,
) -> PlacedStates:
    """Each term's bytes on this device's shard, placed: with `offload` (ZeRO-Offload to a
    host that is not the device) the optimizer states and fp32 gradients (and with
    offload_param the parameters) go to the host; step-only terms to step_temp."""
    by_term = state_term_bytes(terms, shard_params, dp, zero_stage)
    sums = {"params": 0.0, "grads": 0.0, "optimizer": 0.0}
    step_temp, host = 0.0, 0.0
    offloaded_kinds = {"optimizer"} | ({"params"} if offload_param else set())
    for term in terms:
        value = by_term[term.name]
        if offload and (term.kind in offloaded_kinds or term.name.startswith("grads_fp32")):
            host += value
            by_term[term.name] = 0.0
            continue
        if term.step_only:
            step_temp += value
        else:
            sums[term.kind] += value
    return PlacedStates(sums=sums, step_temp=step_temp, host=host, by_term=by_term)


# --------------------------------------------------------------------------- buffers


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
    reduce = min(zero_setting(zero_block, "reduce_bucket_size"), shard)
    out = {"reduce_bucket": reduce * (grad_bytes + (4 if comm_fp32 and grad_bytes != 4 else 0))}
    if zero_stage in (1, 2):
        gather = min(zero_setting(zero_block, "allgather_bucket_size"), shard)
        out["allgather_bucket"] = gather * param_bytes
    if zero_stage == 3:
        live = min(zero_setting(zero_block, "stage3_max_live_parameters"), shard)
        prefetch = min(zero_setting(zero_block, "stage3_prefetch_bucket_size"), shard)
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


def engine_buffer_bytes(
    engine: str,
    data_parallel: str | None,
    split: ParamSplit,
    layout: Layout,
    shard_params: float,
    zero_block: dict[str, Any] | None,
    *,
    dtype_bytes: int,
    mixed: bool,
) -> dict[str, float]:
    """The engine's buffers beside the model states: DeepSpeed's (`deepspeed_buffer_bytes`),
    FSDP2's (`fsdp_buffer_bytes`), or DDP's reducer buckets, a second copy of the gradients
    (in fp32 under the torch engine's mixed recipe)."""
    w = dtype_bytes
    if engine == "deepspeed":
        return deepspeed_buffer_bytes(
            zero_block or {},
            layout.zero_stage or 0,
            shard_params,
            param_bytes=w,
            grad_bytes=w,
            comm_fp32=mixed,
            dp=layout.dp,
            largest_matrix=split.largest_matrix / layout.tp,
        )
    if data_parallel == "fsdp" and layout.dp > 1:
        return fsdp_buffer_bytes(split, layout.tp, compute_bytes=w, reduce_bytes=4 if mixed else w)
    if layout.dp > 1:
        weight_bytes = 4 if (mixed and engine == "torch") else w
        return {"ddp_buckets": weight_bytes * shard_params}
    return {}


# --------------------------------------------------------------------------- the assembly


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
    checkpointing: str = "none",
    checkpointing_every: int = 2,
    vocab_parallel: bool = False,
    sequence_parallel: bool = False,
) -> Memory:
    """Every byte one device holds at its peak, by term (see `Memory` and this module's
    docstring): model states, the engine's buffers, activations, runtime. vocab_parallel: the
    torch engine's embedding and LM head split over tp by vocabulary, each device's logits its
    slice (engines/torch_native.py); otherwise torch_tp keeps both whole. sequence_parallel:
    the norms' saved tensors and a checkpointed layer's input are the device's sequence slice."""
    stage, w, mixed = layout.zero_stage or 0, BYTES_PER_DTYPE[dtype], is_mixed(dtype, precision)
    outside_whole = engine == "torch" and not vocab_parallel
    shard = params_per_model_shard(split, layout.tp, layout.pp, outside_layers_whole=outside_whole)
    logits_vocab = vocab_size / layout.tp if vocab_parallel else vocab_size
    terms = device_state_terms(engine, dtype, precision, stage, data_parallel, layout.dp)
    offload = offload_optimizer and not device_is_host  # the device is not the host
    states = place_model_states(
        terms, shard, layout.dp, stage, offload=offload, offload_param=offload_param
    )
    buffers = engine_buffer_bytes(
        engine, data_parallel, split, layout, shard, zero_block, dtype_bytes=w, mixed=mixed
    )
    shape = dict(
        family=family,
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_heads=num_heads,
        vocab_size=logits_vocab,
        dtype_bytes=w,
        attention_scores_stored=attention_scores_stored,
        recompute=recompute,
        engine=engine,
        pp_schedule=pp_schedule,
        tied_embeddings=tied_embeddings,
        checkpointing=checkpointing,
        checkpointing_every=checkpointing_every,
        sequence_parallel=sequence_parallel,
        # 16-bit activations without autocast (DeepSpeed's bf16/fp16, the torch engine's pure
        # recipe): the norms' fp32 upcasts are saved too
        norms_upcast=not (engine == "torch" and mixed),
        loss_parallel=vocab_parallel,
    )
    acts = activation_terms(split, layout, grad_accum_steps=grad_accum_steps, **shape)
    recomputed = num_recomputed_layers(
        "full" if recompute else checkpointing, checkpointing_every, split.num_layers / layout.pp
    )
    alive = when_alive(
        states.sums,
        states.by_term,
        acts,
        split,
        layout,
        recomputed,
        (seq_len, micro_batch_size, logits_vocab),
        outside_layers_whole=outside_whole,
    )
    transient = grads_freed_between_steps(
        alive.sums["grads"],
        engine=engine,
        grad_accum_steps=grad_accum_steps,
        pp=layout.pp,
        device_is_host=device_is_host,
    )
    device_states = {k: v for k, v in alive.by_term.items() if v}
    activations = sum(alive.acts.values())
    process_terms = {}
    if device_is_host:  # a pipeline stage holds several micro-batches; the heap churns one
        tensor_bytes = activation_tensor_bytes(
            seq_len * micro_batch_size,
            hidden_size,
            shape["intermediate_size"],
            logits_vocab,
            split.largest_matrix,
            layout.tp,
            w,
        )
        # A checkpointed forward and its recompute allocate the tensors an uncheckpointed
        # micro-batch saves, one layer at a time: the heap churns them all the same. On the
        # 2-core host (batch=medium, 2 ranks) full checkpointing cut ddp's and zero2's RSS by
        # 151 and 158 MiB where the saved activations alone fell by 150 (and the heap kept
        # by glibc as much as without it).
        churned = {**shape, "checkpointing": "none", "recompute": False}
        micro_batch = activation_terms(split, layout, grad_accum_steps=1, **churned)
        heap = heap_activation_bytes(micro_batch, tensor_bytes)
        process_terms = cpu_process_terms(stage, layout.dp, heap)
    runtime_terms = {"runtime": runtime_bytes, **process_terms}
    return Memory(
        activations=activations,
        host=states.host,
        buffers=sum(buffers.values()),
        step_temp=states.step_temp,
        runtime=sum(runtime_terms.values()),
        grads_transient=transient,
        terms={**device_states, **buffers, **alive.acts, **runtime_terms},
        **alive.sums,
    )
