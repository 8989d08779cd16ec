"""Nothing measured is lost: every job spools its MLflow run to JOB_DIR/mlflow_run.json before
logging it, and `distbench sync SWEEP_DIR` uploads the runs that did not land (tracking server
down, sqlite broken), exactly once: a run already in the store for that job dir is skipped.

    distbench sync multirun/2026-11-22/10-00-00 [--tracking-uri URI]
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from distbench.tracking.mlflow_store import (
    client,
    ensure_experiment,
    find_runs,
    log_child_run,
    retry,
)

PAYLOAD = "mlflow_run.json"
JOB_DIR_TAG = "distbench.job_dir"
SWEEP_DIR_TAG = "distbench.sweep_dir"


def write_payload(job_dir: Path, payload: dict[str, Any]) -> None:
    """Spool a run: experiment_name, run_name, params, metrics, series, tags, artifacts (paths
    relative to the job dir), failed, parent_run_id."""
    (job_dir / PAYLOAD).write_text(json.dumps(payload, indent=1))


def upload(tracking_uri: str, job_dir: Path, parent_run_id: str | None = None) -> str:
    """Log the spooled run of `job_dir` unless the store already has it; returns its run id.
    A run left incomplete by an earlier failed upload is replaced."""
    payload = json.loads((job_dir / PAYLOAD).read_text())
    experiment_id = ensure_experiment(tracking_uri, payload["experiment_name"])
    for run in find_runs(tracking_uri, experiment_id, {JOB_DIR_TAG: str(job_dir)}):
        if "tracking_error" not in run.data.tags:
            return run.info.run_id
        retry(lambda run=run: client(tracking_uri).delete_run(run.info.run_id))
    return log_child_run(
        tracking_uri,
        experiment_id,
        payload["run_name"],
        params=payload["params"],
        metrics=payload["metrics"],
        tags={**payload["tags"], JOB_DIR_TAG: str(job_dir)},
        artifacts=[job_dir / name for name in payload["artifacts"]],
        failed=payload["failed"],
        parent_run_id=parent_run_id or payload.get("parent_run_id"),
        series=[tuple(s) for s in payload["series"]],
    )


def sweep_parent(tracking_uri: str, experiment_name: str, sweep_dir: Path) -> str:
    """The parent run of a sweep dir: the one its sweep opened, or a new one (FINISHED)."""
    experiment_id = ensure_experiment(tracking_uri, experiment_name)
    for run in find_runs(tracking_uri, experiment_id, {SWEEP_DIR_TAG: str(sweep_dir)}):
        if "mlflow.parentRunId" not in run.data.tags:
            return run.info.run_id
    mlflow = client(tracking_uri)
    run = retry(
        lambda: mlflow.create_run(
            experiment_id,
            run_name=f"sweep-{sweep_dir.name}",
            tags={SWEEP_DIR_TAG: str(sweep_dir), "synced": "true"},
        )
    )
    retry(lambda: mlflow.set_terminated(run.info.run_id, "FINISHED"))
    return run.info.run_id


def sync_sweep(sweep_dir: Path, tracking_uri: str) -> dict[str, int]:
    """Upload every spooled run of a sweep (or of one job dir) that is not in the store yet."""
    sweep_dir = sweep_dir.resolve()
    job_dirs = sorted(p.parent for p in sweep_dir.glob(f"*/{PAYLOAD}"))
    if (sweep_dir / PAYLOAD).exists():
        job_dirs = [sweep_dir]
    counts = {"uploaded": 0, "already_in_store": 0}
    parent = None
    for job_dir in job_dirs:
        payload = json.loads((job_dir / PAYLOAD).read_text())
        if parent is None and job_dir != sweep_dir:
            parent = sweep_parent(tracking_uri, payload["experiment_name"], sweep_dir)
        outcome_path = job_dir / "outcome.json"
        outcome = json.loads(outcome_path.read_text()) if outcome_path.exists() else {}
        experiment_id = ensure_experiment(tracking_uri, payload["experiment_name"])
        existing = [
            r
            for r in find_runs(tracking_uri, experiment_id, {JOB_DIR_TAG: str(job_dir)})
            if "tracking_error" not in r.data.tags
        ]
        run_id = existing[0].info.run_id if existing else upload(tracking_uri, job_dir, parent)
        counts["already_in_store" if existing else "uploaded"] += 1
        if outcome:
            outcome["run_id"] = run_id
            with contextlib.suppress(KeyError):
                del outcome["tracking_error"]
            outcome_path.write_text(json.dumps(outcome, indent=2))
    return counts
