"""A training micro-batch's time from measured parts: the model's own operations, traced on the
meta device, priced with rates timed on this machine's device, and cached.

`hardware.time_source=measured` runs this as a subprocess at compose time (the orchestrator
never imports torch) and reads the last stdout line, one JSON document; figures/analytic.py's
`measured_compute_s` turns it into the compute term of the predicted step.

The parts, for one micro-batch (forward + backward, the optimizer apart):
- **the trace**: the real transformers model, built on the meta device (nothing allocated),
  runs forward and backward under a TorchDispatchMode that records every aten operation: each
  GEMM's shape (mm, addmm, bmm, baddbmm), each fused attention call's shape (SDPA without a
  mask: one flash / cuDNN kernel each way on a GPU, not meta's math path with its s × s
  intermediates), every other kernel's bytes read and written, and the number of kernels
  (views launch none). Traced with 1 and 2 layers and extrapolated linearly to
  the model's depth (a layer adds the same operations), so a 70B model traces in seconds.
- **the device's rates**: each distinct GEMM shape timed on the device in the run's dtype (the
  rate at the model's shapes, not one square GEMM's); each attention shape's SDPA forward and
  backward, timed; the memory bandwidth of a large copy; the
  shortest time a small kernel occupies the device (CUDA events around 500 queued tiny kernels).
- **the host**: the same model cut to 2 layers, run on the device at 1 × 16 tokens (too small to
  keep a GPU busy), timed per traced kernel: what Python, autograd and the dispatcher cost per
  kernel launched. On a GPU a micro-batch takes the longer of its device time and its host time
  (the host queues kernels ahead, the device runs them); on a CPU the two add up.

device_s = Σ GEMM time at its timed shape + Σ attention time at its timed shape
         + Σ max(bytes / bandwidth, kernel floor) of the rest;
host_s = kernels × host time per kernel. Not counted: what an engine adds (DDP and DeepSpeed hooks;
ZeRO-3's are probed apart on a GPU, compose/engine_probe.py), autocast's weight casts.

Cached in ~/.cache/distbench/step_parts.json ($DISTBENCH_CACHE_DIR overrides the folder), keyed by
host, device name, dtype, model shape, batch shape and (CPU) the rank's threads: the cores the
launcher gives each rank (OMP_NUM_THREADS = cores // ranks on the machine); `--force` measures
again.

    python -m distbench.compose.step_parts --device cuda --dtype bf16 \
        --model-json '{"name": "llama_1b", ...}' --micro-batch-size 4 --seq-len 512
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import socket
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from distbench.compose.calibrate import cache_path
from distbench.compose.schema import ModelConfig
from distbench.files import file_lock, write_json_atomic

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")
# Operations that launch no kernel: views and aliases, and allocations.
NO_KERNEL_OPS = frozenset(
    {
        "_unsafe_view",
        "detach",
        "alias",
        "lift_fresh",
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
    }
)
HOST_PROBE_TOKENS = (1, 16)  # micro-batch size, seq_len of the host-time probe
GEMM_TIMED_ITERS = 5
# On a CPU a GEMM shape is timed with its first dimension cut so one call stays near this.
CPU_GEMM_PROBE_FLOPS = 2e9
WARM_UP_S = 2.0  # of GEMMs on a GPU before the first timing (warm_up)
CACHE_FILE = "step_parts.json"
CACHE_VERSION = 2


@dataclass
class Trace:
    """What one forward + backward of a micro-batch launches: GEMM shapes (batch, m, k, n)
    with their counts, fused attention calls (AttentionShape: forward and backward counts),
    the bytes each other kernel reads and writes, and the kernel count."""

    gemms: Counter = field(default_factory=Counter)
    attention_forward: Counter = field(default_factory=Counter)
    attention_backward: Counter = field(default_factory=Counter)
    other_bytes: list[int] = field(default_factory=list)

    @property
    def num_kernels(self) -> int:
        attention = sum(self.attention_forward.values()) + sum(self.attention_backward.values())
        return sum(self.gemms.values()) + attention + len(self.other_bytes)


# One fused attention call: query, key, value shapes (batch, heads, seq, head_dim), is_causal,
# enable_gqa. Only mask-free calls are fused here (a mask is traced through the math path).
AttentionShape = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool, bool]


def gemm_flops(shape: tuple[int, int, int, int]) -> float:
    """FLOPs of a (batch, m, k, n) GEMM: a multiply and an add per product."""
    batch, m, k, n = shape
    return 2.0 * batch * m * k * n


def attention_forward_flops(shape: AttentionShape) -> float:
    """FLOPs of one attention forward, QKᵀ and AV over the whole s × s (model FLOPs: a causal
    kernel skips about half)."""
    (batch, heads, seq_q, head_dim), (_, _, seq_kv, _) = shape[0], shape[1]
    return 4.0 * batch * heads * seq_q * seq_kv * head_dim


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _gemm_shape(name: str, args: tuple) -> tuple[int, int, int, int]:
    a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
    if a.dim() == 3:
        return (a.shape[0], a.shape[1], a.shape[2], b.shape[2])
    return (1, a.shape[0], a.shape[1], b.shape[1])


@contextlib.contextmanager
def fused_attention_recorded(trace: Trace):
    """Within: F.scaled_dot_product_attention without a mask is one forward and one backward
    kernel recorded by shape (on a GPU it is one flash / cuDNN kernel each way; on meta it
    would run the math path, whose s × s intermediates a fused kernel never writes)."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, shape):
            ctx.shape = shape
            trace.attention_forward[shape] += 1
            out = (*query.shape[:-1], value.shape[-1])
            return torch.empty(out, dtype=query.dtype, device=query.device)

        @staticmethod
        def backward(ctx, grad):
            trace.attention_backward[ctx.shape] += 1
            q, k, v = ctx.shape[:3]
            return (
                *(torch.empty(s, dtype=grad.dtype, device=grad.device) for s in (q, k, v)),
                None,
            )

    def recorded(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        if attn_mask is not None or dropout_p:
            return original(query, key, value, attn_mask, dropout_p, is_causal, **kwargs)
        shape = (
            tuple(query.shape),
            tuple(key.shape),
            tuple(value.shape),
            bool(is_causal),
            bool(kwargs.get("enable_gqa", False)),
        )
        return FusedAttention.apply(query, key, value, shape)

    F.scaled_dot_product_attention = recorded
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def trace_micro_batch(model_cfg: ModelConfig, dtype: str, micro_batch_size: int, seq_len: int):
    """Forward + backward of the model on the meta device, recorded op by op (a Trace)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from distbench.ranks.models import build_meta_model

    trace = Trace()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in GEMM_OPS:
                trace.gemms[_gemm_shape(name, args)] += 1
            elif not func.is_view and name not in NO_KERNEL_OPS:
                moved = _tensors(args) + _tensors(kwargs or {}) + _tensors(out)
                num_bytes = sum(t.numel() * t.element_size() for t in moved)
                if num_bytes:  # an empty tensor's op launches nothing
                    trace.other_bytes.append(num_bytes)
            return out

    model = build_meta_model(model_cfg, dtype)
    ids = torch.zeros(micro_batch_size, seq_len, dtype=torch.long, device="meta")
    with Recorder(), fused_attention_recorded(trace):
        model(input_ids=ids, labels=ids).loss.backward()
    return trace


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
    `seconds` before anything is timed: an idle GPU starts at low clocks. A fresh H100 timed
    llama_1b's GEMMs at 4 × 512 tokens at 0.056 s per micro-batch, and a minute later at
    8 × 1024 (four times the work) at 0.085 s; after this warm-up another fresh H100 timed
    0.029 s at 4 × 512 (benchmarks/gpu_runs/2026-11-26_zero3_probe). A CPU has no such ramp."""
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


def host_seconds(model_cfg: ModelConfig, device: str, dtype: str) -> float:
    """Wall seconds of the 2-layer model's bare_forward_backward; the median of 5 after a
    warm-up."""
    two_layers = dataclasses.replace(model_cfg, num_layers=2)
    return statistics.median(
        _timings_s(bare_forward_backward(two_layers, device, dtype), device, iters=5)
    )


def device_seconds(
    trace: Trace,
    gemm_s: dict[tuple, float],
    attention_s: dict[tuple, tuple[float, float]],
    bandwidth_gbps: float,
    floor_s: float,
) -> tuple[float, float, float]:
    """(GEMM, fused attention, other kernels) seconds of a trace on the device."""
    gemm_total = sum(count * gemm_s[shape] for shape, count in trace.gemms.items())
    attention = sum(n * attention_s[s][0] for s, n in trace.attention_forward.items())
    attention += sum(n * attention_s[s][1] for s, n in trace.attention_backward.items())
    other = sum(max(b / (bandwidth_gbps * 1e9), floor_s) for b in trace.other_bytes)
    return gemm_total, attention, other


def extrapolate(at_1: float, at_2: float, num_layers: float) -> float:
    """A per-micro-batch quantity at `num_layers` from its values at 1 and 2 layers."""
    return at_1 + (num_layers - 1) * (at_2 - at_1)


def measure(
    model_cfg: ModelConfig,
    device: str,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    threads: int = 1,
) -> dict[str, Any]:
    """Trace, time the parts, and combine them into one micro-batch's figures."""
    import torch

    traces = {
        n: trace_micro_batch(
            dataclasses.replace(model_cfg, num_layers=n), dtype, micro_batch_size, seq_len
        )
        for n in (1, 2)
    }
    probe_trace = trace_micro_batch(
        dataclasses.replace(model_cfg, num_layers=2), dtype, *HOST_PROBE_TOKENS
    )
    if device == "cpu":
        torch.set_num_threads(threads)  # a rank's share of the cores, as the launcher gives it
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    warm_up(device)
    every = (traces[1], traces[2], probe_trace)
    shapes = set().union(*(t.gemms for t in every))
    gemm_s = {shape: gemm_seconds(shape, device, dtype) for shape in sorted(shapes)}
    calls = set().union(
        *(t.attention_forward for t in every), *(t.attention_backward for t in every)
    )
    attention_s = {shape: attention_seconds(shape, device, dtype) for shape in sorted(calls)}
    bandwidth = copy_bandwidth_gbps(device)
    floor = kernel_floor_s(device)
    rates = (gemm_s, attention_s, bandwidth, floor)
    probe_wall = host_seconds(model_cfg, device, dtype)
    # On a CPU the probe's wall time includes its own compute; on a GPU it is the host's.
    probe_device = sum(device_seconds(probe_trace, *rates))
    probe_host = probe_wall - probe_device if device == "cpu" else probe_wall
    host_per_kernel = max(probe_host, 0.0) / probe_trace.num_kernels
    parts = {n: device_seconds(traces[n], *rates) for n in (1, 2)}
    layers = model_cfg.num_layers
    gemm_total, attention_total, other_total = (
        extrapolate(parts[1][i], parts[2][i], layers) for i in range(3)
    )
    kernels = extrapolate(traces[1].num_kernels, traces[2].num_kernels, layers)
    gemm_flops_total = extrapolate(
        *(sum(c * gemm_flops(s) for s, c in traces[n].gemms.items()) for n in (1, 2)), layers
    )
    return {
        "micro_batch_gemm_s": gemm_total,
        "micro_batch_attention_s": attention_total,
        "micro_batch_other_s": other_total,
        "micro_batch_host_s": kernels * host_per_kernel,
        "kernels_per_micro_batch": round(kernels),
        "host_us_per_kernel": host_per_kernel * 1e6,
        "kernel_floor_us": floor * 1e6,
        "measured_mem_bandwidth_gbps": bandwidth,
        "gemm_tflops_at_shapes": gemm_flops_total / gemm_total / 1e12 if gemm_total else None,
        "torch_version": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def cache_key(
    device_name: str,
    dtype: str,
    model_cfg: ModelConfig,
    micro_batch_size: int,
    seq_len: int,
    threads: int = 1,
) -> str:
    shape = {k: v for k, v in dataclasses.asdict(model_cfg).items() if k != "pretrained_path"}
    shape.pop("name", None)
    model = json.dumps(shape, sort_keys=True, separators=(",", ":"))
    return (
        f"v{CACHE_VERSION}|{socket.gethostname()}|{device_name}|{dtype}|{model}"
        f"|b={micro_batch_size}|s={seq_len}|threads={threads}"
    )


def read_cache(file_name: str = CACHE_FILE) -> dict[str, Any]:
    """Every cached measurement of the cache folder's `file_name` by key ({} without one)."""
    try:
        return json.loads(cache_path().with_name(file_name).read_text())
    except (OSError, ValueError):
        return {}


def cached(file_name: str, key: str, measure_now: Any, force: bool = False) -> dict[str, Any]:
    """The figures cached under `key` in the cache folder's `file_name`, or measure_now()'s,
    cached; under a lock (jobs may overlap), with "cached" saying which."""
    path = cache_path().with_name(file_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_suffix(".lock")):
        cache = read_cache(file_name)
        if key in cache and not force:
            return {**cache[key], "cached": True}
        result = measure_now()
        cache[key] = result
        write_json_atomic(path, dict(sorted(cache.items())))
    return {**result, "cached": False}


def cached_or_measured(
    model_cfg: ModelConfig,
    device: str,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    device_name: str,
    force: bool = False,
    threads: int = 1,
) -> dict[str, Any]:
    """The cached figures for this key, or measure and cache them."""
    key = cache_key(device_name, dtype, model_cfg, micro_batch_size, seq_len, threads)
    shape = (micro_batch_size, seq_len)
    return cached(
        CACHE_FILE, key, lambda: measure(model_cfg, device, dtype, *shape, threads), force
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--model-json", required=True, help="the model config as JSON")
    parser.add_argument("--micro-batch-size", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of one rank")
    parser.add_argument("--device-name", help="cache under this name (default: detected)")
    parser.add_argument("--force", action="store_true", help="measure even when cached")
    args = parser.parse_args(argv)

    from distbench.compose.hardware import _device_name

    model_cfg = ModelConfig(**json.loads(args.model_json))
    name = args.device_name or _device_name(args.device)
    threads = args.threads if args.device == "cpu" else 1
    shape = (args.micro_batch_size, args.seq_len)
    result = cached_or_measured(
        model_cfg, args.device, args.dtype, *shape, name, args.force, threads
    )
    result.update(device=args.device, device_name=name, dtype=args.dtype)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
