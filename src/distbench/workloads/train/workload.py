"""The train workload: a model wrapped by its strategy's engine, warm-up steps, then timed steps.

The engine (`strategy.engine`: deepspeed or torch, see engines/__init__.py) is built by its
module's `initialize(model, job)`; the loop only calls `train_step(micro_batches)`.

A step whose mean loss over ranks is not finite (nan, inf) ends the loop on every rank (they
all see the same gathered mean): the run diverged. measure() then fails it as `diverged`, naming
the step, and keeps the figures of the steps that ran.

Every strategy sees the same data: step s's global batch is drawn from (seed, s) and each
data-parallel replica takes its slice, so layouts differ only in how they compute. Each step is
bracketed by a barrier and a device sync; its time is the slowest rank's. After the timed region
the ranks gather their loss, time and peak memory (one all_gather), and rank 0 appends the step's
line to progress.jsonl (the orchestrator's step lines, streamed to MLflow as progress/*): the
mean loss over ranks, the slowest rank's time, tokens/s (total and per device), TFLOP/s per
device, MFU and peak memory (GiB, % of the device), named as the run's metrics.

With workload.compile each rank also counts the compile phases each step ran
(`compile_events_per_step` in result.json): the warm-up step compiles, and a timed step that
compiled (a recompile) is logged as `compiled_timed_steps` and named by the `compile_note` tag.

    python -m torch.distributed.run --nproc_per_node=2 -m distbench.ranks.worker RUN_DIR
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from distbench.engines import GRID_DIMS
from distbench.figures.metrics import (
    GIB,
    step_figures,
    tokens_per_step,
    train_flops_per_token,
    train_metrics,
)
from distbench.figures.predict import pred_vs_measured
from distbench.job import Job
from distbench.ranks.models import count_params
from distbench.workloads import Measured
from distbench.workloads.common_metrics import COMMON_METRICS


def global_batch(
    seed: int, step: int, grad_accum_steps: int, num_rows: int, seq_len: int, vocab_size: int
):
    """Token ids [grad_accum_steps, num_rows, seq_len] of one step, fixed by (seed, step)."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, vocab_size, (grad_accum_steps, num_rows, seq_len), generator=generator)


def rank_micro_batches(tokens, dp_rank: int, micro_batch_size: int) -> list:
    """This replica's micro-batches of a global batch: rows [dp_rank*mbs, (dp_rank+1)*mbs)."""
    rows = slice(dp_rank * micro_batch_size, (dp_rank + 1) * micro_batch_size)
    return [tokens[g, rows].contiguous() for g in range(tokens.shape[0])]


def step_micro_batches(job: Job, step: int, replica: int) -> list:
    """Replica `replica`'s micro-batches of step `step`'s global batch."""
    tokens = global_batch(
        job.workload.seed,
        step,
        job.batch.grad_accum_steps,
        job.layout.dp * job.batch.micro_batch_size,
        job.batch.seq_len,
        job.model.vocab_size,
    )
    return rank_micro_batches(tokens, replica, job.batch.micro_batch_size)


def work_per_step(job: Job) -> tuple[int, float]:
    """(tokens per optimizer step over all replicas, model FLOPs per token) of a training job."""
    model, batch = job.model, job.batch
    flops = train_flops_per_token(
        count_params(model)["matmul"], model.num_layers, model.hidden_size, batch.seq_len
    )
    num_tokens = tokens_per_step(
        batch.micro_batch_size, batch.grad_accum_steps, batch.seq_len, job.layout.dp
    )
    return num_tokens, flops


def step_summary(per_rank: list[list[float]]) -> tuple[float, float, int]:
    """Every rank's [loss, step time in s, peak memory in bytes] of one step (rank order) →
    (the mean loss over ranks, as combine() averages it; the slowest rank's time; the largest
    peak memory)."""
    mean_loss = sum(r[0] for r in per_rank) / len(per_rank)
    return mean_loss, max(r[1] for r in per_rank), int(max(r[2] for r in per_rank))


