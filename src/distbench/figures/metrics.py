"""Every figure distbench reports, defined once as a pure function with its unit and source.

The orchestrator turns a job's result.json into MLflow metrics with `train_metrics()`; each
metric name carries its unit. Nothing here imports torch.

    python -c "from distbench.figures.metrics import mfu_pct; print(mfu_pct(150.0, 312.0))"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

GIB = 2**30
# Bytes of one element per dtype name (the one table every formula uses).
BYTES_PER_DTYPE = {"fp32": 4, "bf16": 2, "fp16": 2}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default, method 7 of Hyndman & Fan 1996)."""
    if not len(values):
        raise ValueError("percentile of no values")
    return float(np.percentile(np.asarray(values, dtype=float), q))


def tokens_per_step(micro_batch_size: int, grad_accum_steps: int, seq_len: int, dp: int) -> int:
    """Tokens consumed by one optimizer step over all data-parallel replicas.

    Tensor- and pipeline-parallel ranks share their replica's tokens, so only dp multiplies."""
    return micro_batch_size * grad_accum_steps * seq_len * dp


def throughput_tokens_per_s(num_tokens_per_step: int, step_time_s: float) -> float:
    """Tokens per second of the whole job: tokens per step / seconds per step."""
    return num_tokens_per_step / step_time_s


def train_flops_per_token(
    num_matmul_params: int, num_layers: int, hidden_size: int, seq_len: int
) -> float:
    """Model FLOPs per token of one training step (forward + backward), PaLM appendix B:

        6 N + 12 L H Q T

    N: parameters that take part in matrix multiplies (all but the input embedding lookup),
    L layers, H·Q = hidden size (heads × head dim), T sequence length. The 6 counts 2 FLOPs per
    multiply-add × 3 (forward, and backward's two products); 12·L·H·Q·T is attention's
    QKᵀ and AV, which N does not cover. Recomputation is not counted (model FLOPs, not hardware
    FLOPs), as in PaLM's MFU definition."""
    return 6.0 * num_matmul_params + 12.0 * num_layers * hidden_size * seq_len


def device_train_flops_per_token(
    layer_params: float,
    num_layers: int,
    head_params: float,
    hidden_size: int,
    seq_len: int,
    *,
    tp: int,
    pp: int,
    head_split_by_tp: bool,
) -> float:
    """Training FLOPs per token of the job's busiest device, the one a step waits for
    (`train_flops_per_token`'s 6N + 12·L·h·s on its share): its pipeline stage's L/pp decoder
    layers (`layer_params` each) split over tp, plus on the last stage the LM head and final
    norm (`head_params`), split over tp where the engine shards the head (DeepSpeed AutoTP's
    column-parallel head) and whole on every tp rank where it is replicated (torch_tp). With
    tp = pp = 1 it is train_flops_per_token."""
    layers = num_layers / pp
    head = head_params / (tp if head_split_by_tp else 1)
    return 6.0 * (layers * layer_params / tp + head) + 12.0 * layers * hidden_size * seq_len / tp


def tflops_total(flops_per_token: float, throughput_tokens_per_second: float) -> float:
    """Achieved model TFLOP/s of the whole job: FLOPs per token × tokens/s / 1e12."""
    return flops_per_token * throughput_tokens_per_second / 1e12


def tflops_per_device(total_tflops: float, world_size: int) -> float:
    """Achieved model TFLOP/s per device (rank): the job's total divided by its ranks."""
    return total_tflops / world_size


def mfu_pct(achieved_tflops_per_device: float, peak_tflops_per_device: float) -> float:
    """Model FLOPs utilisation in percent: achieved model FLOP/s over the device's peak for the
    dtype in use (Chowdhery et al. 2022, PaLM, section 4.1 and appendix B)."""
    if peak_tflops_per_device <= 0:
        raise ValueError(f"peak_tflops_per_device={peak_tflops_per_device} must be > 0")
    return 100.0 * achieved_tflops_per_device / peak_tflops_per_device


def cost_usd_per_1m_tokens(
    world_size: int, price_usd_per_device_hour: float, step_time_s: float, num_tokens_per_step: int
) -> float:
    """Dollars to process one million tokens at the measured speed:

    world_size × price per device-hour × (step time / 3600) / tokens per step × 1e6"""
    usd_per_step = world_size * price_usd_per_device_hour * step_time_s / 3600.0
    return usd_per_step / num_tokens_per_step * 1e6


def bytes_to_gib(num_bytes: float) -> float:
    """Bytes to GiB (2**30 bytes)."""
    return num_bytes / GIB


