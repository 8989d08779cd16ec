"""What DeepSpeed ZeRO-3 adds to a training step on the host, measured: its per-module
parameter fetch / release hooks and its optimizer step, which the traced model
(probes/step_parts.py) does not see.

Train's prepare hook (workloads/train/prepare.py) runs this as a subprocess for a ZeRO-3 job on
a GPU (`applies`) under hardware.time_source=measured and reads the last stdout line, one JSON
document; figures/job_terms.py adds its figures (engine_parts) to the predicted step.

The probe builds the job's own engine (engines/deepspeed.initialize: its zero_optimization
block, dtype and precision recipe; offload off, its traffic is the offload term) on one rank of
this machine's device, for the model cut to 1 and 2 layers, on one micro-batch of the job's own
shape, and times, median of ENGINE_TIMED_ITERS after ENGINE_WARMUP_ITERS:
- forward + `engine.backward`, against the bare model's forward + backward at the same cut and
  tokens, the two alternating: the difference is what the engine adds to a micro-batch, mostly
  its hooks' host time, less what of it the device's kernels hide;
- `engine.step()`: the engine's optimizer step, kernels and host together.
The job's own shape, not a token-sized one, because how much of the hooks' time the kernels
hide differs by machine (benchmarks/gpu_runs/2026-11-26_job_shape_probe). The cut runs
unsharded on one device: the engine's states of the embedding, head and 1-2 layers (16 B per
parameter in mixed precision), a bare copy and one micro-batch's activations. Where that does
not fit (the job's ranks shard it), the probe runs at 1 × 16 tokens instead: the hooks' host
time, none of it hidden (`tokens` in its figures says which).
Both are extrapolated linearly to the model's depth (a layer adds the same hooks). On one rank
DeepSpeed gathers nothing (one partition), so the probe times the hooks' bookkeeping, not the
all-gathers: those are the α-β communication term. ZeRO-3 needs it because its hooks, not its
kernels, set a small model's step on a GPU (benchmarks/gpu_runs/2026-11-25_h100).

Cached in engine_parts.json beside step_parts.json (the cuts' figures, extrapolated to a model's
depth when read), keyed by host, device, dtype, precision, optimizer implementation, model shape
but its depth, micro-batch shape, zero_optimization block and (CPU) the rank's threads.

    python -m distbench.workloads.train.engine_probe --job-yaml RUN_DIR/resolved.yaml
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

from distbench.probes import cache, timing
from distbench.probes.step_parts import extrapolate

MODULE = "distbench.workloads.train.engine_probe"  # run as a subprocess: python -m MODULE
ENGINE_TIMED_ITERS = 20
ENGINE_WARMUP_ITERS = 2  # the first step allocates the optimizer's states
CUTS = ("1", "2")  # the depths probed (str: the cache's JSON keys), as step_parts.extrapolate
CACHE_FILE = "engine_parts.json"
CACHE_VERSION = 3  # 3: the job's micro-batch shape (2: 1 x 16 tokens)
# What a probe records: per cut (a str of its depth), the medians in seconds
PROBE_FIELDS = ("forward_backward_s", "bare_forward_backward_s", "step_s")


def applies(job: Any) -> bool:
    """Whether a training job's engine adds host work the trace misses: DeepSpeed ZeRO-3 on a
    GPU (with AutoTP too: ZeRO-3 still partitions and hooks every module; the probe runs it
    without). ZeRO-0, DDP and FSDP are predicted from the traced model alone
    (benchmarks/gpu_runs/2026-11-26_h100); ZeRO-1/2 hook once per gradient bucket and are not
    probed. A CPU job is not probed: its ZeRO-3 steps are predicted within 30 % without it, and
    on a CPU the probe's difference is the size of its timing noise
    (benchmarks/cpu_runs/2026-11-26_measured_time). The probe itself runs on a CPU: its tests
    run it there."""
    return (
        job.device == "cuda"
        and job.engine == "deepspeed"
        and job.layout.zero_stage == 3
        and job.layout.pp == 1
    )


def probe_job(job: Any, num_layers: int, tokens: tuple[int, int] | None = None) -> Any:
    """The job cut to one rank (no tp), `num_layers` layers and one micro-batch of its own
    shape (or `tokens`: micro-batch size, seq_len), random weights, offload off."""
    from distbench.job import Layout

    micro_batch_size, seq_len = tokens or (job.batch.micro_batch_size, job.batch.seq_len)
    return job.replace(
        layout=Layout(world_size=1, dp=1, zero_stage=job.layout.zero_stage),
        model=dataclasses.replace(job.model, num_layers=num_layers, pretrained_path=None),
        batch=dataclasses.replace(
            job.batch, micro_batch_size=micro_batch_size, seq_len=seq_len, grad_accum_steps=1
        ),
        strategy=dataclasses.replace(
            job.strategy, offload_optimizer="none", offload_param="none", tp=1
        ),
    )


def join_one_rank_group(device: str) -> None:
    """A one-rank process group on this machine (the engine needs one). It sets the
    torch.distributed variables in this process's environment: the probe runs as its own
    process (python -m distbench.workloads.train.engine_probe)."""
    import torch.distributed as dist

    from distbench.ranks import dist as dist_utils

    if dist.is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0"}
    os.environ.update({**env, "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    dist_utils.init_process_group(device, "deepspeed")


def cut_seconds(cut: Any) -> dict[str, float]:
    """PROBE_FIELDS' medians of one cut. The engine's and the bare model's iterations alternate,
    so a change in the host's speed while it runs reaches both alike."""
    import torch

    from distbench.engines import deepspeed as ds_engine
    from distbench.ranks.models import build_meta_model

    device = cut.device
    engine = ds_engine.initialize(build_meta_model(cut.model, cut.weights_dtype), cut).engine
    tokens = (cut.batch.micro_batch_size, cut.batch.seq_len)
    ids = torch.zeros(*tokens, dtype=torch.long, device=device)
    bare = timing.bare_forward_backward(cut.model, device, cut.dtype, tokens)
    calls = {
        "forward_backward_s": lambda: engine.backward(engine(input_ids=ids, labels=ids).loss),
        "step_s": engine.step,
        "bare_forward_backward_s": bare,
    }
    times: dict[str, list[float]] = {field: [] for field in PROBE_FIELDS}
    for i in range(ENGINE_WARMUP_ITERS + ENGINE_TIMED_ITERS):
        for field, call in calls.items():
            seconds = timing.timed_s(call, device)
            if i >= ENGINE_WARMUP_ITERS:
                times[field].append(seconds)
    engine.destroy()
    return {field: statistics.median(values) for field, values in times.items()}