def gather_step(
    loss: float, step_time_s: float, peak_mem_bytes: int, device: str
) -> tuple[float, float, int]:
    """step_summary() of every rank's figures, gathered on the backend's device (nccl: the
    rank's GPU, gloo: CPU). A collective: every rank calls it, after the step's timed region."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(
        [loss, step_time_s, float(peak_mem_bytes)], dtype=torch.float64, device=device
    )
    parts = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, mine)
    return step_summary(torch.stack(parts).tolist())


def run(job: Job, run_dir: Path) -> dict[str, Any]:
    """Warm-up + timed steps; returns this rank's figures (times in s, memory in bytes)."""
    import torch.distributed as dist

    rank = dist.get_rank()
    wrapped, started = start_engine(job, run_dir, rank)
    step_times_s, losses, compiles = timed_steps(job, wrapped, run_dir, rank)
    # Read before any profiled step: the profiler's own buffers are not the training's memory.
    from distbench.ranks import dist as dist_utils

    peak_mem_bytes = dist_utils.peak_memory_bytes(job.device)
    ran_all = len(step_times_s) == job.workload.num_warmup_steps + job.workload.num_steps
    profile = job.workload.profile_steps and ran_all  # a diverged run stopped early: no profile
    profiled = profiled_steps(job, wrapped, run_dir, rank) if profile else {}
    return {
        **profiled,
        **started,
        "rank": rank,
        "dp_rank": wrapped.dp_rank,
        "coords": dict(zip(GRID_DIMS, wrapped.coords, strict=True)),
        "step_times_s": step_times_s,
        "losses": losses,
        **({"compile_events_per_step": compiles} if job.workload.compile else {}),
        "peak_mem_bytes": peak_mem_bytes,
        "num_params_local": wrapped.num_params_local(),
    }


def start_engine(job: Job, run_dir: Path, rank: int) -> tuple[Any, dict[str, float]]:
    """The model wrapped by its engine, and what starting it cost: import_time_s, init_time_s
    (the model build and the engine start) and init_mem_bytes."""
    from distbench.engines import get as get_engine
    from distbench.ranks import dist as dist_utils
    from distbench.ranks.models import build_meta_model, build_model, import_model_class

    device = job.device
    # Libraries are imported before the init clock starts, as a script imports them at its top:
    # init_time_s is the model build and the engine start; import_time_s is logged beside it.
    import_started = time.perf_counter()
    engine_module = get_engine(job.engine)
    import_model_class(job.model)
    import_time_s = time.perf_counter() - import_started
    init_started = time.perf_counter()
    # Random weights: built on meta, materialised by the engine on the device (this rank's
    # shard where the layout shards); pretrained weights: loaded straight onto the device.
    if job.model.pretrained_path:
        model = build_model(job.model, job.weights_dtype, job.workload.seed, device)
    else:
        model = build_meta_model(job.model, job.weights_dtype)
    wrapped = engine_module.initialize(model, job)
    dist_utils.heartbeat(run_dir, rank, -1)  # engine built (may take long: partitioning, ops)
    dist_utils.synchronize(device)
    init_time_s = time.perf_counter() - init_started
    init_mem_bytes = dist_utils.current_memory_bytes(device)
    dist_utils.reset_peak_memory(device)
    started = {
        "init_mem_bytes": init_mem_bytes,
        "init_time_s": init_time_s,
        "import_time_s": import_time_s,
    }
    return wrapped, started


def timed_steps(job: Job, wrapped: Any, run_dir: Path, rank: int) -> tuple[list, list, list]:
    """The warm-up and timed steps: each step's time (s), loss and, with workload.compile, how
    many compile phases it ran (layers.compile_events) on this rank; rank 0 writes one
    progress.jsonl line per step (the slowest rank's time, the mean loss). A step whose mean
    loss is not finite is the last one (every rank sees the same mean: they stop together)."""
    import torch.distributed as dist

    from distbench.ranks import dist as dist_utils
    from distbench.ranks import faults

    device = job.device
    num_warmup, num_timed = job.workload.num_warmup_steps, job.workload.num_steps
    progress = (run_dir / "progress.jsonl").open("a") if rank == 0 else None
    from distbench.ranks.layers import compile_events

    step_times_s, losses, compiles = [], [], []
    for step in range(num_warmup + num_timed):
        replica = faults.data_rank(job.fault, wrapped.dp_rank)
        micro_batches = step_micro_batches(job, step, replica)
        dist_utils.heartbeat(run_dir, rank, step)
        faults.inject(job.fault, rank, step)
        dist.barrier()
        dist_utils.synchronize(device)
        compiled_before = compile_events() if job.workload.compile else 0
        start = time.perf_counter()
        loss = wrapped.train_step(micro_batches)
        dist_utils.synchronize(device)
        step_times_s.append(time.perf_counter() - start)
        losses.append(loss)
        if job.workload.compile:
            compiles.append(compile_events() - compiled_before)
        # After the timed region: every rank's loss, time and peak memory (one all_gather).
        gathered = gather_step(loss, step_times_s[-1], dist_utils.peak_memory_bytes(device), device)
        if progress:
            line = progress_line(job, step, *gathered)
            progress.write(json.dumps(line) + "\n")
            progress.flush()
        if not math.isfinite(gathered[0]):  # diverged: measure() fails the run at this step
            break
    if progress:
        progress.close()
    return step_times_s, losses, compiles


