"""A training micro-batch's time from measured parts: the model's own operations, traced on the
meta device, priced with rates timed on this machine's device, and cached.

`hardware.time_source=measured` runs this as a subprocess at compose time (the orchestrator
never imports torch) and reads the last stdout line, one JSON document; figures/analytic.py's
`measured_compute_s` turns it into the compute term of the predicted step.

The parts, for one micro-batch (forward + backward, the optimizer apart):
- **the trace**: the real transformers model, built on the meta device (nothing allocated),
  runs forward and backward under a TorchDispatchMode that records every aten operation: each
  GEMM's shape (mm, addmm, bmm, baddbmm), every other kernel's bytes read and written, and the
  number of kernels (views launch none). Traced with 1 and 2 layers and extrapolated linearly to
  the model's depth (a layer adds the same operations), so a 70B model traces in seconds.
- **the device's rates**: each distinct GEMM shape timed on the device in the run's dtype (the
  rate at the model's shapes, not one square GEMM's); the memory bandwidth of a large copy; the
  shortest time a small kernel occupies the device (CUDA events around 500 queued tiny kernels).
- **the host**: the same model cut to 2 layers, run on the device at 1 × 16 tokens (too small to
  keep a GPU busy), timed per traced kernel: what Python, autograd and the dispatcher cost per
  kernel launched. On a GPU a micro-batch takes the longer of its device time and its host time
  (the host queues kernels ahead, the device runs them); on a CPU the two add up.

device_s = Σ GEMM time at its timed shape + Σ max(bytes / bandwidth, kernel floor) of the rest;
host_s = kernels × host time per kernel. Not counted: what an engine adds (DDP and DeepSpeed hooks,
ZeRO-3's gathers and their host time), autocast's weight casts, the attention kernel's own
speed (meta runs SDPA's math path; its FLOPs and bytes are counted).

Cached in ~/.cache/distbench/step_parts.json ($DISTBENCH_CACHE_DIR overrides the folder), keyed by
host, device name, dtype, model shape and batch shape; `--force` measures again.

    python -m distbench.compose.step_parts --device cuda --dtype bf16 \
        --model-json '{"name": "llama_1b", ...}' --micro-batch-size 4 --seq-len 512
"""

from __future__ import annotations

import argparse
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
    {"_unsafe_view", "detach", "alias", "lift_fresh", "empty", "empty_strided", "empty_like"}
)
HOST_PROBE_TOKENS = (1, 16)  # micro-batch size, seq_len of the host-time probe
GEMM_TIMED_ITERS = 5
# On a CPU a GEMM shape is timed with its first dimension cut so one call stays near this.
CPU_GEMM_PROBE_FLOPS = 2e9
CACHE_FILE = "step_parts.json"
CACHE_VERSION = 1


@dataclass
class Trace:
    """What one forward + backward of a micro-batch launches: GEMM shapes (batch, m, k, n)
    with their counts, the bytes each other kernel reads and writes, and the kernel count."""

    gemms: Counter = field(default_factory=Counter)
    other_bytes: list[int] = field(default_factory=list)

    @property
    def num_kernels(self) -> int:
        return sum(self.gemms.values()) + len(self.other_bytes)


def gemm_flops(shape: tuple[int, int, int, int]) -> float:
    """FLOPs of a (batch, m, k, n) GEMM: a multiply and an add per product."""
    batch, m, k, n = shape
    return 2.0 * batch * m * k * n


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
    with Recorder():
        model(input_ids=ids, labels=ids).loss.backward()
    return trace


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _best_s(fn: Any, device: str, iters: int = GEMM_TIMED_ITERS) -> float:
    """Shortest of `iters` timed calls after one warm-up, each bracketed by a device sync."""
    fn()
    times = []
    for _ in range(iters):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


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


def copy_bandwidth_gbps(device: str) -> float:
    """GB/s of a large device copy, bytes read + written (STREAM's copy counts both)."""
    import torch

    num_bytes = (1 << 30) if device == "cuda" else (1 << 27)
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * num_bytes / _best_s(lambda: dst.copy_(src), device) / 1e9


def kernel_floor_s(device: str) -> float:
    """The device time of a tiny kernel (CUDA): a long GEMM is queued first so that the host
    runs ahead, then 500 one-element adds between two events. 0 on a CPU (no separate device)."""
    if device != "cuda":
        return 0.0
    import torch

    x = torch.zeros(1, device="cuda")
    big = torch.randn(4096, 4096, device="cuda")
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


