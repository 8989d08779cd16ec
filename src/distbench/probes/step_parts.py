"""A training micro-batch's time from measured parts: the model's own operations, traced on the
meta device (probes/trace.py), priced with rates timed on this machine's device
(probes/timing.py), and cached.

A workload's prepare hook (train: workloads/train/prepare.py) asks `measured_step_parts()`,
which reads the cache or runs this module as a subprocess (the caller never imports torch) and
returns the typed `MeasuredParts`; figures/step_time.py's `measured_compute_s` turns them into
the compute term of the predicted step.

The parts, for one micro-batch (forward + backward, the optimizer apart):
- **the trace**, with 1 and 2 layers, extrapolated linearly to the model's depth (a layer adds
  the same operations), so a 70B model traces in seconds;
- **the device's rates**: each distinct GEMM shape timed in the run's dtype (the rate at the
  model's shapes, not one square GEMM's); each attention shape's SDPA forward and backward; the
  memory bandwidth of a large copy; the shortest time a small kernel occupies the device;
- **the host**: the same model cut to 2 layers, run on the device at 1 × 16 tokens (too small to
  keep a GPU busy), timed per traced kernel: what Python, autograd and the dispatcher cost per
  kernel launched. On a GPU a micro-batch takes the longer of its device time and its host time
  (the host queues kernels ahead, the device runs them); on a CPU the two add up;
- **on a CPU, the whole micro-batch**: the bare model run at the job's shape; every part is
  scaled by its time over the priced sum (`cpu_direct_over_parts`), since kernels timed one at a
  time, hot in cache, miss what a real step pays (`cpu_direct_figures`). A run predicted from
  cached parts times that micro-batch again once its ranks have exited (`direct_after_run`):
  a shared CPU host's speed moves by a third within minutes, the parts are scaled to its speed
  during the run.

device_s = Σ GEMM time at its timed shape + Σ attention time at its timed shape
         + Σ max(bytes / bandwidth, kernel floor) of the rest;
host_s = kernels × host time per kernel. Not counted: what an engine adds (DDP and DeepSpeed
hooks; ZeRO-3's are probed apart on a GPU, workloads/train/engine_probe.py), autocast's casts.

Cached in step_parts.json of the probes' cache folder (probes/cache.py), keyed by host, device
name, dtype, model shape, batch shape and (CPU) the rank's threads: the cores the launcher gives
each rank (OMP_NUM_THREADS = cores // ranks on the machine); `--force` measures again. A
measurement started while other tasks wanted the cores its threads run on (probes/host_load.py's
rule for a job's start) is another machine's: it is returned with `busy_host` saying why, used by
the process that asked (every layout of one `distbench plan`), and not cached, so the next job
measures again. Load that arrives after the timing started is not seen.

    python -m distbench.probes.step_parts --device cuda --dtype bf16 \\
        --model-json '{"name": "llama_1b", ...}' --micro-batch-size 4 --seq-len 512
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import time
from numbers import Real
from typing import Any

from distbench.compose.schema import ModelConfig
from distbench.probes import cache, host_load, runner
from distbench.probes.detect import num_cpu_cores
from distbench.probes.parts import (
    CPU_DIRECT_FIELD,
    CPU_DIRECT_SCALED_FIELDS,
    MeasuredParts,
    is_step_parts,
)
from distbench.probes.timing import (
    HOST_PROBE_TOKENS,
    attention_seconds,
    copy_bandwidth_gbps,
    gemm_seconds,
    host_seconds,
    kernel_floor_s,
    warm_up,
)
from distbench.probes.trace import Trace, gemm_flops, trace_micro_batch

MODULE = "distbench.probes.step_parts"  # run as a subprocess: python -m MODULE
CACHE_FILE = "step_parts.json"
CACHE_VERSION = 3  # 3: CPU parts scaled to the directly timed micro-batch
# the longest a CPU micro-batch run whole may be priced at (cpu_direct_figures runs it 4 times)
DIRECT_PROBE_RUN_S = 5.0


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


def device_rates(traces: tuple[Trace, ...], device: str, dtype: str) -> tuple:
    """(GEMM seconds by shape, attention (forward, backward) seconds by shape, copy bandwidth
    GB/s, kernel floor s): what device_seconds prices the traces with."""
    shapes = set().union(*(t.gemms for t in traces))
    gemm_s = {shape: gemm_seconds(shape, device, dtype) for shape in sorted(shapes)}
    calls = set().union(
        *(t.attention_forward for t in traces), *(t.attention_backward for t in traces)
    )
    attention_s = {shape: attention_seconds(shape, device, dtype) for shape in sorted(calls)}
    return gemm_s, attention_s, copy_bandwidth_gbps(device), kernel_floor_s(device)


def time_step_parts(
    model_cfg: ModelConfig,
    device: str,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    threads: int = 1,
) -> dict[str, Any]:
    """Trace, time the parts, and combine them into one micro-batch's figures."""
    import torch

    def traced(num_layers: int, tokens: tuple[int, int]) -> Trace:
        return trace_micro_batch(
            dataclasses.replace(model_cfg, num_layers=num_layers), dtype, *tokens
        )

    traces = {n: traced(n, (micro_batch_size, seq_len)) for n in (1, 2)}
    probe_trace = traced(2, HOST_PROBE_TOKENS)
    if device == "cpu":
        torch.set_num_threads(threads)  # a rank's share of the cores, as the launcher gives it
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    warm_up(device)
    rates = device_rates((traces[1], traces[2], probe_trace), device, dtype)
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
    gemm_tflops = gemm_flops_total / gemm_total / 1e12 if gemm_total else None
    direct: dict[str, Any] = {}
    if device == "cpu":
        priced_s = tuple(sum(parts[n]) + traces[n].num_kernels * host_per_kernel for n in (1, 2))
        direct = cpu_direct_figures(model_cfg, dtype, (micro_batch_size, seq_len), priced_s)
    scale = direct.get(CPU_DIRECT_FIELD) or 1.0
    figures = {
        "micro_batch_gemm_s": gemm_total,
        "micro_batch_attention_s": attention_total,
        "micro_batch_other_s": other_total,
        "micro_batch_host_s": kernels * host_per_kernel,
        "kernels_per_micro_batch": round(kernels),
        "host_us_per_kernel": host_per_kernel * 1e6,
        "kernel_floor_us": rates[3] * 1e6,
        "measured_mem_bandwidth_gbps": rates[2],
        "gemm_tflops_at_shapes": gemm_tflops,  # as timed, before cpu_direct_over_parts
        "torch_version": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **direct,
    }
    return {**figures, **{f: figures[f] * scale for f in CPU_DIRECT_SCALED_FIELDS}}


