"""The gemm workload: C = A @ B split over the ranks (gemm.sharding = rows | cols | k), timed.

First a correctness check: a smaller problem (each dimension capped at gemm.check_max_dim) runs
through the same sharded code and is compared with a float64 single-device reference; the run
fails when max|C - C_ref| / max|C_ref| exceeds the dtype's tolerance. Then warm-up and timed
iterations of the configured problem, each bracketed by a barrier and a device sync, with its
communication and local-compute phases timed apart. gemm.mode=single (world_size=1) runs the
whole problem on one device when it fits, and reports what fits and what sharding would need.

    python run.py workload=gemm gemm.m=4096 gemm.k=4096 gemm.n=4096 gemm.sharding=rows
    python run.py workload=gemm gemm.mode=single world_size=1 gemm.m=65536 gemm.plan_world_size=8
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from distbench.figures.metrics import GIB, mfu_pct, percentile
from distbench.job import Job
from distbench.workloads import Measured
from distbench.workloads.gemm import GemmConfig
from distbench.workloads.gemm import metrics as gm
from distbench.workloads.timing import Progress, slowest_per_iteration, torch_dtype


def available_mem_bytes(device: str, cap_gib: float | None) -> int:
    """Memory one device can give a GEMM: free CUDA memory, or MemAvailable of the host on CPU;
    capped at cap_gib when set."""
    if device == "cuda":
        import torch

        mem = int(torch.cuda.mem_get_info()[0])
    else:
        found = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem = int(found.group(1)) * 1024 if found else 0
    return min(mem, int(cap_gib * GIB)) if cap_gib else mem


def check_error(g: GemmConfig, rank: int, p: int, dtype, device: str, seed: int) -> float:
    """max_rel_err of the sharded (or single) GEMM on the check problem, max over ranks."""
    import torch
    import torch.distributed as dist

    from distbench.workloads.gemm import sharding as sh

    shape = gm.check_shape(g.m, g.k, g.n, p, g.sharding, g.check_max_dim)
    gen = torch.Generator().manual_seed(seed)
    # The check's inputs and its float64 reference live on the host, on purpose.
    full_a = torch.randn(shape["m"], shape["k"], generator=gen, device="cpu").to(dtype)
    full_b = torch.randn(shape["k"], shape["n"], generator=gen, device="cpu").to(dtype)
    reference = full_a.double() @ full_b.double()  # of the rounded inputs: error is compute only
    if g.mode == "single":
        c = torch.empty(shape["m"], shape["n"], dtype=dtype, device=device)
        sh.single_step(full_a.to(device), full_b.to(device), c, device)
    else:
        a, b = sh.shards(full_a.to(device), full_b.to(device), rank, p, g.sharding)
        buf = sh.allocate(a, b, shape["m"], shape["n"], p, g.sharding)
        sh.step(buf, rank, p, device)
        c = buf.c
    abs_err = (c.double().cpu() - reference).abs().max().item()
    # On the device the backend serves: nccl cannot reduce a host tensor.
    err = torch.tensor(
        [gm.max_rel_err(abs_err, reference.abs().max().item())], dtype=torch.float64, device=device
    )
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    return float(err.item())


def run(job: Job, run_dir: Path) -> dict[str, Any]:
    """Check, then time; returns this rank's times (s), error and memory (bytes)."""
    import torch.distributed as dist

    from distbench.ranks import dist as dist_utils
    from distbench.workloads.gemm import sharding as sh

    g, w, device = job.options, job.workload, job.device
    rank, p = dist.get_rank(), dist.get_world_size()
    dtype = torch_dtype(g.dtype)
    err = check_error(g, rank, p, dtype, device, w.seed)
    tolerance = gm.MAX_REL_ERR[g.dtype]
    if err > tolerance:
        raise RuntimeError(
            f"gemm {g.sharding} on {p} ranks: max_rel_err {err:.3g} > {tolerance:g} ({g.dtype})"
        )
    mem_bytes = available_mem_bytes(device, g.mem_cap_gib)
    fits = gm.mem_single_bytes(g.m, g.k, g.n, g.dtype) <= mem_bytes
    figures = {
        "rank": rank,
        "max_rel_err": err,
        "check_shape": gm.check_shape(g.m, g.k, g.n, p, g.sharding, g.check_max_dim),
        "device_mem_bytes": mem_bytes,
        "fits_single_device": fits,
        "run_dir": str(run_dir),
    }
    if g.mode == "single" and not fits:  # does not fit one device: report, don't allocate
        return {**figures, "gemm_times_s": [], "comm_times_s": [], "compute_times_s": []}

    a, b = sh.random_shards(g.m, g.k, g.n, p, g.sharding, dtype, device, w.seed + rank)
    if g.mode == "single":
        c = a.new_empty((g.m, g.n))
        one = lambda: sh.single_step(a, b, c, device)  # noqa: E731
    else:
        buf = sh.allocate(a, b, g.m, g.n, p, g.sharding)
        one = lambda: sh.step(buf, rank, p, device)  # noqa: E731
    dist_utils.reset_peak_memory(device)
    total = w.num_warmup_steps + w.num_steps
    progress = Progress(run_dir, rank, total)
    comm_s, compute_s = [], []
    for i in range(total):
        dist.barrier()
        dist_utils.synchronize(device)
        comm, compute = one()
        progress.point("warmup" if i < w.num_warmup_steps else "timed", comm + compute)
        if i >= w.num_warmup_steps:
            comm_s.append(comm)
            compute_s.append(compute)
    progress.close()
    return {
        **figures,
        "gemm_times_s": [x + y for x, y in zip(comm_s, compute_s, strict=True)],
        "comm_times_s": comm_s,
        "compute_times_s": compute_s,
        "peak_mem_bytes": dist_utils.peak_memory_bytes(device),
    }


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per timed iteration, the slowest rank's total, communication and compute times."""
    out = {k: per_rank[0][k] for k in ("max_rel_err", "check_shape", "run_dir")}
    for key in ("gemm_times_s", "comm_times_s", "compute_times_s"):
        out[key] = slowest_per_iteration([r[key] for r in per_rank])
    out["ranks"] = [
        {k: r.get(k) for k in ("rank", "device_mem_bytes", "fits_single_device", "peak_mem_bytes")}
        for r in per_rank
    ]
    return out


