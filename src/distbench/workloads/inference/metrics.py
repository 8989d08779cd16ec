"""The figures of workload=inference (prefill + greedy decode), as pure functions with their
units and sources. Nothing here imports torch: the orchestrator calls `inference_metrics()`.

One *request batch* (a step) is: every data-parallel replica takes `batch_size` prompts of
`prompt_len` tokens, runs one prefill forward (which yields the first new token) and then
`num_new_tokens - 1` single-token decode forwards on its KV cache. Per step the workers record
the prefill time and the decode time, each the slowest rank's.

Model FLOPs of one forward token at attention context c (keys it attends to), Chowdhery et al.
2022 (PaLM), appendix B, forward third of 6N + 12·L·H·Q·T:

    2·N + 4·L·d·c         N = parameters in matmuls (LM head included), d = H·Q = hidden size

2 FLOPs per multiply-add over the weights, plus QKᵀ and AV (2·d·c each per layer). Kaplan et al.
2020 (table 1) counts 2N + 2·L·c·d: only one of the two attention products. As in PaLM, the
attention term has no causal discount: every prefill token is charged the whole prompt (c = P).
Prefill computes logits for the last prompt position only (`logits_to_keep=1`, as
transformers' generate() does), so the LM head (V·d) is charged once per prompt, not P times.

Memory-bandwidth utilisation (MBU), the decode-side twin of MFU: a decode step is bound by the
bytes it must read, every weight in a matmul once (shared by the batch) and each sequence's KV
cache up to its position, so

    bytes per decode step = N·b + B·2·L·d_kv·c·b      (d_kv = num_kv_heads · head_dim; c keys)
    MBU % = 100 · bytes read / decode time / (devices · the device's memory bandwidth)

with the bandwidth from the hardware catalog (`hardware.mem_bandwidth_gbps`, datasheet HBM/
GDDR figures); none on CPU, so no MBU there. As for the FLOPs, c = P + j at decode step j and
the bytes of the static cache a CUDA graph reads beyond c are not counted: MBU counts what the
step must read (Databricks' "LLM inference performance engineering", 2023, defines it so).

    python -c "import distbench.workloads.inference.metrics as m
print(m.decode_flops(7e6, 4, 256, 64, 16))"
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distbench.figures.metrics import (
    BYTES_PER_DTYPE,
    GIB,
    cost_usd_per_1m_tokens,
    mfu_pct,
    percentile,
)


def prefill_flops(
    num_matmul_params: float, lm_head_params: float, num_layers: int, hidden: int, prompt_len: int
) -> float:
    """FLOPs of one prompt's prefill: P tokens through the body (2·(N − V·d) each) plus
    attention over the whole prompt (4·L·d·P each), and the LM head once (2·V·d)."""
    body = 2.0 * (num_matmul_params - lm_head_params)
    attention = 4.0 * num_layers * hidden * prompt_len
    return prompt_len * (body + attention) + 2.0 * lm_head_params


def decode_flops(
    num_matmul_params: float, num_layers: int, hidden: int, prompt_len: int, num_new_tokens: int
) -> float:
    """FLOPs of one sequence's decode steps j = 1 .. n−1: the token fed at step j sits at
    position P + j − 1 and attends to c = P + j keys, so

        Σ_j (2N + 4·L·d·(P + j)) = (n−1)·2N + 4·L·d·((n−1)·P + n·(n−1)/2)"""
    steps = num_new_tokens - 1
    context_sum = steps * prompt_len + num_new_tokens * steps / 2.0
    return steps * 2.0 * num_matmul_params + 4.0 * num_layers * hidden * context_sum


def decode_arithmetic_intensity(
    num_matmul_params: float,
    num_layers: int,
    hidden: int,
    prompt_len: int,
    num_new_tokens: int,
    batch_size: int,
    bytes_per_param: int,
) -> float:
    """FLOP/byte of one decode step, weights-streaming model: the step reads every weight in a
    matmul once (N·bytes; the input embedding contributes only B rows, ignored) and shares it
    among the B sequences of the batch, each doing 2N + 4·L·d·c̄ FLOPs at the mean decode
    context c̄ = P + n/2. KV-cache reads (2·L·c·d_kv·bytes per token) are not counted, so this is
    an upper bound; tensor parallelism divides FLOPs and bytes alike and leaves it unchanged.

        AI = B·(2N + 4·L·d·(P + n/2)) / (N·bytes)"""
    mean_context = prompt_len + num_new_tokens / 2.0
    flops = batch_size * (2.0 * num_matmul_params + 4.0 * num_layers * hidden * mean_context)
    return flops / (num_matmul_params * bytes_per_param)


def decode_bytes(
    num_matmul_params: float,
    num_layers: int,
    kv_dim: int,
    prompt_len: int,
    num_new_tokens: int,
    batch_size: int,
    bytes_per_value: int,
) -> float:
    """Bytes one replica's decode steps j = 1 .. n−1 must read: the weights once per step and
    each of the B sequences' K and V at c = P + j keys (the sum over j as in decode_flops):

        (n−1)·N·b + B·2·L·d_kv·b·((n−1)·P + n·(n−1)/2)"""
    steps = num_new_tokens - 1
    context_sum = steps * prompt_len + num_new_tokens * steps / 2.0
    kv_bytes = batch_size * 2.0 * num_layers * kv_dim * bytes_per_value * context_sum
    return steps * num_matmul_params * bytes_per_value + kv_bytes


def mbu_pct(bytes_per_s_per_device: float, mem_bandwidth_gbps: float) -> float:
    """Memory-bandwidth utilisation: the bytes a device read per second over what its memory
    delivers (GB/s, 1e9 bytes), in %."""
    return 100.0 * bytes_per_s_per_device / (mem_bandwidth_gbps * 1e9)


def decode_bandwidth_metrics(
    *,
    decode_times_s: Sequence[float],
    num_matmul_params: float,
    num_layers: int,
    kv_dim: int,
    prompt_len: int,
    num_new_tokens: int,
    batch_size: int,
    dp: int,
    world_size: int,
    dtype: str,
    mem_bandwidth_gbps: float | None,
) -> dict[str, float]:
    """decode_mem_gbytes_per_s (the bytes every device read per second of decode, GB/s per
    device) and, with the device's bandwidth, mbu_pct; {} without a decode step."""
    decode_s = float(np.sum(decode_times_s))
    if num_new_tokens < 2 or decode_s <= 0:
        return {}
    per_replica = decode_bytes(
        num_matmul_params,
        num_layers,
        kv_dim,
        prompt_len,
        num_new_tokens,
        batch_size,
        BYTES_PER_DTYPE[dtype],
    )
    per_device = dp * per_replica * len(decode_times_s) / decode_s / world_size
    out = {"decode_mem_gbytes_per_s": per_device / 1e9}
    if mem_bandwidth_gbps:
        out["mbu_pct"] = mbu_pct(per_device, mem_bandwidth_gbps)
    return out