def direct_probe_bytes(model_cfg: ModelConfig, dtype: str, tokens: tuple[int, int]) -> float:
    """What the bare model's micro-batch holds at its peak: weights and gradients, every
    layer's saved activations and the loss's fp32 logits (figures/activations.py)."""
    from distbench.figures.activations import hf_activation_bytes_per_layer, loss_logits_bytes
    from distbench.figures.metrics import BYTES_PER_DTYPE
    from distbench.figures.params import param_split

    micro_batch_size, seq_len = tokens
    dtype_bytes = BYTES_PER_DTYPE[dtype]
    layer = hf_activation_bytes_per_layer(
        model_cfg.family,
        seq_len,
        micro_batch_size,
        model_cfg.hidden_size,
        model_cfg.intermediate_size,
        model_cfg.num_heads,
        dtype_bytes=dtype_bytes,
        attention_scores_stored=model_cfg.attn_implementation == "eager",
    )
    weights_and_grads = 2 * dtype_bytes * param_split(model_cfg).total
    logits = loss_logits_bytes(seq_len, micro_batch_size, model_cfg.vocab_size)
    return weights_and_grads + model_cfg.num_layers * layer + logits


def direct_probe_layers(
    priced_s: tuple[float, float], num_layers: int, budget_s: float = DIRECT_PROBE_RUN_S
) -> int:
    """The most layers (up to the model's) whose micro-batch is priced within `budget_s`, from
    its price at 1 and 2 layers; 0 when one layer is over it."""
    at_1, at_2 = priced_s
    if at_1 > budget_s:
        return 0
    per_layer = at_2 - at_1
    if per_layer <= 0:
        return num_layers
    return min(num_layers, 1 + int((budget_s - at_1) / per_layer))


