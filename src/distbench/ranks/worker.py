"""Rank entry point: join the process group, run the workload, and (rank 0) write result.json.

Workers never use Hydra: they rebuild the Job from RUN_DIR/resolved.yaml (Job.load). A rank
that raises writes RUN_DIR/error.rank<r>.json (type, message, traceback) for the orchestrator
to classify, then exits non-zero.

    python -m torch.distributed.run --nproc_per_node=2 -m distbench.ranks.worker RUN_DIR
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from distbench.files import write_json_atomic
from distbench.launch.lifeline import die_with_agent

if TYPE_CHECKING:  # the rank imports the job (and torch) only once it runs
    from distbench.job import Job

# DeepSpeed's autotuner imports MLflow when it is installed (deepspeed/autotuning/autotuner.py,
# `try: import mlflow`), on every `import deepspeed`: 2-2.5 s of each rank's start on a 2-core
# machine, for a module no rank uses (the orchestrator logs to MLflow). A None in sys.modules
# makes that import fail at once, as where MLflow is not installed.
RANK_UNUSED_MODULES = ("mlflow",)

# DISTBENCH_DEVICE_AUDIT=1: the workload runs with torch's default device set to meta, so
# every tensor it makes must name its device (tests/distributed/test_device_audit.py).
DEVICE_AUDIT_ENV = "DISTBENCH_DEVICE_AUDIT"


def main(argv: list[str] | None = None) -> None:
    # First: a rank lives in its own session (torch's agent starts it so); if the agent dies
    # (its orchestrator SIGKILLed), the kernel kills this rank too.
    die_with_agent()
    for name in RANK_UNUSED_MODULES:
        sys.modules.setdefault(name, None)
    argv = sys.argv[1:] if argv is None else argv
    run_dir = Path(argv[0])
    from distbench.job import Job

    job = Job.load(run_dir)
    device = job.device
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if device == "cuda" else "cpu")
    rank = int(os.environ.get("RANK", "0"))
    # On SIGUSR1 (sent by the orchestrator when a rank stalls) dump every thread's stack, so
    # the stall report can tell the rank that hangs from the ranks waiting for it.
    stacks = (run_dir / f"stack.rank{rank}.txt").open("w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    try:
        _run(job, run_dir, rank)
    except BaseException as exc:
        error = {
            "rank": rank,
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "traceback": traceback.format_exc()[-8000:],
        }
        write_json_atomic(run_dir / f"error.rank{rank}.json", error)
        raise
    stacks.close()
    exit_now()


def _run(job: Job, run_dir: Path, rank: int) -> None:
    """Join the process group, run the workload, and (rank 0) write every rank's figures."""
    import torch.distributed as dist

    from distbench.job import rank_module
    from distbench.ranks import dist as dist_utils

    device = job.device
    workload = rank_module(job)
    dist_utils.init_process_group(device, job.engine)
    dist_utils.heartbeat(run_dir, rank, -1)
    audit = os.environ.get(DEVICE_AUDIT_ENV) == "1"
    if audit:
        # A tensor made without naming its device lands on meta and fails loudly: on a CPU
        # box this finds the host tensor that a GPU job would hand to nccl.
        import torch

        torch.set_default_device("meta")
    figures = workload.run(job, run_dir)
    if audit:
        import torch

        torch.set_default_device(None)
    figures["hostname"] = socket.gethostname()
    per_rank = dist_utils.gather_objects(figures)
    host_rss = dist_utils.gather_objects(dist_utils.host_peak_rss_bytes())
    if rank == 0:
        result = {
            "status": "ok",
            "workload": job.workload.name,
            "layout": job.layout.as_dict(),
            "backend": dist.get_backend(),
            "device": device,
            "num_warmup_steps": job.workload.num_warmup_steps,
            **workload.combine(per_rank),
            "host_peak_rss_bytes": host_rss,  # per rank, every workload
        }
        write_json_atomic(run_dir / "result.json", result)
    # Without this barrier a rank that tears down its gloo pairs while a peer still uses
    # them aborts (seen with the pipeline engine: "terminate called without an active
    # exception", SIGABRT).
    dist.barrier()
    dist.destroy_process_group()


def exit_now() -> None:
    """End the rank at once: everything it owes is written (result.json atomically, the logs
    flushed here), and the interpreter's own finalisation of torch, transformers and DeepSpeed
    took 2-5 s per rank on a 2-core machine after the last step: time the job was charged for
    and the next job waited on. Only after a clean end; a failing rank raises as before."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
