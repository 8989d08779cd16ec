"""Runs a dead sweep left RUNNING: its parent run (the process its `distbench.sweep_owner` tag
names is gone from this host) and the children it had started. Each child is filled from its job
dir's spooled payload when that payload is the child's attempt (the job had ended), else ended
FAILED `orchestrator_lost` at its last sign of life; then the parent is ended KILLED with its
summary (the jobs it never started in `num_not_run`). `distbench sync` does it for the sweeps of
its dir; `resume=true` for a sweep whose job it is about to rerun, even after the job's dir was
reused (which is why this reads the store, not the job dirs).

    distbench sync multirun/DAY/TIME      # also ends the dead sweeps of that dir
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distbench.tracking.mlflow_store import client, find_runs, retry
from distbench.tracking.spool import (
    ATTEMPT_ID_TAG,
    INCOMPLETE_TAG,
    JOB_DIR_TAG,
    PAYLOAD,
    SWEEP_DIR_TAG,
    SpoolError,
    read_payload,
    sweep_gone,
    upload_attempt,
)

PARENT_TAG = "mlflow.parentRunId"


def close_dead_sweeps(tracking_uri: str, experiment_id: str, sweep_dir: Path, by: str) -> int:
    """close_dead_sweep for every parent run of `sweep_dir`; returns how many runs it ended."""
    parents = find_runs(tracking_uri, experiment_id, {SWEEP_DIR_TAG: str(sweep_dir.resolve())})
    return sum(
        close_dead_sweep(tracking_uri, p, by) for p in parents if PARENT_TAG not in p.data.tags
    )


def close_dead_runs(tracking_uri: str, runs: list[Any], by: str) -> int:
    """close_dead_sweep for the parents of the RUNNING ones among `runs` (e.g. a signature's
    runs); returns how many runs it ended."""
    parents = {
        r.data.tags[PARENT_TAG]
        for r in runs
        if r.info.status == "RUNNING" and PARENT_TAG in r.data.tags
    }
    mlflow = client(tracking_uri)
    ended = 0
    for parent_id in sorted(parents):
        parent = retry(lambda p=parent_id: mlflow.get_run(p), tracking_uri=tracking_uri)
        ended += close_dead_sweep(tracking_uri, parent, by)
    return ended


def close_dead_sweep(tracking_uri: str, parent: Any, by: str) -> int:
    """When the sweep of `parent` is known dead: end the children it left RUNNING, then the
    parent if it is still RUNNING. Returns how many runs were ended (0 for a live sweep, or
    one whose parent names no process)."""
    gone = sweep_gone(parent)
    if gone is None:
        return 0
    parent_id = parent.info.run_id
    experiment_id = parent.info.experiment_id
    ended = 0
    for child in find_runs(tracking_uri, experiment_id, {PARENT_TAG: parent_id}):
        if child.info.status == "RUNNING":
            end_lost_child(tracking_uri, child, gone, by)
            ended += 1
    if parent.info.status == "RUNNING":
        children = find_runs(tracking_uri, experiment_id, {PARENT_TAG: parent_id})
        _end_parent(tracking_uri, parent, children)
        ended += 1
    return ended


def end_lost_child(tracking_uri: str, run: Any, gone: str, by: str) -> None:
    """Fill a RUNNING child from its job dir's payload when that is its attempt (the job had
    ended and spooled), else end it FAILED orchestrator_lost at its last metric's time."""
    from distbench.orphans import LOST_KIND

    attempt = run.data.tags.get(ATTEMPT_ID_TAG)
    job_dir = Path(run.data.tags.get(JOB_DIR_TAG) or "/nonexistent")
    if attempt and _spooled_attempt(job_dir) == attempt:
        upload_attempt(tracking_uri, job_dir)
        return
    from mlflow.entities import RunTag

    reason = (
        f"its orchestrator ({gone}) died during the job (SIGKILL, an OOM kill or a lost "
        f"machine); recorded by {by}"
    )
    tags = [RunTag("failure_kind", LOST_KIND), RunTag("failure_reason", reason)]
    mlflow = client(tracking_uri)
    run_id = run.info.run_id
    retry(lambda: mlflow.log_batch(run_id, tags=tags), tracking_uri=tracking_uri)
    retry(lambda: mlflow.delete_tag(run_id, INCOMPLETE_TAG), tracking_uri=tracking_uri)
    end_ms = _last_seen_ms(tracking_uri, run)
    retry(
        lambda: mlflow.set_terminated(run_id, "FAILED", end_time=end_ms),
        tracking_uri=tracking_uri,
    )


def _spooled_attempt(job_dir: Path) -> str | None:
    """The attempt id of the job dir's spooled payload, if it has a readable one."""
    if not (job_dir / PAYLOAD).is_file():
        return None
    try:
        return read_payload(job_dir).get("attempt_id")
    except SpoolError:
        return None


def _last_seen_ms(tracking_uri: str, run: Any) -> int:
    """When a run last logged a metric (its steps, system samples), else when it started."""
    mlflow = client(tracking_uri)
    last = run.info.start_time or 0
    for key in run.data.metrics:
        history = retry(
            lambda key=key: mlflow.get_metric_history(run.info.run_id, key),
            tracking_uri=tracking_uri,
        )
        last = max([last, *(m.timestamp for m in history)])
    return last


def _end_parent(tracking_uri: str, parent: Any, children: list[Any]) -> None:
    """A dead sweep's parent: its summary from its children's runs, KILLED."""
    from distbench.tracking.parent import log_summary

    outcomes = [
        {
            "status": c.info.status,
            "metrics": dict(c.data.metrics),
            "run_name": c.info.run_name,
            "strategy": c.data.tags.get("strategy"),
            "run_id": c.info.run_id,
        }
        for c in children
    ]
    num_jobs = parent.data.tags.get("num_jobs", "")
    total = int(num_jobs) if num_jobs.isdigit() else None
    mlflow = client(tracking_uri)
    parent_id = parent.info.run_id
    if total is not None:
        not_run = str(max(total - len(children), 0))
        retry(lambda: mlflow.set_tag(parent_id, "num_not_run", not_run), tracking_uri=tracking_uri)
    log_summary(tracking_uri, parent_id, outcomes, total)
    retry(lambda: mlflow.set_terminated(parent_id, "KILLED"), tracking_uri=tracking_uri)
