"""The collectives workload: nccl-tests' sweep in torch.distributed, tracked in MLflow.

For each collective in collectives.ops and each message size (collectives.min_bytes × factor^i
up to max_bytes; max_bytes=null: 4 MiB on CPU, 256 MiB on GPU): one checked call (the result
compared in place with its expected values; a wrong result fails the run), then
workload.num_warmup_steps untimed and workload.num_steps timed calls, each bracketed by a
barrier and a device sync; a call lasts as long as its slowest rank. A collective the backend
lacks (or listed in collectives.emulate) runs as its standard equivalent, recorded in
result.json's `emulated`, the CSV's `implementation` column and the `emulated.<op>` metric.
Rank 0's progress line per (collective, size) carries its size and busbw; at the end the run
prints nccl-tests' table (collectives.txt) and logs nccl-tests' average bus bandwidth
(`busbw_gbps_avg.<op>`, and `busbw_gbps_avg` over every collective and size).

    python run.py workload=collectives world_size=2
    python run.py -m workload=collectives world_size=2,4 collectives.max_bytes=67108864
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distbench.figures.metrics import BYTES_PER_DTYPE, percentile
from distbench.job import Job
from distbench.workloads import Measured
from distbench.workloads.collectives import metrics as cm
from distbench.workloads.collectives.report import nccl_table, plot_busbw, write_csv
from distbench.workloads.timing import Progress, slowest_per_iteration, time_iterations, torch_dtype

CSV_NAME = "collectives.csv"
PNG_NAME = "collectives_busbw.png"
TABLE_NAME = "collectives.txt"  # nccl-tests' table, printed at the end of the run


def _ops_to_run(ops: list[str], n: int) -> tuple[list[str], dict[str, str]]:
    """The collectives that can run on n ranks, and the skipped ones with why."""
    skipped = {"send_recv": "a ring needs >= 2 ranks"} if n < 2 and "send_recv" in ops else {}
    return [op for op in ops if op not in skipped], skipped


def run(job: Job, run_dir: Path) -> dict[str, Any]:
    """Check and time every (collective, size); returns this rank's times in s."""
    import torch.distributed as dist

    from distbench.workloads.collectives import ops as co

    c, w, device = job.options, job.workload, job.device
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype, element_bytes = torch_dtype(c.dtype), BYTES_PER_DTYPE[c.dtype]
    sizes = cm.message_sizes(c.min_bytes, c.max_bytes or cm.default_max_bytes(device), c.factor)
    ops, skipped = _ops_to_run(list(c.ops), n)
    emulated = {
        op: co.EMULATIONS[op]
        for op in ops
        if op in co.EMULATIONS and (op in c.emulate or not co.native_supported(op, device))
    }
    if rank == 0 and emulated:
        print(f"distbench collectives: emulated on {dist.get_backend()}: {emulated}", flush=True)
    progress = Progress(run_dir, rank, len(ops) * len(sizes))
    points = []
    for op in ops:
        for size in sizes:
            count = cm.element_count(size, element_bytes, op, n)
            bufs = co.make(op, count, dtype, device, rank, n)
            emulate = op in emulated
            co.fill(op, bufs, rank, n)
            co.call(op, bufs, rank, n, emulate)
            err, num_wrong = co.check(op, bufs, rank, n, co.CHECK_RTOL[c.dtype])
            if err > co.CHECK_RTOL[c.dtype]:
                raise RuntimeError(
                    f"{op} on {n} ranks, {count * element_bytes} bytes: rank {rank}'s result "
                    f"is off by {err:.3g} (relative; allowed {co.CHECK_RTOL[c.dtype]:g})"
                )
            for tensor in bufs.values():  # time on zeros: repeated in-place sums cannot overflow
                tensor.zero_()
            times = time_iterations(
                lambda op=op, bufs=bufs, emulate=emulate: co.call(op, bufs, rank, n, emulate),
                device,
                w.num_warmup_steps,
                w.num_steps,
            )
            size_bytes = count * element_bytes
            points.append({"op": op, "size_bytes": size_bytes, "count": count, "times_s": times})
            points[-1].update(check_max_rel_err=err, num_wrong=num_wrong)
            # the slowest rank's p50, as the end table computes it (after the timed calls)
            t50 = percentile(slowest_across_ranks(times, device), 50)
            busbw = cm.busbw_gbps(size_bytes, t50, op, n)
            progress.point(op, t50, {"size_bytes": float(size_bytes), "busbw_gbps": busbw})
            del bufs
    progress.close()
    return {
        "rank": rank,
        "points": points,
        "emulated": emulated,
        "skipped": skipped,
        "dtype": c.dtype,
        "run_dir": str(run_dir),
    }


