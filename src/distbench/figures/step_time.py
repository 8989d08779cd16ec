"""Step time terms of a training layout: compute (the efficiency model or the measured parts
of one micro-batch), the pipeline bubble, what communication hides under compute, the
optimizer step and offload traffic.

    python -c "from distbench.figures.step_time import *; print(pipeline_bubble_fraction(4, 8))"

step time = compute + bubble + exposed communication + optimizer step + offload
(figures/predict.py adds them). Exposed: on GPUs the torch engine's data-parallel traffic runs
under compute (`hidden_comm_s`); DeepSpeed runs with overlap_comm false (conf/ds_zero) and CPU
ranks have one core for both, so nothing hides there. The optimizer step is memory-bound
(`optimizer_step_s`); on CPU, where no bandwidth is catalogued, it stays inside the measured
efficiency. Pure functions.
"""

from __future__ import annotations

from typing import Any

from distbench.figures.communication import DDP_BUCKET_BYTES, GB

# Model FLOPs utilisation assumed for the compute term. GPU: 0.4, what well-tuned dense
# transformer training reaches (Megatron-LM and PaLM report 40-55 % MFU). CPU: 0.6, what a
# one-core rank of strategy=single reaches of the cpuinfo peak; what the other strategies lose
# is their communication. Measured values: benchmarks/planner_constants/README.md.
# A catalog entry's hardware.train_efficiency replaces it (A100, H100: fitted on half the
# published runs of benchmarks/plan_vs_published.py); `distbench plan --efficiency` overrides.
DEFAULT_EFFICIENCY = {"cuda": 0.4, "cpu": 0.6}
# Host link for offload (GB/s): PCIe 4.0 x16 is 32 GB/s raw, ~25 effective.
HOST_LINK_GBPS = 25.0
# CPU optimizer throughput for offload (parameters/s): torch AdamW (foreach off) on the host,
# the optimizer distbench hands DeepSpeed; DeepSpeed's CPUAdam is ~5x faster (ZeRO-Offload).
CPU_ADAM_PARAMS_PER_S = 2e8
# Backward is 2/3 of a step's FLOPs (6N: 2N forward, 4N backward).
BACKWARD_FRACTION = 2 / 3