def tokens_per_s(num_tokens: float, seconds: float) -> float:
    """Tokens per second: a token count over the seconds it took (a ratio of sums over steps,
    so a long step weighs as much as the tokens it held)."""
    if seconds <= 0:
        raise ValueError(f"seconds={seconds} must be > 0")
    return num_tokens / seconds


def inference_metrics(
    *,
    prefill_times_s: Sequence[float],
    decode_times_s: Sequence[float],
    latency_times_s: Sequence[float],
    num_generated_tokens: int,
    peak_mem_bytes_per_rank: Sequence[int],
    num_matmul_params: float,
    lm_head_params: float,
    num_layers: int,
    hidden: int,
    prompt_len: int,
    num_new_tokens: int,
    batch_size: int,
    dp: int,
    world_size: int,
    dtype: str,
    peak_tflops_per_device: float | None,
    price_usd_per_device_hour: float,
) -> dict[str, float]:
    """The metrics of one inference job, named with their units, from the timed steps
    (warm-up excluded; each time the slowest rank's). Latencies are percentiles over steps;
    rates are totals over all timed steps and all dp replicas (the whole job)."""
    steps = len(latency_times_s)
    rows = dp * batch_size  # sequences per step, whole job
    decode_s, total_s = float(np.sum(decode_times_s)), float(np.sum(latency_times_s))
    flops_per_step = rows * (
        prefill_flops(num_matmul_params, lm_head_params, num_layers, hidden, prompt_len)
        + decode_flops(num_matmul_params, num_layers, hidden, prompt_len, num_new_tokens)
    )
    total_tflops = flops_per_step * steps / total_s / 1e12
    out = {
        "time_to_first_token_s": percentile(prefill_times_s, 50),
        "time_to_first_token_s_p90": percentile(prefill_times_s, 90),
        "time_per_output_token_s": percentile(decode_times_s, 50) / (num_new_tokens - 1),
        "latency_s_p50": percentile(latency_times_s, 50),
        "latency_s_p90": percentile(latency_times_s, 90),
        "decode_tokens_per_s": tokens_per_s(rows * (num_new_tokens - 1) * steps, decode_s),
        "output_tokens_per_s": tokens_per_s(num_generated_tokens, total_s),
        "throughput_tokens_per_s": tokens_per_s(
            rows * (prompt_len + num_new_tokens) * steps, total_s
        ),
        "tflops_total": total_tflops,
        "tflops_per_device": total_tflops / world_size,
        "arithmetic_intensity_flops_per_byte": decode_arithmetic_intensity(
            num_matmul_params,
            num_layers,
            hidden,
            prompt_len,
            num_new_tokens,
            batch_size,
            BYTES_PER_DTYPE[dtype],
        ),
        "cost_usd_per_1m_tokens": cost_usd_per_1m_tokens(
            world_size, price_usd_per_device_hour, total_s, num_generated_tokens
        ),
        "peak_mem_gib": max(peak_mem_bytes_per_rank) / GIB,
        "model_flops_per_step": flops_per_step,
        "num_generated_tokens": float(num_generated_tokens),
        "tokens_generated_per_step": float(rows * num_new_tokens),
        "tokens_prompt_per_step": float(rows * prompt_len),
        "num_timed_steps": float(steps),
    }
    if peak_tflops_per_device:
        out["mfu_pct"] = mfu_pct(total_tflops / world_size, peak_tflops_per_device)
    for rank, peak in enumerate(peak_mem_bytes_per_rank):
        out[f"peak_mem_gib_rank{rank}"] = peak / GIB
    return out