def cpu_direct_figures(
    model_cfg: ModelConfig,
    dtype: str,
    tokens: tuple[int, int],
    priced_s: tuple[float, float],
    available_bytes: float | None = None,
) -> dict[str, Any]:
    """On a CPU the kernels timed one at a time, hot in cache, price a micro-batch below what
    the model runs in (fresh allocations, first-touch page faults, operands from memory): 1.2x
    below on this VM's evenings (benchmarks/cpu_runs/README.md). The bare model, at its depth or
    cut to what `direct_probe_layers` allows in DIRECT_PROBE_RUN_S, is run at the job's
    micro-batch, and its time over its priced one (`priced_s`: at 1 and 2 layers) scales every
    part (`cpu_direct_over_parts`). Skipped (`cpu_direct_skipped`, the parts as priced) where
    one layer is priced over that budget, the micro-batch would take over half the memory
    available (`available_bytes`, else the kernel's MemAvailable now), or it fails."""
    import psutil

    from distbench.probes.timing import micro_batch_seconds

    layers = direct_probe_layers(priced_s, model_cfg.num_layers)
    if not layers:
        return {"cpu_direct_skipped": f"one layer is priced {priced_s[0]:.1f} s a micro-batch"}
    model = dataclasses.replace(model_cfg, num_layers=layers)
    needed = direct_probe_bytes(model, dtype, tokens)
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    if needed > available / 2:
        gib = 2**30
        return {"cpu_direct_skipped": f"needs {needed / gib:.1f} of {available / gib:.1f} GiB free"}
    try:
        direct_s = micro_batch_seconds(model, "cpu", dtype, tokens)
    except (RuntimeError, MemoryError) as exc:  # the parts as priced are still the figures
        return {"cpu_direct_skipped": f"{type(exc).__name__}: {exc}"[:300]}
    priced = extrapolate(*priced_s, layers)
    return {
        "direct_probe_layers": layers,
        "micro_batch_direct_s": direct_s,
        "micro_batch_priced_s": priced,
        CPU_DIRECT_FIELD: direct_s / priced,
    }


def direct_after_run(
    model_cfg: ModelConfig,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    *,
    device_name: str,
    threads: int = 1,
    timeout_s: float = 300.0,
) -> tuple[float, dict[str, Any]] | None:
    """(the bare micro-batch's seconds now, the parts' figures it was run beside): the cached
    (or busy-host) entry of this shape on a CPU, its micro-batch run whole again at the same
    depth in a `python -m distbench.probes.step_parts --direct-layers N` subprocess, uncached.
    None when the entry ran no whole micro-batch. runner.PROBE_ERRORS when the probe fails."""
    key = cache_key(device_name, dtype, model_cfg, micro_batch_size, seq_len, threads)
    entry = _entry(key)
    layers = (entry or {}).get("direct_probe_layers")
    if not isinstance(layers, int) or not _positive(entry.get("micro_batch_direct_s")):
        return None
    # on the rank's threads, as the cached micro-batch ran (time_step_parts)
    args, env = _probe_command(model_cfg, dtype, (micro_batch_size, seq_len), "cpu", threads)
    now_s = runner.run_probe([*args, "--direct-layers", str(layers)], env, timeout_s).get(
        "micro_batch_direct_s"
    )
    if not _positive(now_s):
        raise ValueError(f"step_parts --direct-layers printed no time: {now_s!r}")
    return float(now_s), entry


