"""The device's rates, timed: a GEMM at a traced shape, a fused attention call, a large copy's
bandwidth, the shortest time a small kernel occupies the device, and the bare model's forward +
backward (the host's time per kernel; on a CPU also a whole micro-batch at the job's shape).
Every timing is bracketed by a device sync; a GPU is warmed up first (an idle GPU starts at low
clocks). probes/step_parts.py combines them.

    python -c "from distbench.probes.timing import copy_bandwidth_gbps; \
print(copy_bandwidth_gbps('cpu'))"
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from distbench.compose.schema import ModelConfig
from distbench.probes.trace import AttentionShape, gemm_flops

HOST_PROBE_TOKENS = (1, 16)  # micro-batch size, seq_len of the host-time probe
GEMM_TIMED_ITERS = 5
MICRO_BATCH_TIMED_ITERS = 3  # a whole micro-batch: seconds each on a CPU
# On a CPU a GEMM shape is timed with its first dimension cut so one call stays near this.
CPU_GEMM_PROBE_FLOPS = 2e9
WARM_UP_S = 2.0  # of GEMMs on a GPU before the first timing (warm_up)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed_s(fn: Any, device: str) -> float:
    """Seconds of one call, bracketed by a device sync (the device's queued work is inside)."""
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def _timings_s(fn: Any, device: str, iters: int = GEMM_TIMED_ITERS) -> list[float]:
    """Seconds of `iters` calls after one warm-up, each bracketed by a device sync."""
    fn()
    return [timed_s(fn, device) for _ in range(iters)]


def _best_s(fn: Any, device: str) -> float:
    """The shortest timed call: noise on a shared machine only ever adds time."""
    return min(_timings_s(fn, device))


def gemm_seconds(shape: tuple[int, int, int, int], device: str, dtype: str) -> float:
    """Seconds one GEMM of `shape` takes on the device, timed. On a CPU the first dimension is
    cut until a call costs about CPU_GEMM_PROBE_FLOPS, and the time scaled back up by the cut."""
    import torch

    from distbench.ranks.models import DTYPE_NAMES

    batch, m, k, n = shape
    timed_m = m
    if device == "cpu":
        timed_m = max(1, min(m, int(CPU_GEMM_PROBE_FLOPS / gemm_flops((batch, 1, k, n)))))
    torch_dtype = getattr(torch, DTYPE_NAMES[dtype])
    a = torch.randn(batch, timed_m, k, device=device).to(torch_dtype)
    b = torch.randn(batch, k, n, device=device).to(torch_dtype)
    fn = (lambda: torch.mm(a[0], b[0])) if batch == 1 else (lambda: torch.bmm(a, b))
    return _best_s(fn, device) * m / timed_m


def attention_seconds(shape: AttentionShape, device: str, dtype: str) -> tuple[float, float]:
    """Seconds of one fused attention call of `shape` on the device: (forward, backward), the
    backward as forward + backward less forward."""
    import torch
    import torch.nn.functional as F

    from distbench.ranks.models import DTYPE_NAMES

    q_shape, k_shape, v_shape, is_causal, enable_gqa = shape
    torch_dtype = getattr(torch, DTYPE_NAMES[dtype])
    q, k, v = (
        torch.randn(s, device=device, dtype=torch_dtype, requires_grad=True)
        for s in (q_shape, k_shape, v_shape)
    )
    kwargs = {"is_causal": is_causal, **({"enable_gqa": True} if enable_gqa else {})}
    grad = torch.randn((*q_shape[:-1], v_shape[-1]), device=device, dtype=torch_dtype)

    def forward() -> None:
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, **kwargs)

    def forward_backward() -> None:
        F.scaled_dot_product_attention(q, k, v, **kwargs).backward(grad)
        q.grad = k.grad = v.grad = None

    forward_s = _best_s(forward, device)
    return forward_s, max(_best_s(forward_backward, device) - forward_s, 0.0)


def warm_up(device: str, seconds: float = WARM_UP_S) -> None:
    """Keep a GPU busy with large fp16 GEMMs (tensor cores on every CUDA GPU since Volta) for
    `seconds` before anything is timed: an idle GPU starts at low clocks, and the first shapes
    timed would read slower than a running job's (benchmarks/gpu_runs/2026-11-26_zero3_probe
    has the figures). A CPU has no such ramp."""
    if device != "cuda":
        return
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(10):
            torch.mm(a, a)
        torch.cuda.synchronize()


def copy_bandwidth_gbps(device: str) -> float:
    """GB/s of a large device copy, bytes read + written (STREAM's copy counts both)."""
    import torch

    num_bytes = (1 << 30) if device == "cuda" else (1 << 27)
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * num_bytes / _best_s(lambda: dst.copy_(src), device) / 1e9


def kernel_floor_s(device: str) -> float:
    """The device time of a tiny kernel (CUDA): a long fp32 GEMM (8192³: ~1.1 TFLOP, over 10 ms
    on an H100 without TF32) is queued first so that the host is far ahead when the 500
    one-element adds between two events start to run (~2.5 ms of launches), the best of 3.
    0 on a CPU (no separate device)."""
    if device != "cuda":
        return 0.0
    import torch

    x = torch.zeros(1, device="cuda")
    big = torch.randn(8192, 8192, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        torch.mm(big, big)
        start.record()
        for _ in range(500):
            x.add_(1)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / 500)
    return best


def bare_forward_backward(
    model_cfg: ModelConfig, device: str, dtype: str, tokens: tuple[int, int] = HOST_PROBE_TOKENS
) -> Any:
    """A call that runs forward + backward of the bare model (no engine) on `tokens` (micro-batch
    size, seq_len) on the device, built as the runs build it (ranks/models.py)."""
    import torch

    from distbench.ranks.models import build_meta_model, materialise

    model = materialise(build_meta_model(model_cfg, dtype), device, seed=0)
    ids = torch.zeros(*tokens, dtype=torch.long, device=device)

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def micro_batch_seconds(
    model_cfg: ModelConfig, device: str, dtype: str, tokens: tuple[int, int]
) -> float:
    """Wall seconds of the bare model's forward + backward on one micro-batch of `tokens`
    (micro-batch size, seq_len): the shortest of MICRO_BATCH_TIMED_ITERS after a warm-up."""
    fn = bare_forward_backward(model_cfg, device, dtype, tokens)
    return min(_timings_s(fn, device, iters=MICRO_BATCH_TIMED_ITERS))


def host_seconds(model_cfg: ModelConfig, device: str, dtype: str) -> float:
    """Wall seconds of the 2-layer model's bare_forward_backward; the median of 5 after a
    warm-up."""
    two_layers = dataclasses.replace(model_cfg, num_layers=2)
    return statistics.median(
        _timings_s(bare_forward_backward(two_layers, device, dtype), device, iters=5)
    )
