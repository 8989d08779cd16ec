"""resume=true: a job whose signature already has a FINISHED run (or a FAILED one, unless
retry_failed=true) is skipped, and stands in this sweep by that earlier run: its outcome takes
the run's id, status and metrics, and the run a tag naming this sweep's parent (the report of
the sweep then shows the whole grid). A run of a sweep whose process died (SIGKILL) is still
RUNNING: that sweep is closed first (tracking/lost.py: its parent KILLED, its unfinished jobs
orchestrator_lost), and a job whose orchestrator was lost is rerun (nothing was decided).

    python run.py -m strategy=dp,zero3 world_size=2 resume=true   # reruns nothing that finished
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from distbench.files import write_json_atomic
from distbench.job import Job
from distbench.orchestrator.naming import workload_tag_keys
from distbench.orchestrator.outcome import JobContext, Outcome
from distbench.orchestrator.refused import Refused
from distbench.orphans import LOST_KIND
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX, SIGNATURE_TAG


def previous_run(tracking: Any, signature: str) -> Any | None:
    """The newest run with this signature (a FINISHED one first), if the store has one; the
    sweeps known dead that left one of them RUNNING are closed first."""
    from distbench.tracking.lost import close_dead_runs
    from distbench.tracking.mlflow_store import ensure_experiment, find_runs
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking, Path.cwd())
    if uri is None:
        return None
    experiment_id = ensure_experiment(uri, tracking.experiment_name)
    runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    if close_dead_runs(uri, runs, by="resume=true"):  # their statuses changed
        runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    finished = [r for r in runs if r.info.status == "FINISHED"]
    return (finished or runs or [None])[0]


def resume_decision(job: Job | Refused, signature: str) -> tuple[str, Any] | None:
    """(why this job is skipped under resume=true, the earlier run), or None to run it."""
    previous = previous_run(job.tracking, signature) if job.resume else None
    if previous is None:
        return None
    status, run_id = previous.info.status, previous.info.run_id
    if previous.data.tags.get("failure_kind") == LOST_KIND:
        return None  # its orchestrator died during the job: nothing was decided, run it
    if status == "FINISHED":
        return f"already FINISHED as run {run_id} (signature {signature})", previous
    if status == "FAILED" and not job.retry_failed:
        return f"previous run {run_id} FAILED; retry_failed=true reruns it", previous
    return None


def adopt_previous_run(job: Job | Refused, outcome: Outcome, previous: Any) -> None:
    """A skipped job stands in this sweep by its earlier run: the outcome gets that run's id,
    status, metrics and failure and workload tags (the summary shows them), and the run a tag
    naming this sweep's parent (the report of this sweep includes it)."""
    from distbench.tracking.mlflow_store import client
    from distbench.tracking.sweep import PARENT_RUN_ENV, resolve_tracking_uri

    outcome.previous_run_id = previous.info.run_id
    outcome.previous_status = previous.info.status
    outcome.metrics = dict(previous.data.metrics)
    kept = ("failure_kind", "failure_reason", *workload_tag_keys(job))
    outcome.update({k: previous.data.tags[k] for k in kept if k in previous.data.tags})
    parent = os.environ.get(PARENT_RUN_ENV)
    uri = resolve_tracking_uri(job.tracking, Path.cwd())
    if parent and uri:
        client(uri).set_tag(
            previous.info.run_id, f"{RESUMED_INTO_TAG_PREFIX}{parent}", outcome.job_dir
        )


def skipped(job: Job | Refused, outcome: Outcome, ctx: JobContext) -> bool:
    """Whether resume=true skips this job; a skipped job's outcome is filled from its earlier
    run and written. A store that cannot be read skips nothing: the job runs."""
    try:
        decision = resume_decision(job, outcome.signature or "")
    except Exception as exc:  # an unreachable store must not stop the sweep: run the job
        print(f"distbench: {ctx.label}: resume check failed ({type(exc).__name__}); running it")
        return False
    if decision is None:
        return False
    reason, previous = decision
    print(f"distbench: {ctx.label} skipped: {reason}", flush=True)
    outcome.status, outcome.skipped_reason = "SKIPPED", reason
    try:
        adopt_previous_run(job, outcome, previous)
    except Exception as exc:  # the skip stands; only the link to the earlier run is missing
        print(f"distbench: {ctx.label}: could not link run {previous.info.run_id} ({exc})")
    write_json_atomic(ctx.job_dir / "outcome.json", outcome.as_dict())
    return True
