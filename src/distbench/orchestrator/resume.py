"""resume=true: a job whose signature already has a FINISHED run (or a FAILED one, unless
retry_failed=true) is skipped, and stands in this sweep by that earlier run: its outcome takes
the run's id, status and metrics, and the run a tag naming this sweep's parent (the report of
the sweep then shows the whole grid). A run of a sweep whose process died (SIGKILL) is still
RUNNING: that sweep is closed first (tracking/lost.py: its parent KILLED, its unfinished jobs
orchestrator_lost), and a job whose orchestrator was lost is rerun (nothing was decided).

With repeats=N the decision is per repeat (the run tagged `repeat`=i; a run without the tag, of
a sweep with repeats=1, counts as repeat 1): the repeats that ran stand in this sweep (tagged
like a skipped job's run), only the missing ones run, numbered as in a fresh sweep, and the last
one run logs the spread across all of them. A job is skipped once all N ran.

    python run.py -m strategy=dp,zero3 world_size=2 resume=true   # reruns nothing that finished
    python run.py -m strategy=dp world_size=2 repeats=3 resume=true   # tops up missing repeats
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distbench.files import write_json_atomic
from distbench.job import Job
from distbench.orchestrator.naming import workload_tag_keys
from distbench.orchestrator.outcome import JobContext, Outcome
from distbench.orchestrator.refused import Refused
from distbench.orchestrator.repeats import REPEAT_TAG, missing_repeats
from distbench.orphans import LOST_KIND
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX, SIGNATURE_TAG

REFUSED_KIND = "invalid_config"  # a refusal is of the config, not of one repeat


@dataclass
class Resumed:
    """What resume=true found for a job: skipped whole, or the repeats that already ran and
    stand in this sweep (repeat number → an outcome with its earlier run's status and
    metrics); nothing found: run every repeat."""

    skipped: bool = False
    earlier: dict[int, Outcome] = field(default_factory=dict)


def signature_runs(tracking: Any, signature: str) -> list[Any]:
    """The runs with this signature, newest first; the sweeps known dead that left one of them
    RUNNING are closed first."""
    from distbench.tracking.lost import close_dead_runs
    from distbench.tracking.mlflow_store import ensure_experiment, find_runs
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking, Path.cwd())
    if uri is None:
        return []
    experiment_id = ensure_experiment(uri, tracking.experiment_name)
    runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    if close_dead_runs(uri, runs, by="resume=true"):  # their statuses changed
        runs = find_runs(uri, experiment_id, {SIGNATURE_TAG: signature})
    return runs


def _newest(runs: Sequence[Any]) -> Any | None:
    """The newest FINISHED run, else the newest run, else None."""
    finished = [r for r in runs if r.info.status == "FINISHED"]
    return (finished or list(runs) or [None])[0]


def previous_run(tracking: Any, signature: str) -> Any | None:
    """The newest run with this signature (a FINISHED one first), if the store has one; the
    sweeps known dead that left one of them RUNNING are closed first."""
    return _newest(signature_runs(tracking, signature))


def _skip_reason(previous: Any, signature: str, retry_failed: bool) -> str | None:
    """Why an earlier run decides its job (or repeat), or None when it must run again."""
    status, run_id = previous.info.status, previous.info.run_id
    if previous.data.tags.get("failure_kind") == LOST_KIND:
        return None  # its orchestrator died during the job: nothing was decided, run it
    if status == "FINISHED":
        return f"already FINISHED as run {run_id} (signature {signature})"
    if status == "FAILED" and not retry_failed:
        return f"previous run {run_id} FAILED; retry_failed=true reruns it"
    return None


def resume_decision(job: Job | Refused, signature: str) -> tuple[str, Any] | None:
    """(why this job is skipped under resume=true, the earlier run), or None to run it."""
    previous = previous_run(job.tracking, signature) if job.resume else None
    if previous is None:
        return None
    reason = _skip_reason(previous, signature, job.retry_failed)
    return (reason, previous) if reason else None


def repeat_of(run: Any) -> int:
    """The repeat a run was (its `repeat` tag; 1 for a run of a sweep with repeats=1)."""
    tag = str(run.data.tags.get(REPEAT_TAG, "1"))
    return int(tag) if tag.isdigit() else 1


def repeats_ran(runs: Sequence[Any], repeats: int, retry_failed: bool) -> dict[int, Any]:
    """{repeat: its earlier run} for each of repeats 1..N whose newest run (a FINISHED one
    first) decides it, as a whole job's run would: FINISHED, or FAILED unless retry_failed
    (never orchestrator_lost)."""
    ran = {}
    for repeat in range(1, repeats + 1):
        previous = _newest([r for r in runs if repeat_of(r) == repeat])
        if previous is not None and _skip_reason(previous, "", retry_failed):
            ran[repeat] = previous
    return ran


def adopt_previous_run(job: Job | Refused, outcome: Outcome, previous: Any) -> None:
    """A skipped job stands in this sweep by its earlier run: the outcome gets that run's id,
    status, metrics and failure and workload tags (the summary shows them), and the run a tag
    naming this sweep's parent (the report of this sweep includes it)."""
    outcome.previous_run_id = previous.info.run_id
    outcome.previous_status = previous.info.status
    outcome.metrics = dict(previous.data.metrics)
    kept = ("failure_kind", "failure_reason", *workload_tag_keys(job))
    outcome.update({k: previous.data.tags[k] for k in kept if k in previous.data.tags})
    _tag_resumed_into(job, previous, outcome.job_dir)