def progress_line(
    job: Job, step: int, mean_loss: float, slowest_s: float, peak_bytes: float
) -> dict[str, Any]:
    """One progress.jsonl line: the step's phase, time, loss and live figures."""
    num_warmup, num_timed = job.workload.num_warmup_steps, job.workload.num_steps
    num_tokens, flops = work_per_step(job)
    figures = step_figures(
        step_time_s=slowest_s,
        num_tokens_per_step=num_tokens,
        flops_per_token=flops,
        world_size=job.layout.world_size,
        peak_tflops_per_device=getattr(job.hardware, f"peak_tflops_{job.dtype}"),
        peak_mem_bytes=peak_bytes,
        device_mem_gib=job.hardware.mem_gib,
    )
    return {
        "phase": "warmup" if step < num_warmup else "timed",
        "step": step + 1,
        "num_steps": num_warmup + num_timed,
        "step_time_s": slowest_s,  # the slowest rank's, as the step_time_s series
        "loss": mean_loss,  # the mean over ranks, as the loss series
        **figures,
        "time_unix_s": time.time(),  # when the step ended: its MLflow timestamp
    }


def profiled_steps(job: Job, wrapped: Any, run_dir: Path, rank: int) -> dict[str, Any]:
    """workload.profile_steps more steps under torch.profiler, after the timed ones (untimed)."""
    import torch.distributed as dist

    from distbench.ranks import dist as dist_utils
    from distbench.ranks.profiling import profile_steps

    done = job.workload.num_warmup_steps + job.workload.num_steps

    def untimed_step(i: int) -> float:
        step = done + i
        dist_utils.heartbeat(run_dir, rank, step)  # the watchdog sees the job go on
        micro_batches = step_micro_batches(job, step, wrapped.dp_rank)
        dist.barrier()
        return wrapped.train_step(micro_batches)

    def beat() -> None:
        dist_utils.heartbeat(run_dir, rank, done)

    return profile_steps(run_dir, rank, job.device, job.workload.profile_steps, untimed_step, beat)


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's figures from every rank's: a step lasts as long as its slowest rank, and the
    loss is the mean over ranks (data-parallel replicas see different rows of one batch)."""
    num_steps = len(per_rank[0]["step_times_s"])
    shape = [1 + max(r["coords"][d] for r in per_rank) for d in GRID_DIMS]
    return {
        # The rank grid: its shape (dp, pp, tp) and each rank's coordinates in it.
        "grid": {
            "dims": list(GRID_DIMS),
            "shape": shape,
            "coords": [[r["coords"][d] for d in GRID_DIMS] for r in per_rank],
        },
        "layout_tag": "-".join(f"{d}{n}" for d, n in zip(GRID_DIMS, shape, strict=True)),
        "step_times_s": [max(r["step_times_s"][i] for r in per_rank) for i in range(num_steps)],
        "losses": [sum(r["losses"][i] for r in per_rank) / len(per_rank) for i in range(num_steps)],
        "ranks": per_rank,  # each rank's own figures, its local losses included
    }


# Figures computed from the timed steps' times (the shared metrics' `step_time` flag): absent
# when a run diverged during warm-up.
STEP_TIME_METRICS = tuple(m.name for m in COMMON_METRICS if m.step_time)
DIVERGED = "diverged"  # the failure kind of a run whose loss went non-finite


def diverged_step(losses: list[float]) -> int | None:
    """The 1-based step whose loss was first not finite (nan, inf), or None."""
    return next((i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)), None)


def divergence(job: Job, losses: list[float]) -> tuple[int, str] | None:
    """(the step, the failure reason) of a run whose loss went non-finite, else None."""
    step = diverged_step(losses)
    if step is None:
        return None
    num_warmup, num_timed = job.workload.num_warmup_steps, job.workload.num_steps
    phase = "warm-up" if step <= num_warmup else "timed"
    reason = (
        f"the loss went {losses[step - 1]} at step {step}/{num_warmup + num_timed} ({phase}); "
        f"the run stopped there. Lower workload.lr={job.workload.lr:g} or check the precision"
    )
    return step, reason


def measure(job: Job, result: dict[str, Any], job_dir: Path | None = None) -> Measured:
    """result.json (raw timings, losses, memory) → the logged metrics with their units; with a
    job_dir, the first-step loss is also checked against the single-device reference. A run
    whose loss went non-finite fails as `diverged` with the figures of the steps it ran."""
    num_warmup = result["num_warmup_steps"]
    model, hw, layout = job.model, job.hardware, job.layout
    params = count_params(model)
    num_tokens, flops = work_per_step(job)  # the same figures as the live step lines
    timed = result["step_times_s"][num_warmup:]
    metrics = train_metrics(
        step_times_s=timed or result["step_times_s"],
        losses=result["losses"],
        peak_mem_bytes_per_rank=[r["peak_mem_bytes"] for r in result["ranks"]],
        num_tokens_per_step=num_tokens,
        flops_per_token=flops,
        world_size=layout.world_size,
        peak_tflops_per_device=getattr(hw, f"peak_tflops_{job.dtype}"),
        price_usd_per_device_hour=hw.price_usd_per_hour,
    )
    if not timed:  # diverged during warm-up: no timed step to take a step time from
        for key in STEP_TIME_METRICS:
            metrics.pop(key, None)
        metrics["num_timed_steps"] = 0.0
    metrics.update(start_metrics(result["ranks"]))
    compile_tags: dict[str, str] = {}
    if getattr(job.workload, "compile", False) and num_warmup and timed:
        metrics["compile_time_s"] = compile_time_s(result["step_times_s"][0], timed)
        per_step = compiles_per_step(result["ranks"])
        if per_step:
            metrics["compiled_timed_steps"] = float(sum(n > 0 for n in per_step[num_warmup:]))
            compile_tags = compile_note(per_step, num_warmup)
    metrics["tokens_per_step"] = float(num_tokens)
    metrics["model_flops_per_token"] = flops
    metrics["num_params"] = float(params["total"])
    metrics.update(pred_vs_measured(job, metrics))
    series = [("step_time_s", t, i) for i, t in enumerate(result["step_times_s"])]
    series += [("loss", loss, i) for i, loss in enumerate(result["losses"])]
    diverged = divergence(job, result["losses"])
    if diverged is not None:  # no equivalence is claimed for a run that diverged
        step, reason = diverged
        tags = {
            "diverged_at_step": str(step),
            "equivalent": "unchecked",
            "equivalence_note": f"not checked: the loss went non-finite at step {step}",
        }
        return Measured(metrics=metrics, series=series, tags=tags, failure=(DIVERGED, reason))
    tags = check_equivalence(job, metrics, job_dir) if job_dir else {}
    return Measured(metrics=metrics, series=series, tags={**tags, **compile_tags})


def compile_time_s(first_step_s: float, timed_steps_s: list[float]) -> float:
    """What torch.compile added to the first warm-up step (which compiles every decoder layer's
    forward and backward): its time less the median timed step; never part of the timed steps."""
    import statistics

    return max(0.0, first_step_s - statistics.median(timed_steps_s))


def compiles_per_step(ranks: list[dict[str, Any]]) -> list[int]:
    """The most compile phases any rank ran in each step (empty without workload.compile)."""
    per_rank = [r["compile_events_per_step"] for r in ranks if "compile_events_per_step" in r]
    return [max(steps) for steps in zip(*per_rank, strict=True)] if per_rank else []


def compile_note(per_step: list[int], num_warmup: int) -> dict[str, str]:
    """The `compile_note` tag when a timed step compiled (a recompile: its time includes
    compiling), else nothing."""
    compiled = [i + 1 for i, n in enumerate(per_step) if i >= num_warmup and n > 0]
    if not compiled:
        return {}
    steps = ", ".join(map(str, compiled))
    return {
        "compile_note": f"timed step(s) {steps} of {len(per_step)} compiled (a recompile): "
        "their times include compiling; TORCH_LOGS=recompiles says why"
    }


def start_metrics(ranks: list[dict[str, Any]]) -> dict[str, float]:
    """What starting the job cost (the worst rank's init_mem_gib, init_time_s, import_time_s)
    and, with profile_steps, rank 0's profiled figures."""
    out = {
        "init_mem_gib": max(r["init_mem_bytes"] for r in ranks) / GIB,
        "init_time_s": max(r["init_time_s"] for r in ranks),
    }
    if "import_time_s" in ranks[0]:
        out["import_time_s"] = max(r["import_time_s"] for r in ranks)
    for key in ("profile_step_time_s", "profile_device_busy_frac"):  # with profile_steps
        if key in ranks[0]:
            out[key] = ranks[0][key]
    return out


def check_equivalence(job: Job, metrics: dict[str, float], job_dir: Path) -> dict[str, str]:
    """Compare the first-step loss with the single-device reference: adds the metrics
    loss_first_single and loss_rel_err_vs_single, returns the tags (equivalent=...)."""
    from distbench.workloads.train import equivalence

    try:
        eq_metrics, eq_tags = equivalence.check(
            job, metrics["loss_first"], metrics["num_params"], job_dir
        )
    except Exception as exc:  # the measurement stands; only the check is missing
        return {"equivalent": "unchecked", "equivalence_note": f"reference failed: {exc}"[:500]}
    metrics.update(eq_metrics)
    return eq_tags