def cuts_seconds(job: Any, tokens: tuple[int, int]) -> dict[str, dict[str, float]]:
    """cut_seconds at each of CUTS' depths on `tokens`, freeing each cut's memory after it."""
    per_cut = {}
    for n in CUTS:
        try:
            per_cut[n] = cut_seconds(probe_job(job, int(n), tokens))
        finally:
            free_memory(job.device)
    return per_cut


def free_memory(device: str) -> None:
    """Release a cut's engine and model before the next is built."""
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def probe_engine(job: Any, threads: int = 1) -> dict[str, Any]:
    """Time the engine and the bare model at each of CUTS' depths, on one micro-batch of the
    job's shape; where that does not fit on one unsharded device (the job's ranks shard it),
    on timing.HOST_PROBE_TOKENS: the hooks' host time, none of it hidden. `tokens` says
    which."""
    import torch
    import torch.distributed as dist

    device = job.device
    if device == "cpu":
        torch.set_num_threads(threads)
    join_one_rank_group(device)
    timing.warm_up(device)
    tokens = (job.batch.micro_batch_size, job.batch.seq_len)
    try:
        per_cut = cuts_seconds(job, tokens)
    except torch.OutOfMemoryError:
        per_cut = None
    if per_cut is None:  # outside the except: its traceback no longer holds the cut's tensors
        free_memory(device)
        tokens = timing.HOST_PROBE_TOKENS
        per_cut = cuts_seconds(job, tokens)
    dist.destroy_process_group()
    return {
        **{field: {n: cut[field] for n, cut in per_cut.items()} for field in PROBE_FIELDS},
        "tokens": list(tokens),
        "torch_version": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def engine_parts(probe: dict[str, Any], num_layers: int) -> dict[str, float]:
    """A probe's figures at the model's depth (parts.ENGINE_PARTS_FIELDS): the engine's
    forward + backward beyond the bare model's, and its step, extrapolated linearly from the
    cuts (step_parts.extrapolate), never below 0."""
    extra = [probe["forward_backward_s"][n] - probe["bare_forward_backward_s"][n] for n in CUTS]
    step = [probe["step_s"][n] for n in CUTS]
    return {
        "micro_batch_engine_host_s": max(extrapolate(*extra, num_layers), 0.0),
        "engine_step_s": max(extrapolate(*step, num_layers), 0.0),
    }


def cache_key(job: Any, device_name: str, threads: int = 1) -> str:
    """What the probe's figures depend on: the model's shape but its depth (the cuts are fixed),
    the micro-batch's shape, the zero_optimization block, the precision recipe and the
    optimizer's implementation."""
    shape = dataclasses.asdict(job.model)
    for unused in ("pretrained_path", "name", "num_layers"):
        shape.pop(unused, None)
    parts = {
        "model": shape,
        "tokens": [job.batch.micro_batch_size, job.batch.seq_len],
        "zero_optimization": job.zero_optimization or {},
        "precision": job.precision,
        "optimizer_impl": job.optimizer_impl,
    }
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return (
        f"v{CACHE_VERSION}|{socket.gethostname()}|{device_name}|{job.dtype}|{blob}"
        f"|threads={threads}"
    )


def is_probe(entry: Any) -> bool:
    """Whether a cache entry holds a whole probe (an older or a damaged one is measured again)."""
    return isinstance(entry, dict) and all(
        isinstance(entry.get(field), dict) and all(str(n) in entry[field] for n in CUTS)
        for field in PROBE_FIELDS
    )


def cached_probe(job: Any, device_name: str, threads: int = 1) -> dict[str, Any] | None:
    """The cached probe of this job's engine, if a whole one is cached."""
    return cache.cached_entry(CACHE_FILE, cache_key(job, device_name, threads), is_probe)


def cached_or_measured(
    job: Any, device_name: str, threads: int = 1, force: bool = False
) -> dict[str, Any]:
    """The cached figures for this job's engine, or measure and cache them (in this process)."""
    key = cache_key(job, device_name, threads)
    return cache.cached(CACHE_FILE, key, lambda: probe_engine(job, threads), force, valid=is_probe)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-yaml", required=True, help="the job, as resolved.yaml holds it")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of one rank")
    parser.add_argument("--device-name", help="cache under this name (default: detected)")
    parser.add_argument("--force", action="store_true", help="measure even when cached")
    args = parser.parse_args(argv)

    from omegaconf import OmegaConf

    from distbench.job import Job
    from distbench.probes.detect import device_name

    job = Job.from_tree(OmegaConf.to_container(OmegaConf.load(args.job_yaml)))
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if job.device == "cuda" else "cpu")
    name = args.device_name or device_name(job.device)
    threads = args.threads if job.device == "cpu" else 1
    result = cached_or_measured(job, name, threads, args.force)
    at_depth = engine_parts(result, job.model.num_layers)
    print(json.dumps({**result, **at_depth, "device_name": name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