def _tag_resumed_into(job: Job | Refused, previous: Any, job_dir: str | None) -> None:
    """Tag an earlier run `distbench.resumed_into.<this sweep's parent>` = the job's dir."""
    from distbench.tracking.mlflow_store import client
    from distbench.tracking.sweep import PARENT_RUN_ENV, resolve_tracking_uri

    parent = os.environ.get(PARENT_RUN_ENV)
    uri = resolve_tracking_uri(job.tracking, Path.cwd())
    if parent and uri:
        tag = f"{RESUMED_INTO_TAG_PREFIX}{parent}"
        client(uri).set_tag(previous.info.run_id, tag, job_dir or "")


def _earlier_repeat(previous: Any, repeat: int, label: str) -> Outcome:
    """The outcome an earlier run of repeat `repeat` stands for: its status and metrics (the
    spread across repeats counts them)."""
    outcome = Outcome(f"{label} repeat {repeat}", status=previous.info.status)
    outcome.previous_run_id = previous.info.run_id
    outcome.metrics = dict(previous.data.metrics)
    outcome.update({REPEAT_TAG: str(repeat)})
    return outcome


def _decide(
    job: Job | Refused, outcome: Outcome, repeats: int
) -> tuple[str | None, Any, dict[int, Any]]:
    """(why the job is skipped whole, the run it stands by, {repeat: earlier run} of a job
    with repeats that partly ran); (None, None, {}) to run it all."""
    signature = outcome.signature or ""
    if repeats == 1 or isinstance(job, Refused):
        decision = resume_decision(job, signature)
        return (*decision, {}) if decision else (None, None, {})
    ran = repeats_ran(signature_runs(job.tracking, signature), repeats, job.retry_failed)
    refused = next(
        (r for r in ran.values() if r.data.tags.get("failure_kind") == REFUSED_KIND), None
    )
    if refused is not None or len(ran) == repeats:
        last = refused or ran[repeats]
        return _skip_reason(last, signature, job.retry_failed), last, ran
    return None, None, ran


def resume_job(job: Job | Refused, outcome: Outcome, ctx: JobContext, repeats: int = 1) -> Resumed:
    """What resume=true decides for this job (nothing without it): skipped whole (its outcome
    filled from its earlier run and written), or the repeats that already ran. A store that
    cannot be read skips nothing: the job runs."""
    if not job.resume:
        return Resumed()
    try:
        reason, previous, ran = _decide(job, outcome, repeats)
    except Exception as exc:  # an unreachable store must not stop the sweep: run the job
        print(f"distbench: {ctx.label}: resume check failed ({type(exc).__name__}); running it")
        return Resumed()
    if reason is None:
        return Resumed(earlier=_stand_in(job, outcome, ctx, ran, repeats))
    print(f"distbench: {ctx.label} skipped: {reason}", flush=True)
    outcome.status, outcome.skipped_reason = "SKIPPED", reason
    try:
        adopt_previous_run(job, outcome, previous)
        for run in ran.values():
            if run is not previous:
                _tag_resumed_into(job, run, outcome.job_dir)
    except Exception as exc:  # the skip stands; only the link to the earlier run is missing
        print(f"distbench: {ctx.label}: could not link run {previous.info.run_id} ({exc})")
    write_json_atomic(ctx.job_dir / "outcome.json", outcome.as_dict())
    return Resumed(skipped=True)


def _stand_in(
    job: Job | Refused, outcome: Outcome, ctx: JobContext, ran: dict[int, Any], repeats: int
) -> dict[int, Outcome]:
    """The repeats that already ran, as outcomes, each run tagged into this sweep; one line."""
    if not ran:
        return {}
    missing = missing_repeats(repeats, ran)
    print(
        f"distbench: {ctx.label}: repeats {', '.join(map(str, sorted(ran)))} of {repeats} "
        f"already ran (runs {', '.join(r.info.run_id for r in ran.values())}); running "
        f"repeat{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}",
        flush=True,
    )
    for run in ran.values():
        try:
            _tag_resumed_into(job, run, outcome.job_dir)
        except Exception as exc:  # only the link is missing: the report of this sweep omits it
            print(f"distbench: {ctx.label}: could not link run {run.info.run_id} ({exc})")
    return {repeat: _earlier_repeat(run, repeat, ctx.label) for repeat, run in ran.items()}


def skipped(job: Job | Refused, outcome: Outcome, ctx: JobContext) -> bool:
    """Whether resume=true skips this job (a job of one repeat); see resume_job."""
    return resume_job(job, outcome, ctx).skipped