def rank_threads(num_cores: int, ranks_sharing_cores: int) -> int:
    """The CPU threads of one rank: the cores split between the ranks that share them (what the
    launcher sets as OMP_NUM_THREADS, launch/workers.py)."""
    return max(1, num_cores // ranks_sharing_cores)


def ranks_sharing_machine(rank_launcher: str, world_size: int, ranks_per_node: int) -> int:
    """Ranks on one machine: every rank under local_nodes (its "nodes" are this machine), else
    a node's."""
    return world_size if rank_launcher == "local_nodes" else ranks_per_node


def cpu_oversubscription(ranks_here: int, threads_per_rank: int, cores: int | None) -> float:
    """How many times over a CPU host's cores are asked for: its ranks × each rank's threads /
    its cores, at least 1 (1 when the cores are unknown). Every part of a CPU rank's work runs
    on those cores (the kernels, gloo's copies and reductions, the optimizer), so when they are
    time-shared (Linux CFS shares them fairly between runnable threads) a rank's busy time
    stretches by this factor; a rank that waits (a pipeline bubble) leaves its share to the
    others (`oversubscribed_s`)."""
    if not cores or cores <= 0:
        return 1.0
    return max(1.0, ranks_here * threads_per_rank / cores)


def oversubscribed_s(
    terms_s: dict[str, float], oversubscription: float, mean_busy_s: float | None = None
) -> float:
    """What time-sharing the cores adds to a step whose terms take `terms_s` on cores of their
    own: the host's cores must do every rank's busy work, so the step lasts at least
    oversubscription × a rank's mean busy seconds (`mean_busy_s`: what the ranks do besides
    waiting; by default the whole step, as when every rank does the same work), and no less
    than the step alone; the excess over the step."""
    step_s = sum(terms_s.values())
    busy_s = step_s if mean_busy_s is None else mean_busy_s
    return max(0.0, oversubscription * busy_s - step_s)


def default_efficiency(device: str) -> float:
    """The assumed fraction of the peak a step reaches when nothing measured says otherwise."""
    return DEFAULT_EFFICIENCY.get(device, 0.4)


def hardware_efficiency(train_efficiency: float | None, device: str) -> float:
    """The efficiency model's fraction of the peak: the catalog's `train_efficiency` of the
    hardware where it has one, else the device's default."""
    return train_efficiency if train_efficiency is not None else default_efficiency(device)


def efficiency_compute_s(
    flops_per_token: float,
    micro_batch_size: int,
    grad_accum_steps: int,
    seq_len: int,
    tp: int,
    pp: int,
    peak_tflops: float,
    efficiency: float,
) -> float:
    """Forward + backward of a step by the efficiency model: model FLOPs per token
    (metrics.train_flops_per_token: 6N + 12·L·h·s, PaLM's) × this device's share of the
    step's tokens (split over tp·pp) / (the dtype's peak × efficiency)."""
    device_flops = flops_per_token * micro_batch_size * grad_accum_steps * seq_len / (tp * pp)
    return device_flops / (float(peak_tflops) * 1e12 * efficiency)


# An attention that materialises its s × s scores (HF's `attn_implementation=eager`;
# Megatron-LM 2021's softmax kernels) moves them through memory, each pass b·heads·s²
# elements: forward, S written by Q·Kᵀ and read by the softmax, P written and read by P·V (4);
# backward, dP written and read with P by the softmax's backward, dS written and read by the dQ
# and dK products, P read for dV (7). Fused attention (SDPA's flash or memory-efficient
# kernels) keeps the scores on chip: its time is in the FLOPs.
EAGER_SCORE_PASSES = 11


def eager_scores_s(
    micro_batch_size: int,
    seq_len: int,
    heads: float,
    layers: float,
    dtype_bytes: int,
    mem_bandwidth_gbps: float | None,
) -> float:
    """One micro-batch's forward + backward time spent moving the attention scores of `layers`
    layers of `heads` heads each (EAGER_SCORE_PASSES over b·heads·s² elements of the dtype)
    at the device's memory bandwidth; 0 when it is unknown."""
    if not mem_bandwidth_gbps:
        return 0.0
    elements = micro_batch_size * heads * seq_len**2 * layers
    return EAGER_SCORE_PASSES * elements * dtype_bytes / (mem_bandwidth_gbps * GB)


def measured_parts_s(hardware: Any, measured: Any) -> tuple[float, float] | None:
    """(device seconds, host seconds) of one micro-batch from the job's measured parts
    (`measured`, probes/parts.py Measurements) under hardware.time_source=measured, or None
    when the compute term is the efficiency model's. Attention is 0 in records made before it
    was timed apart (then inside the other kernels)."""
    if hardware.time_source != "measured" or measured.micro_batch_gemm_s is None:
        return None
    device_s = (
        measured.micro_batch_gemm_s
        + (measured.micro_batch_attention_s or 0.0)
        + measured.micro_batch_other_s
    )
    return device_s, measured.micro_batch_host_s


def measured_compute_s(
    device: str,
    device_s: float,
    host_s: float,
    tp: int,
    pp: int,
    grad_accum_steps: int,
    engine_host_s: float = 0.0,
    kernel_share: float | None = None,
) -> float:
    """Forward + backward of a step from one micro-batch's measured parts
    (probes/step_parts.py): its kernels' time on the device, split over tp·pp (a tp rank runs
    1/tp of each layer's work, a pp stage 1/pp of the layers), and its host time, split over pp
    only (a tp rank launches every kernel of its layers, smaller). On a GPU the host queues
    kernels while the device runs them: a micro-batch takes the longer of the two (Williams et
    al. 2009's roofline bound, with the launch path as one more ceiling). On a CPU both run on
    the rank's one core: they add up. `engine_host_s` (ZeRO-3's fetch / release hooks,
    workloads/train/engine_probe.py) is added on both: DeepSpeed's parameter coordinator waits
    for the device once two fetch events are outstanding (partitioned_param_coordinator.py,
    __max_ongoing_fetch_events), so the host runs at most two fetches ahead of the kernels,
    not a whole micro-batch. `kernel_share`: the busiest device's share of the model's
    kernels instead of 1/(tp·pp) (metrics.device_train_flops_per_token over the model's)."""
    kernels_s = device_s * kernel_share if kernel_share is not None else device_s / (tp * pp)
    launch_s = host_s / pp
    per_micro_batch = max(kernels_s, launch_s) if device == "cuda" else kernels_s + launch_s
    return grad_accum_steps * (per_micro_batch + engine_host_s)


def pipeline_bubble_fraction(pp: int, num_micro_batches: int) -> float:
    """Idle fraction of a GPipe/1F1B pipeline step: (p−1)/(m+p−1) (Huang et al. 2019 GPipe;
    Narayanan et al. 2021, Megatron-LM 3D, section 2.2). Added to a step as compute·(p−1)/m,
    the same fraction of the pipelined time."""
    return (pp - 1) / (num_micro_batches + pp - 1)


def pipeline_bubble_s(
    compute_s: float, grad_accum_steps: int, stage_flops: float, other_stages_flops: float
) -> float:
    """The pipeline's fill and drain beyond the busiest stage's `compute_s` (its m
    micro-batches): one micro-batch of every other stage, forward before the busiest stage
    starts and backward after it ends, i.e. compute × (the other stages' FLOPs / the busiest
    stage's) / m. With p equal stages that is compute·(p−1)/m, GPipe's and 1F1B's bubble
    (pipeline_bubble_fraction); the busiest stage is the last (it holds the LM head), whose
    first forward waits on the others' and whose last backward they wait on."""
    if stage_flops <= 0 or other_stages_flops <= 0:
        return 0.0
    return compute_s * other_stages_flops / stage_flops / max(grad_accum_steps, 1)


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
        # the last bucket is reduced after backward ends: at least its time is exposed
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


def engine_step_host_s(engine_step_s: float | None, optimizer_kernels_s: float) -> float:
    """What an engine's optimizer step takes beyond its kernels: the probe's measured step of
    the whole model on one rank (workloads/train/engine_probe.py) less the memory-bound AdamW
    kernels of the same parameters (optimizer_step_s). Taken as per-parameter bookkeeping,
    which does not shrink with the shard (an assumption: measured at world size 1 only; the
    step's other kernels, such as the gradient norm, are inside it); 0 without a probe."""
    if engine_step_s is None:
        return 0.0
    return max(engine_step_s - optimizer_kernels_s, 0.0)


def optimizer_term_s(
    *,
    offloaded: bool,
    update_params: float,
    total_params: float,
    state_bytes: int,
    bf16_copy: bool,
    mem_bandwidth_gbps: float | None,
    engine_step_s: float | None,
) -> float:
    """The step's optimizer term: AdamW's memory-bound step over the `update_params` this
    device updates, plus the engine's step beyond its kernels (`engine_step_host_s`, whose
    probe timed all `total_params` on one rank); 0 when offload runs it on the host (then it
    is in the offload term)."""
    if offloaded:
        return 0.0
    step_host = engine_step_host_s(
        engine_step_s, optimizer_step_s(total_params, state_bytes, bf16_copy, mem_bandwidth_gbps)
    )
    return optimizer_step_s(update_params, state_bytes, bf16_copy, mem_bandwidth_gbps) + step_host


def offload_traffic(
    shard_params_dp: float,
    *,
    grad_bytes: int,
    param_bytes: int,
    grad_accum_steps: int,
    offload_optimizer: bool,
    offload_param: bool,
    device_is_host: bool,
) -> tuple[float, float]:
    """(bytes, seconds) per step of ZeRO-Offload (Ren et al. 2021) for this device's ZeRO
    shard: with the optimizer offloaded the gradients go down and the updated parameters come
    up once per step, and the host runs Adam (CPU_ADAM_PARAMS_PER_S); with the parameters
    offloaded the shard comes up for forward and for backward of every micro-batch; the bytes
    cross the host link at HOST_LINK_GBPS. Nothing when the device is the host."""
    offload_bytes = 0.0
    offload_s = 0.0
    if not device_is_host:
        if offload_optimizer:  # gradients down, updated parameters up, once per step
            offload_bytes += shard_params_dp * (grad_bytes + param_bytes)
            offload_s += shard_params_dp / CPU_ADAM_PARAMS_PER_S
        if offload_param:  # the parameter shard comes up for forward and for backward
            offload_bytes += 2 * grad_accum_steps * shard_params_dp * param_bytes
        offload_s += offload_bytes / (HOST_LINK_GBPS * GB)
    return offload_bytes, offload_s
