"""What a CPU rank's peak RSS holds beyond its tensors: the process runtime per engine, and what
glibc's heap keeps of a micro-batch's freed activations. figures/memory.py adds these terms to a
CPU prediction (the measured CPU peak is VmHWM, the whole process); a GPU prediction has none
(CUDA max allocated counts live tensors only).

    python -c "from distbench.figures import cpu_rss; print(cpu_rss.CPU_RUNTIME_GIB)"
    python benchmarks/cpu_runs/2026-11-27_memory_fit/fit_cpu_memory.py   # the values, fitted
"""

from __future__ import annotations

from distbench.figures.activations import logits_bytes
from distbench.figures.metrics import GIB

# Process RSS of a CPU rank that is not model states or activations: the interpreter, torch,
# transformers, gloo, the engine, allocator caches. Counted in the predicted peak on CPU only
# (`Memory.runtime`): the measured CPU peak is VmHWM, the whole process; on a GPU the peak is
# CUDA max allocated, which has no runtime. These four constants are fitted together by least
# squares on one grid and checked on others (benchmarks/cpu_runs/2026-11-27_memory_fit/,
# benchmarks/planner_constants/README.md).
CPU_RUNTIME_GIB = {"torch": 0.389, "deepspeed": 0.435}
# What a CPU rank that communicates adds: gloo's per-collective copies, and DeepSpeed's
# shared-memory CPU communication workspace.
CPU_COMM_RUNTIME_GIB = {"torch": 0.034, "deepspeed": 0.023}
# What a CPU rank whose engine shards its states over dp > 1 adds beyond its modelled buffers
# (ZeRO-1/2/3's partitioned optimizer, FSDP2's sharded parameters): flat copies and bookkeeping.
CPU_SHARDED_RUNTIME_GIB = 0.051
# What a CPU rank's peak RSS keeps of one micro-batch's heap-allocated activations beyond the
# live tensors: among the activations backward frees, glibc cannot return the pages of blocks
# it took from its heap, and the gradients and optimizer temporaries allocated after them do
# not fit all of those holes. A tensor of GLIBC_MMAP_THRESHOLD_MAX_BYTES or more is always its
# own mmap (glibc's dynamic threshold never rises above it), unmapped when freed: not kept.
CPU_HEAP_RETENTION_OF_ACTIVATIONS = 0.936
GLIBC_MMAP_THRESHOLD_MAX_BYTES = 32 * 2**20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (mallopt(3))


def cpu_runtime_bytes(engine: str, device_is_host: bool, world_size: int) -> float:
    """The process runtime a CPU rank's peak RSS holds (CPU_RUNTIME_GIB, and
    CPU_COMM_RUNTIME_GIB when it communicates); 0 on a GPU."""
    runtime_gib = 0.0
    if device_is_host:
        runtime_gib = CPU_RUNTIME_GIB.get(engine, 0.0)
        if world_size > 1:
            runtime_gib += CPU_COMM_RUNTIME_GIB.get(engine, 0.0)
    return runtime_gib * GIB


def heap_activation_bytes(
    micro_batch_terms: dict[str, float], tensor_bytes: dict[str, float]
) -> float:
    """One micro-batch's activation terms whose tensors come from glibc's heap: those whose
    typical tensor (`tensor_bytes` by term; a layer's widest activation, the fp32 logits, a
    weight's gradient) is under GLIBC_MMAP_THRESHOLD_MAX_BYTES. A rough cut: each term is all
    or nothing (a layer's narrower tensors go with its widest; eager attention's scores are not
    sized apart), so the retained bytes step down where a term's tensor crosses 32 MiB."""
    return sum(
        v
        for k, v in micro_batch_terms.items()
        if tensor_bytes.get(k, tensor_bytes["layer"]) < GLIBC_MMAP_THRESHOLD_MAX_BYTES
    )


def activation_tensor_bytes(
    tokens: int,
    hidden_size: int,
    intermediate_size: int,
    vocab_size: float,
    largest_matrix: int,
    tp: int,
    dtype_bytes: int,
) -> dict[str, float]:
    """The typical tensor of each activation term, what `heap_activation_bytes` sizes against
    glibc's threshold: a layer's widest activation ("layer", every term without its own entry),
    the loss's fp32 logits (activations.logits_bytes; DeepSpeed AutoTP keeps the head whole) and
    a weight's gradient."""
    return {
        "layer": tokens * max(hidden_size, intermediate_size / tp) * dtype_bytes,
        "activations_logits": logits_bytes(tokens, 1, vocab_size),
        "backward_grad_transient": dtype_bytes * largest_matrix / tp,
    }


def cpu_process_terms(zero_stage: int, dp: int, heap_activations: float) -> dict[str, float]:
    """What a CPU rank's peak RSS holds beyond its tensors and runtime: cpu_sharded_runtime
    (CPU_SHARDED_RUNTIME_GIB) when its engine shards states over dp > 1 (ZeRO-1+, FSDP as its
    zero-equivalent stage 3), and cpu_heap_retained (CPU_HEAP_RETENTION_OF_ACTIVATIONS of one
    micro-batch's heap-allocated activations, `heap_activation_bytes`). A GPU rank has neither
    (CUDA max allocated counts live tensors only): the caller adds them on CPU only."""
    terms = {"cpu_heap_retained": CPU_HEAP_RETENTION_OF_ACTIVATIONS * heap_activations}
    if dp > 1 and zero_stage >= 1:
        terms["cpu_sharded_runtime"] = CPU_SHARDED_RUNTIME_GIB * GIB
    return {k: v for k, v in terms.items() if v}