def train_metrics(
    *,
    step_times_s: Sequence[float],
    losses: Sequence[float],
    peak_mem_bytes_per_rank: Sequence[int],
    num_tokens_per_step: int,
    flops_per_token: float,
    world_size: int,
    peak_tflops_per_device: float | None,
    price_usd_per_device_hour: float,
) -> dict[str, float]:
    """The metrics of one training job, named with their units, from its measured figures.

    `step_times_s` are the timed steps only (warm-up excluded), each the slowest rank's time.
    Throughput, TFLOP/s, MFU and cost use the median step time: robust to a stray slow step."""
    step_time_s_p50 = percentile(step_times_s, 50)
    throughput = throughput_tokens_per_s(num_tokens_per_step, step_time_s_p50)
    total = tflops_total(flops_per_token, throughput)
    per_device = tflops_per_device(total, world_size)
    out = {
        "step_time_s_mean": float(np.mean(step_times_s)),
        "step_time_s_p50": step_time_s_p50,
        "step_time_s_p90": percentile(step_times_s, 90),
        "throughput_tokens_per_s": throughput,
        "tflops_total": total,
        "tflops_per_device": per_device,
        "cost_usd_per_1m_tokens": cost_usd_per_1m_tokens(
            world_size, price_usd_per_device_hour, step_time_s_p50, num_tokens_per_step
        ),
        "peak_mem_gib": bytes_to_gib(max(peak_mem_bytes_per_rank)),
        "loss_first": float(losses[0]),
        "loss_last": float(losses[-1]),
        "num_timed_steps": float(len(step_times_s)),
    }
    if peak_tflops_per_device:
        out["mfu_pct"] = mfu_pct(per_device, peak_tflops_per_device)
    for rank, peak in enumerate(peak_mem_bytes_per_rank):
        out[f"peak_mem_gib_rank{rank}"] = bytes_to_gib(peak)
    return out


def step_figures(
    *,
    step_time_s: float,
    num_tokens_per_step: int,
    flops_per_token: float,
    world_size: int,
    peak_tflops_per_device: float | None,
    peak_mem_bytes: int,
    device_mem_gib: float | None,
) -> dict[str, float]:
    """The figures of one step, named as the run's metrics (a step line and its MLflow
    series): throughput_tokens_per_s (and per device), tflops_per_device, mfu_pct where the
    peak is known, peak_mem_gib (the peak so far) and peak_mem_pct of the device's memory
    where known. Same formulas as train_metrics(), on one step's time instead of the p50."""
    throughput = throughput_tokens_per_s(num_tokens_per_step, step_time_s)
    per_device = tflops_per_device(tflops_total(flops_per_token, throughput), world_size)
    out = {
        "throughput_tokens_per_s": throughput,
        "throughput_tokens_per_s_per_device": throughput / world_size,
        "tflops_per_device": per_device,
        "peak_mem_gib": bytes_to_gib(peak_mem_bytes),
    }
    if peak_tflops_per_device:
        out["mfu_pct"] = mfu_pct(per_device, peak_tflops_per_device)
    if device_mem_gib:
        out["peak_mem_pct"] = 100.0 * bytes_to_gib(peak_mem_bytes) / device_mem_gib
    return out


MAX_MFU_PCT = 100.0


def check_mfu(mfu: float | None, peak_tflops_per_device: float | None = None) -> str | None:
    """Why an MFU cannot be right, or None when it can. Above 100 % the device did more model
    FLOP/s than its peak: the peak figure is wrong for this device or dtype (torchtitan #668),
    or the FLOPs per token are overcounted. Such a value must be reported as an error, never
    logged as a metric."""
    if mfu is None:
        return None
    peak = (
        "" if peak_tflops_per_device is None else f" of peak {peak_tflops_per_device:.4g} TFLOP/s"
    )
    if not np.isfinite(mfu) or mfu < 0:
        return f"mfu_pct={mfu} is not a utilisation{peak}"
    if mfu > MAX_MFU_PCT:
        return (
            f"mfu_pct={mfu:.1f} > {MAX_MFU_PCT:.0f}: the peak{peak} is below what was achieved; "
            "fix conf/hardware or use hardware.peak_source=measured"
        )
    return None


def step_spread_pct(metrics: Mapping[str, float]) -> float | None:
    """A run's step-time spread, how much slower the slow steps are than the typical one:
    100 * (p90 - p50) / p50 (%); None without both percentiles."""
    p50, p90 = metrics.get("step_time_s_p50"), metrics.get("step_time_s_p90")
    if not p50 or p90 is None:
        return None
    return 100.0 * max(p90 - p50, 0.0) / p50