def measure(job: Job, result: dict[str, Any], job_dir: Path | None = None) -> Measured:
    """result.json → gemm metrics (names carry units; s, TFLOP/s, GiB)."""
    g, p = job.options, job.world_size
    m, k, n, dtype = g.m, g.k, g.n, g.dtype
    plan_p = g.plan_world_size if g.mode == "single" else p
    mem_bytes = min(r["device_mem_bytes"] for r in result["ranks"])
    metrics = {
        "max_rel_err": result["max_rel_err"],
        "max_rel_err_tolerance": gm.MAX_REL_ERR[dtype],
        "gemm_flops": gm.gemm_flops(m, k, n),
        "mem_single_gib": gm.mem_single_bytes(m, k, n, dtype) / GIB,
        "mem_per_rank_gib_sharded": gm.mem_per_rank_bytes(m, k, n, plan_p, g.sharding, dtype) / GIB,
        "device_mem_gib": mem_bytes / GIB,
        "max_square_n_fits": float(gm.max_square_n(mem_bytes, dtype)),
        "fits_single_device": float(result["ranks"][0]["fits_single_device"]),
    }
    times = result["gemm_times_s"]
    if not times:
        return Measured(metrics=metrics)
    gemm_p50 = percentile(times, 50)
    comm_p50 = percentile(result["comm_times_s"], 50)
    compute_p50 = percentile(result["compute_times_s"], 50)
    total = gm.tflops(gm.gemm_flops(m, k, n), gemm_p50)
    metrics.update(
        gemm_time_s_p50=gemm_p50,
        gemm_time_s_p90=percentile(times, 90),
        comm_time_s_p50=comm_p50,
        compute_time_s_p50=compute_p50,
        comm_fraction=gm.comm_fraction(comm_p50, gemm_p50),
        tflops_total=total,
        tflops_per_device=total / p,
        compute_tflops_per_device=gm.tflops(gm.gemm_flops(m, k, n) / p, compute_p50),
        peak_mem_gib=max(r["peak_mem_bytes"] for r in result["ranks"]) / GIB,
        num_timed_steps=float(len(times)),
    )
    peak = getattr(job.hardware, f"peak_tflops_{dtype}")
    if peak:
        metrics["mfu_pct"] = mfu_pct(total / p, peak)
    series = [("gemm_time_s", t, i) for i, t in enumerate(times)]
    series += [("comm_time_s", t, i) for i, t in enumerate(result["comm_times_s"])]
    return Measured(metrics=metrics, series=series)
