"""The launch step: resolved.yaml (the prepared Job's tree), the launch plan (topology, free
port, who starts the ranks), the checks only this machine can answer (enough cores or GPUs),
then the ranks under the watchdog with the progress bar, while the job's MLflow run is started
RUNNING beside them (recording.start_live).

    python -c "from distbench.orchestrator.launching import device_shortfall; \\
print(device_shortfall('cpu', 1024))"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from distbench.compose.checks import tp_spans_nodes
from distbench.compose.schema import ConfigError
from distbench.job import Job
from distbench.launch.topology import SLURM_JOB_ENV, LaunchPlan, plan_launch, slurm_job_id
from distbench.launch.watchdog import Watchdog
from distbench.launch.workers import (
    LaunchOutcome,
    remove_shm_leftovers,
    run_workers,
    worker_env,
)
from distbench.orchestrator.outcome import JobContext, Outcome
from distbench.orchestrator.recording import start_live
from distbench.probes.detect import gpu_names, num_cpu_cores

# Ranks per CPU core beyond which a CPU job is refused (one rank = one core; tests time-share
# up to 4 ranks a core, more only thrashes or exhausts memory).
MAX_RANKS_PER_CPU_CORE = 4


def device_shortfall(device: str, nproc_per_node: int) -> str | None:
    """Why this node cannot host the ranks, or None: more CUDA ranks than visible GPUs, or more
    CPU ranks than MAX_RANKS_PER_CPU_CORE per core."""
    if device != "cuda":
        cores = num_cpu_cores()
        if nproc_per_node > MAX_RANKS_PER_CPU_CORE * cores:
            return (
                f"{nproc_per_node} ranks on this machine's {cores} CPU core(s): at most "
                f"{MAX_RANKS_PER_CPU_CORE * cores} ({MAX_RANKS_PER_CPU_CORE} per core); lower "
                "world_size or use more nodes"
            )
        return None
    num_gpus = len(gpu_names())
    if nproc_per_node > num_gpus:
        return (
            f"nproc_per_node({nproc_per_node}) > the {num_gpus} CUDA device(s) visible here; "
            "lower world_size or use more nodes"
        )
    return None


def plan_job(job: Job, outcome: Outcome, ctx: JobContext) -> LaunchPlan:
    """Write resolved.yaml and plan the launch; the outcome gets the topology that runs. Raises
    ConfigError (recorded as invalid_config) for a launch this machine cannot make."""
    (ctx.job_dir / "resolved.yaml").write_text(job.to_yaml())
    launch = plan_launch(job, ctx.job_dir)
    outcome.update(launch.tags())
    if SLURM_JOB_ENV in os.environ:
        outcome.slurm_job_id = slurm_job_id(os.environ)
    if tp_spans_nodes(job.layout.tp, launch.ranks_per_node):  # allowed by tp_across_nodes=true
        outcome.tp_across_nodes = "true"
        print(
            f"distbench: {ctx.label}: warning: tp({job.layout.tp}) groups span nodes "
            f"({launch.ranks_per_node} ranks per node): their all-reduces leave the node"
        )
    shortfall = device_shortfall(job.device, launch.ranks_here)
    if shortfall:
        raise ConfigError(shortfall)
    outcome.master_port = launch.port
    return launch


def launch_job(job: Job, launch: LaunchPlan, outcome: Outcome, ctx: JobContext) -> LaunchOutcome:
    """The ranks, under the watchdog, their steps streamed to the RUNNING MLflow run.

    The RUNNING run is created while the ranks start, not before: a store's first connection
    costs seconds (importing mlflow, opening sqlite) that the ranks' own start-up hides. It
    streams progress.jsonl from its first line, whenever it starts. The store's address is
    resolved first: a bad tracking config fails before anything is launched."""
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(job.tracking, Path.cwd())
    live = start_live(job, uri, outcome, ctx)
    try:
        launched = run_ranks(job, launch, outcome.names, ctx)
    finally:  # also when cancelled: the run is then filled as such
        live.stop(cancelled=sys.exc_info()[0] is not None)
    outcome.wall_time_s = launched.wall_time_s
    return launched


def run_ranks(
    job: Job, launch: LaunchPlan, names: dict[str, str], ctx: JobContext
) -> LaunchOutcome:
    """Start the ranks and wait for them, with the progress bar and the watchdog."""
    from distbench.launch.progress import JobProgress

    title = (
        f"{ctx.label} strategy={names['strategy']} world_size={names['world_size']} "
        f"zero_stage={names['zero_stage']} model={names['model']}"
    )
    env = worker_env(job.device, launch.ranks_per_node, num_cpu_cores(), launch.ranks_here)
    watchdog = Watchdog(ctx.job_dir, job.world_size, job.limits)
    total_steps = job.workload.num_warmup_steps + job.workload.num_steps
    try:
        with JobProgress(title, total_steps, ctx.job_dir / "progress.jsonl") as progress:
            return run_workers(
                ctx.job_dir,
                launch.cmd,
                env,
                job.limits.timeout_s,
                on_poll=progress.update,
                watchdog=watchdog.check,
            )
    finally:  # also when cancelled: run_workers has killed the group by then
        remove_shm_leftovers(launch.port)
