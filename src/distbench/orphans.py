"""Jobs whose orchestrator died without a word (SIGKILL, the kernel's OOM killer, a lost CI
runner): each job dir names the process that runs it (`orchestrator.json`: host, pid, start
time); `distbench sync` finds the job dirs with no outcome whose process is gone from this host
and records them as FAILED `orchestrator_lost`, so the grid shows what happened and the sweep's
parent run can be closed.

    distbench sync multirun/2026-11-23/10-00-00    # records the orphans, then uploads, closes
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import psutil
from omegaconf import OmegaConf, open_dict

from distbench.files import write_json_atomic

OWNER_FILE = "orchestrator.json"
LOST_KIND = "orchestrator_lost"


def owner_record() -> dict[str, Any]:
    """This process as the owner of a job dir (or of a sweep's parent run): host, pid, start."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": psutil.Process().create_time(),
    }


def mark_owner(job_dir: Path) -> None:
    """Name this process as the one running the job in `job_dir`."""
    write_json_atomic(job_dir / OWNER_FILE, owner_record())


def owner_gone(job_dir: Path) -> str | None:
    """Why the job's orchestrator is known dead; None when it runs, ran elsewhere (another host
    cannot be checked from here) or the job dir names none."""
    try:
        owner = json.loads((job_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return process_gone(owner)


def process_gone(owner: Any) -> str | None:
    """Why the process an owner_record() names is known dead ("pid N on HOST"); None when it
    runs, ran on another host (it cannot be checked from here) or the record is unreadable."""
    try:
        host, pid, started = owner["host"], int(owner["pid"]), float(owner["started"])
    except (KeyError, TypeError, ValueError):
        return None
    if host != socket.gethostname():
        return None
    try:
        alive = abs(psutil.Process(pid).create_time() - started) < 1.0  # not a reused pid
    except psutil.NoSuchProcess:
        alive = False
    return None if alive else f"pid {pid} on {host}"


def orphaned_job_dirs(sweep_dir: Path) -> list[tuple[Path, str]]:
    """(job dir, why its orchestrator is known dead) of every job of `sweep_dir` (or the job dir
    itself) that has no outcome."""
    candidates = [sweep_dir] if (sweep_dir / OWNER_FILE).exists() else sorted(sweep_dir.iterdir())
    found = []
    for job_dir in candidates:
        if not job_dir.is_dir() or (job_dir / "outcome.json").exists():
            continue
        gone = owner_gone(job_dir)
        if gone and (job_dir / ".hydra" / "config.yaml").is_file():
            found.append((job_dir, gone))
    return found


def job_times_ms(job_dir: Path) -> tuple[int, int]:
    """(when the job started: its owner file was written, when it was last seen alive: the
    newest file its ranks or orchestrator wrote), in ms since the epoch."""
    owner = job_dir / OWNER_FILE
    started = owner.stat().st_mtime if owner.exists() else job_dir.stat().st_mtime
    seen = [started]
    for path in job_dir.rglob("*"):
        if path.is_file() and "upload" not in path.relative_to(job_dir).parts:
            seen.append(path.stat().st_mtime)
    return int(started * 1000), int(max(seen) * 1000)


def record_orphans(sweep_dir: Path, tracking_uri: str, project_dir: Path) -> list[Path]:
    """Spool a FAILED `orchestrator_lost` run for each orphaned job of the sweep (its config as
    Hydra composed it), spanning the job's start to when it was last seen; `distbench sync`
    then uploads them under the sweep's parent run, filling and ending the run the job left
    RUNNING when it had one (tracking/live.py). Returns their job dirs."""
    from distbench.orchestrator import record_failure

    recorded = []
    for job_dir, gone in orphaned_job_dirs(sweep_dir):
        cfg = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
        with open_dict(cfg):
            cfg.tracking.uri = tracking_uri
        reason = (
            f"its orchestrator ({gone}) died during the job (SIGKILL, an OOM kill or a lost "
            "machine); recorded by distbench sync"
        )
        failure = {"failure_kind": LOST_KIND, "failure_reason": reason}
        times = job_times_ms(job_dir)
        label = f"job {job_dir.name}"
        record_failure(cfg, job_dir, project_dir, failure, label, log_now=False, times_ms=times)
        recorded.append(job_dir)
    return recorded