def slowest_across_ranks(times_s: list[float], device: str) -> list[float]:
    """Each call's slowest rank (an all_reduce MAX on the backend's device; every rank calls
    it)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(times_s, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (collective, size), the slowest rank's time of each timed call; the worst check."""
    first = per_rank[0]
    points = []
    for i, point in enumerate(first["points"]):
        mine = [r["points"][i] for r in per_rank]
        points.append(
            {
                **{k: point[k] for k in ("op", "size_bytes", "count")},
                "times_s": slowest_per_iteration([p["times_s"] for p in mine]),
                "check_max_rel_err": max(p["check_max_rel_err"] for p in mine),
                "num_wrong": sum(p.get("num_wrong", 0) for p in mine),
            }
        )
    keep = ("emulated", "skipped", "dtype", "run_dir")
    return {"points": points, **{k: first[k] for k in keep}}


def table_rows(result: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """One row per (collective, size): p50/p90 time, algbw and busbw (nccl-tests' definitions)."""
    rows = []
    for p in result["points"]:
        t50 = percentile(p["times_s"], 50)
        rows.append(
            {
                "collective": p["op"],
                "world_size": world_size,
                "dtype": result["dtype"],
                "size_bytes": p["size_bytes"],
                "count": p["count"],
                "nccl_count": cm.nccl_tests_count(p["op"], p["count"], world_size),
                "time_s_p50": t50,
                "time_s_p90": percentile(p["times_s"], 90),
                "algbw_gbps": cm.algbw_gbps(p["size_bytes"], t50),
                "busbw_gbps": cm.busbw_gbps(p["size_bytes"], t50, p["op"], world_size),
                "bus_factor": cm.bus_factor(p["op"], world_size),
                "implementation": result["emulated"].get(p["op"], "native"),
                "check_max_rel_err": p["check_max_rel_err"],
                "num_wrong": int(p.get("num_wrong", 0)),
            }
        )
    return rows


def summary_metrics(rows: list[dict[str, Any]], emulated: dict[str, str]) -> dict[str, float]:
    """Per collective: peak busbw/algbw, the smallest message's time, and the α-β fit."""
    metrics: dict[str, float] = {}
    for op in dict.fromkeys(r["collective"] for r in rows):
        mine = sorted((r for r in rows if r["collective"] == op), key=lambda r: r["size_bytes"])
        metrics[f"busbw_gbps_peak.{op}"] = max(r["busbw_gbps"] for r in mine)
        metrics[f"algbw_gbps_peak.{op}"] = max(r["algbw_gbps"] for r in mine)
        metrics[f"busbw_gbps_avg.{op}"] = cm.busbw_avg_gbps([r["busbw_gbps"] for r in mine])
        metrics[f"latency_s_min_bytes.{op}"] = mine[0]["time_s_p50"]
        metrics[f"emulated.{op}"] = float(op in emulated)
        if len(mine) >= 2:
            alpha, beta = cm.fit_alpha_beta(
                [r["size_bytes"] for r in mine], [r["time_s_p50"] for r in mine]
            )
            metrics[f"alpha_s.{op}"] = alpha
            if beta is not None:
                metrics[f"beta_algbw_gbps.{op}"] = beta / 1e9
                metrics[f"beta_busbw_gbps.{op}"] = beta / 1e9 * mine[0]["bus_factor"]
    if rows:  # nccl-tests' "Avg bus bandwidth" over everything the run measured
        metrics["busbw_gbps_avg"] = cm.busbw_avg_gbps([r["busbw_gbps"] for r in rows])
    return metrics


def measure(job: Job, result: dict[str, Any], job_dir: Path | None = None) -> Measured:
    """result.json → per-collective summary metrics, series stepped by message size in bytes,
    the CSV table, the busbw plot and nccl-tests' text table (collectives.txt) in the job dir."""
    rows = table_rows(result, job.world_size)
    metrics = summary_metrics(rows, result["emulated"])
    metrics["num_sizes"] = float(len({r["size_bytes"] for r in rows}))
    metrics["num_timed_steps"] = float(len(result["points"][0]["times_s"])) if rows else 0.0
    series = []
    for r in rows:
        op, step = r["collective"], int(r["size_bytes"])
        series += [
            (f"busbw_gbps.{op}", r["busbw_gbps"], step),
            (f"algbw_gbps.{op}", r["algbw_gbps"], step),
            (f"time_s_p50.{op}", r["time_s_p50"], step),
        ]
    job_dir = Path(result["run_dir"])
    artifacts = []
    if rows and job_dir.is_dir():
        title = f"busbw, {job.world_size} ranks, {result['dtype']}"
        table = job_dir / TABLE_NAME
        table.write_text(nccl_table(rows, result.get("backend", "?")))
        artifacts = [
            write_csv(rows, job_dir / CSV_NAME),
            plot_busbw(rows, job_dir / PNG_NAME, title),
            table,
        ]
    return Measured(metrics=metrics, series=series, artifacts=artifacts)
