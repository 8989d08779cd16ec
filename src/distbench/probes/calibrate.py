"""Measure this device's peak TFLOP/s for one dtype with a timed large GEMM, and cache it.

`hardware.peak_source=measured` asks `measured_peak_tflops()` (from distbench/prepare.py),
which reads the cache or runs this module as a subprocess (the caller never imports torch) and
reads its last stdout line, one JSON document. C = A @ B with square n × n operands costs
2·n³ FLOPs. Warm-up first (allocator, kernel/library selection, CPU frequency ramp), then at
least 10 timed iterations, each bracketed by a device sync. The figure is the **best** iteration
(shortest time), not the median: a peak is what the device can do, and on a machine shared
with other processes noise only ever adds time, so the fastest iteration is the least disturbed
one; the median is reported next to it. On CPU the GEMM runs on `--threads` threads (1: one
rank = one core, as distbench runs ranks). n shrinks from `--size` until one GEMM takes under
`--max-iter-s`, so a slow dtype (bf16 on a core without AVX512-BF16) stays quick.

Cached in peak_tflops.json of the probes' cache folder (probes/cache.py), keyed by host, device
name, dtype and threads; `--force` measures again.

    python -m distbench.probes.calibrate --device cpu --dtype fp32 --threads 1
    python -m distbench.probes.calibrate --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from numbers import Real
from typing import Any

from distbench.probes import cache, runner

MODULE = "distbench.probes.calibrate"  # run as a subprocess: python -m MODULE
CACHE_FILE = "peak_tflops.json"
MIN_TIMED_ITERS = 10
DEFAULT_SIZE = {"cpu": 2048, "cuda": 8192}
MIN_SIZE = 256
# What `hardware.peak_source=measured` calibrates when no dtype is named, per device.
CALIBRATED_DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}


def cache_key(device_name: str, dtype: str, threads: int, host: str | None = None) -> str:
    return f"{host or socket.gethostname()}|{device_name}|{dtype}|threads={threads}"


def _is_peak(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("tflops"), Real)


def cached_peak(device_name: str, dtype: str, threads: int) -> float | None:
    """The cached peak TFLOP/s of this host's device for dtype and threads, if measured."""
    entry = cache.cached_entry(CACHE_FILE, cache_key(device_name, dtype, threads), _is_peak)
    return float(entry["tflops"]) if entry else None


def store_peak(device_name: str, dtype: str, threads: int, result: dict[str, Any]) -> None:
    """Add one measurement to the cache (a lock: several jobs may calibrate at once)."""
    cache.store(CACHE_FILE, cache_key(device_name, dtype, threads), result)


def measured_peak_tflops(
    device: str, dtype: str, threads: int, device_name: str, timeout_s: float = 600.0
) -> float:
    """This machine's peak TFLOP/s for dtype: the cache's, else a `python -m
    distbench.probes.calibrate` subprocess. Raises runner.NotMeasured under cache_only()
    without an entry, one of runner.PROBE_ERRORS when the calibration fails."""
    cached = cached_peak(device_name, dtype, threads)
    if cached is not None:
        return cached
    args = ["-m", MODULE, "--device", device, "--dtype", dtype]
    args += ["--threads", str(threads), "--device-name", device_name]
    env = dict(os.environ, OMP_NUM_THREADS=str(max(threads, 1)))
    return float(runner.run_probe(args, env, timeout_s)["tflops"])


def gemm_tflops(n: int, seconds: float) -> float:
    """TFLOP/s of one n × n × n GEMM (2·n³ FLOPs: a multiply and an add per product)."""
    return 2.0 * n**3 / seconds / 1e12


def time_peak_gemm(
    device: str, dtype: str, threads: int, size: int, iters: int, max_iter_s: float
) -> dict[str, Any]:
    """Time `iters` GEMMs after warm-up; returns the best and median TFLOP/s and the size."""
    import torch

    if iters < MIN_TIMED_ITERS:
        raise ValueError(f"iters={iters} must be >= {MIN_TIMED_ITERS}")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    if device == "cpu" and threads > 0:
        torch.set_num_threads(threads)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 peak, not TF32's

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(a: Any, b: Any) -> float:
        sync()
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        return time.perf_counter() - start

    n = size
    while True:
        a = torch.randn(n, n, device=device).to(torch_dtype)
        b = torch.randn(n, n, device=device).to(torch_dtype)
        first = timed(a, b)  # warm-up 1: allocation, kernel choice
        if first <= max_iter_s or n <= MIN_SIZE:
            break
        n //= 2
    for _ in range(2):  # warm-up 2, 3: caches and clocks settle
        timed(a, b)
    times = [timed(a, b) for _ in range(iters)]
    return {
        "tflops": gemm_tflops(n, min(times)),
        "median_tflops": gemm_tflops(n, statistics.median(times)),
        "size": n,
        "num_iters": iters,
        "statistic": "best",
        "torch_version": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    parser.add_argument("--size", type=int, help="n of the n×n GEMM (default cpu 2048, cuda 8192)")
    parser.add_argument("--iters", type=int, default=MIN_TIMED_ITERS)
    parser.add_argument("--max-iter-s", type=float, default=1.0, help="shrink n above this")
    parser.add_argument("--device-name", help="cache under this name (default: detected)")
    parser.add_argument("--force", action="store_true", help="measure even when cached")
    args = parser.parse_args(argv)

    from distbench.probes.detect import device_name

    name = args.device_name or device_name(args.device)
    cached = None if args.force else cached_peak(name, args.dtype, args.threads)
    if cached is not None:
        result = {"tflops": cached, "cached": True}
    else:
        size = args.size or DEFAULT_SIZE[args.device]
        result = time_peak_gemm(
            args.device, args.dtype, args.threads, size, args.iters, args.max_iter_s
        )
        store_peak(name, args.dtype, args.threads, result)
        result["cached"] = False
    result.update(device=args.device, device_name=name, dtype=args.dtype, threads=args.threads)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