def _positive(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and value > 0


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
    """The cached figures for this key, or measure them (in this process) and cache them
    unless the host was busy (`busy_host`)."""
    key = cache_key(device_name, dtype, model_cfg, micro_batch_size, seq_len, threads)
    shape = (micro_batch_size, seq_len)
    # the host threads the probe keeps busy: its rank's share of the cores on a CPU, one on a GPU
    host_threads = threads if device == "cpu" else 1

    def measure() -> dict[str, Any]:
        reason = busy_host_reason(host_threads, num_cpu_cores(), host_load.sample())
        figures = time_step_parts(model_cfg, device, dtype, *shape, threads)
        return {**figures, "busy_host": reason} if reason else figures

    return cache.cached(
        CACHE_FILE, key, measure, force, valid=is_step_parts, keep=lambda f: "busy_host" not in f
    )


def busy_host_reason(
    host_threads: int, usable_cores: int, start: host_load.HostSample | None
) -> str | None:
    """Why a probe of `host_threads` threads started on a busy host (host_load.start_reasons:
    other runnable tasks leave its threads less than a core each), or None."""
    reasons = host_load.start_reasons(host_threads, usable_cores, start, workers="thread")
    return "; ".join(reasons) or None


# cache key -> why its measurement failed (runner.once): not retried for each layout
_FAILED: dict[str, str] = {}
# cache key -> figures measured on a busy host: not cached, but not measured again for each
# layout of one `distbench plan` either
_BUSY: dict[str, dict[str, Any]] = {}


def measured_step_parts(
    model_cfg: ModelConfig,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    *,
    device: str,
    device_name: str,
    threads: int = 1,
    timeout_s: float = 600.0,
) -> MeasuredParts:
    """This micro-batch's parts on this machine's device: the cache's, else a `python -m
    distbench.probes.step_parts` subprocess (it caches them). Raises runner.NotMeasured under
    cache_only() without an entry, runner.ProbeFailed when the probe failed (now or before)."""
    key = cache_key(device_name, dtype, model_cfg, micro_batch_size, seq_len, threads)
    figures = _entry(key)
    if figures is None:
        args, env = _probe_command(model_cfg, dtype, (micro_batch_size, seq_len), device, threads)
        args += ["--device-name", device_name]
        if runner.probing_allowed() and key not in _FAILED:  # a log says what the wait is
            print(
                f"distbench: timing the step parts of a {micro_batch_size} x {seq_len} "
                f"{dtype} micro-batch on {device_name} (once per shape, then cached) ...",
                file=sys.stderr,
                flush=True,
            )
        figures = runner.once(_FAILED, key, lambda: _probed(args, env, timeout_s))
        if figures.get("busy_host"):
            _BUSY[key] = figures
            print(
                f"distbench: the host was busy when the step parts' timing started "
                f"({figures['busy_host']}): this process's predictions of that shape use them, "
                "the cache does not keep them",
                file=sys.stderr,
                flush=True,
            )
    return MeasuredParts.from_figures(figures)


def _entry(key: str) -> dict[str, Any] | None:
    """The cached figures of `key`, else those this process measured on a busy host, else None."""
    return cache.cached_entry(CACHE_FILE, key, is_step_parts) or _BUSY.get(key)


def _probe_command(
    model_cfg: ModelConfig, dtype: str, tokens: tuple[int, int], device: str, threads: int
) -> tuple[list[str], dict[str, str] | None]:
    """The `python -m distbench.probes.step_parts` arguments for this shape, and its
    environment: a CPU probe gets the rank's threads (OMP_NUM_THREADS)."""
    args = ["-m", MODULE, "--device", device, "--dtype", dtype]
    args += ["--model-json", json.dumps(dataclasses.asdict(model_cfg))]
    args += ["--micro-batch-size", str(tokens[0]), "--seq-len", str(tokens[1])]
    args += ["--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if device == "cpu" else None
    return args, env


def _probed(args: list[str], env: dict[str, str] | None, timeout_s: float) -> dict[str, Any]:
    figures = runner.run_probe(args, env, timeout_s)
    if not is_step_parts(figures):
        raise ValueError(f"step_parts printed no parts: {sorted(figures)}")
    return figures


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
    parser.add_argument(
        "--direct-layers",
        type=int,
        help="CPU: only run the bare model, cut to this many layers, whole (uncached)",
    )
    args = parser.parse_args(argv)

    from distbench.probes.detect import device_name

    model_cfg = ModelConfig(**json.loads(args.model_json))
    if args.direct_layers:
        import torch

        from distbench.probes.timing import micro_batch_seconds

        torch.set_num_threads(args.threads)
        cut = dataclasses.replace(model_cfg, num_layers=args.direct_layers)
        shape = (args.micro_batch_size, args.seq_len)
        direct_s = micro_batch_seconds(cut, "cpu", args.dtype, shape)
        print(json.dumps({"micro_batch_direct_s": direct_s}))
        return 0
    name = args.device_name or device_name(args.device)
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