def host_seconds(model_cfg: ModelConfig, device: str, dtype: str) -> float:
    """Wall seconds of forward + backward of the 2-layer model at HOST_PROBE_TOKENS on the
    device (weights zero: values do not change the time; the median of 5)."""
    import torch

    from distbench.ranks.models import _reset_buffers, build_meta_model

    model = build_meta_model(dataclasses.replace(model_cfg, num_layers=2), dtype)
    model.to_empty(device=device)
    if model_cfg.tie_word_embeddings:  # to_empty gives the head its own copy: tie it again
        model.tie_weights()
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    _reset_buffers(model)  # the rotary tables, as the runs build them
    ids = torch.zeros(*HOST_PROBE_TOKENS, dtype=torch.long, device=device)

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    return statistics.median(_best_s(step, device, iters=1) for _ in range(5))


def device_seconds(
    trace: Trace, gemm_s: dict[tuple, float], bandwidth_gbps: float, floor_s: float
) -> tuple[float, float]:
    """(GEMM seconds, other kernels' seconds) of a trace on the device."""
    gemm_total = sum(count * gemm_s[shape] for shape, count in trace.gemms.items())
    other = sum(max(b / (bandwidth_gbps * 1e9), floor_s) for b in trace.other_bytes)
    return gemm_total, other


def extrapolate(at_1: float, at_2: float, num_layers: float) -> float:
    """A per-micro-batch quantity at `num_layers` from its values at 1 and 2 layers."""
    return at_1 + (num_layers - 1) * (at_2 - at_1)


def measure(
    model_cfg: ModelConfig, device: str, dtype: str, micro_batch_size: int, seq_len: int
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
        torch.set_num_threads(1)  # one rank = one core, as distbench runs CPU ranks
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    shapes = set(traces[1].gemms) | set(traces[2].gemms) | set(probe_trace.gemms)
    gemm_s = {shape: gemm_seconds(shape, device, dtype) for shape in sorted(shapes)}
    bandwidth = copy_bandwidth_gbps(device)
    floor = kernel_floor_s(device)
    probe_wall = host_seconds(model_cfg, device, dtype)
    # On a CPU the probe's wall time includes its own compute; on a GPU it is the host's.
    probe_device = sum(device_seconds(probe_trace, gemm_s, bandwidth, floor))
    probe_host = probe_wall - probe_device if device == "cpu" else probe_wall
    host_per_kernel = max(probe_host, 0.0) / probe_trace.num_kernels
    parts = {n: device_seconds(traces[n], gemm_s, bandwidth, floor) for n in (1, 2)}
    layers = model_cfg.num_layers
    gemm_total = extrapolate(parts[1][0], parts[2][0], layers)
    other_total = extrapolate(parts[1][1], parts[2][1], layers)
    kernels = extrapolate(traces[1].num_kernels, traces[2].num_kernels, layers)
    gemm_flops_total = extrapolate(
        *(sum(c * gemm_flops(s) for s, c in traces[n].gemms.items()) for n in (1, 2)), layers
    )
    return {
        "micro_batch_gemm_s": gemm_total,
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
    device_name: str, dtype: str, model_cfg: ModelConfig, micro_batch_size: int, seq_len: int
) -> str:
    shape = {k: v for k, v in dataclasses.asdict(model_cfg).items() if k != "pretrained_path"}
    shape.pop("name", None)
    model = json.dumps(shape, sort_keys=True, separators=(",", ":"))
    return (
        f"v{CACHE_VERSION}|{socket.gethostname()}|{device_name}|{dtype}|{model}"
        f"|b={micro_batch_size}|s={seq_len}"
    )


def cached_or_measured(
    model_cfg: ModelConfig,
    device: str,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    device_name: str,
    force: bool = False,
) -> dict[str, Any]:
    """The cached figures for this key, or measure and cache them (a lock: jobs may overlap)."""
    path = cache_path().with_name(CACHE_FILE)
    key = cache_key(device_name, dtype, model_cfg, micro_batch_size, seq_len)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / "step_parts.lock"):
        try:
            cache = json.loads(path.read_text())
        except (OSError, ValueError):
            cache = {}
        if key in cache and not force:
            return {**cache[key], "cached": True}
        result = measure(model_cfg, device, dtype, micro_batch_size, seq_len)
        cache[key] = result
        write_json_atomic(path, dict(sorted(cache.items())))
    return {**result, "cached": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--model-json", required=True, help="the model config as JSON")
    parser.add_argument("--micro-batch-size", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--device-name", help="cache under this name (default: detected)")
    parser.add_argument("--force", action="store_true", help="measure even when cached")
    args = parser.parse_args(argv)

    from distbench.compose.hardware import _device_name

    model_cfg = ModelConfig(**json.loads(args.model_json))
    name = args.device_name or _device_name(args.device)
    result = cached_or_measured(
        model_cfg, args.device, args.dtype, args.micro_batch_size, args.seq_len, name, args.force
    )
    result.update(device=args.device, device_name=name, dtype=args.dtype)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
