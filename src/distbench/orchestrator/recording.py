"""The record step: the spooled MLflow run (tracking/spool.py), outcome.json, then MLflow, in
that order: an orchestrator killed at any point leaves either nothing of the job's end (`sync`
records it as orchestrator_lost) or its spooled run, which `sync` uploads. The job's child run
is created RUNNING while its ranks start (start_live) and filled at the end: params (the job's
tree, secrets masked), metrics, series, tags, artifacts. A store that is down or broken costs
nothing measured: the run stays spooled in the job dir for `distbench sync`; a job dir that
cannot be written (read-only, a full disk) is logged directly, into its live run, and its
outcome is kept in memory for the sweep's end (tracking/job_outcomes.py).

    python -c "from distbench.orchestrator.recording import logged_params; \\
print(logged_params({'fault': {'kind': 'none'}, 'world_size': 2}))"
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from distbench.files import write_json_atomic
from distbench.job import Job
from distbench.orchestrator.naming import NAME_TAGS, workload_tag_keys
from distbench.orchestrator.outcome import JobContext, Outcome
from distbench.orchestrator.refused import Refused
from distbench.tracking.dashboard import with_headline, without_prediction_inputs
from distbench.tracking.live import now_ms
from distbench.tracking.signature import SIGNATURE_TAG
from distbench.workloads import Measured

LIVE_START_WAIT_ON_CANCEL_S = 5.0
# Outcome entries that become run tags when present (public: users filter on them), beside the
# workload's own (WorkloadSpec.tag_keys).
TAGGED_OUTCOME_KEYS = (
    "failure_kind",
    "failure_reason",
    "backend",
    "mfu_error",
    "world_size_requested",
    "rank_launcher",
    "slurm_job_id",
    "tp_across_nodes",
    "repeat",
    "oversubscribed",
    "oversubscribed_reason",
)
ARTIFACTS = (
    "resolved.yaml",
    "result.json",
    "outcome.json",
    "progress.jsonl",
    "workers.stdout.log",
    "workers.stderr.log",
    "stderr_tail.txt",
)
# The live run each job of this process started (its attempt: read_live's entry), by job dir: a
# job dir that vanishes or cannot be read at the end still fills that run.
_LIVE_ATTEMPTS: dict[str, dict[str, Any]] = {}


def wall_ms(started: float) -> int:
    """The wall clock (ms since the epoch) of the monotonic instant `started`."""
    return int((time.time() - (time.monotonic() - started)) * 1000)


def run_tags(
    job: Job | Refused,
    outcome: Outcome,
    job_dir: Path,
    project_dir: Path,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """A job's run tags from its outcome: what names it, the software and machine, MLflow's
    reserved tags (source, user, commit), its dir and signature, `extra` (the workload's), then
    the outcome's tagged entries (TAGGED_OUTCOME_KEYS and the workload's tag keys)."""
    from distbench.probes.detect import detect_tags
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.spool import JOB_DIR_TAG
    from distbench.tracking.sweep import reserved_tags, software_tags

    entries = outcome.as_dict()
    tags = {k: str(entries[k]) for k in NAME_TAGS if k in entries}
    tags.update(software_tags(project_dir))
    tags.update(reserved_tags(project_dir))
    tags.update(detect_tags())
    tags.update({JOB_DIR_TAG: str(job_dir), SIGNATURE_TAG: str(outcome.signature)})
    tags.update(extra or {})
    for key in (*TAGGED_OUTCOME_KEYS, *workload_tag_keys(job)):
        if entries.get(key):
            tags[key] = mask_text(str(entries[key]))[:5000]
    return tags


def logged_params(config_tree: dict[str, Any]) -> dict[str, str]:
    """The run's params: the job's tree flattened (it holds only the active workload's node),
    without `fault.*` when no fault is injected; the whole tree stays in resolved.yaml."""
    from distbench.tracking.mlflow_store import flatten

    fault = config_tree.get("fault")
    injected = isinstance(fault, dict) and fault.get("kind") not in (None, "none")
    tree = {k: v for k, v in config_tree.items() if k != "fault" or injected}
    return without_prediction_inputs(flatten(tree))  # measured.* stays in resolved.yaml


def stamped_series(
    series: list[tuple[str, float, int]], job_dir: Path
) -> list[tuple[str, float, int] | tuple[str, float, int, int]]:
    """The workload's series, each point of a field rank 0's progress lines carry (step_time_s,
    loss) stamped with the time its step ended (the others are stamped at the end)."""
    from distbench.tracking.live import PROGRESS_FILE, parse_lines, step_timestamps

    try:
        stamps = step_timestamps(parse_lines((job_dir / PROGRESS_FILE).read_text()))
    except OSError:
        stamps = {}
    return [
        (k, v, step, stamps[(k, step)]) if (k, step) in stamps else (k, v, step)
        for k, v, step in series
    ]


@dataclass
class LiveStart:
    """The job's child run being created beside its ranks (a thread: the store's first
    connection takes seconds)."""

    future: Future
    pool: ThreadPoolExecutor
    label: str

    def stop(self, cancelled: bool) -> None:
        """Stop the live run once it has started. A cancelled job waits for its start at most
        LIVE_START_WAIT_ON_CANCEL_S (SIGKILL follows SIGTERM soon): a run that starts later is
        left RUNNING, and `distbench sync` ends it from the job dir."""
        try:
            live = self.future.result(timeout=LIVE_START_WAIT_ON_CANCEL_S if cancelled else None)
            if live is not None:
                live.stop()
        except Exception as exc:  # the job's outcome is recorded at the end all the same
            print(
                f"distbench: {self.label}: the live MLflow run was not stopped "
                f"({type(exc).__name__})"
            )
        finally:
            self.pool.shutdown(wait=False)


def start_live(job: Job, uri: str | None, outcome: Outcome, ctx: JobContext) -> LiveStart:
    """Start creating the job's RUNNING child run in a thread (start_live_run)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-run")
    future = pool.submit(_start_live_run, job, uri, outcome, ctx)
    return LiveStart(future, pool, ctx.label)


def _start_live_run(job: Job, uri: str | None, outcome: Outcome, ctx: JobContext) -> Any:
    """The job's child run, created RUNNING now and streaming (tracking/live.py), or None
    (tracking off, or the store down: the run is then logged at the end or spooled)."""
    from distbench.tracking.live import read_live, start_live_run
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.sweep import PARENT_RUN_ENV

    if uri is None:
        return None
    try:
        live = start_live_run(
            uri,
            job.tracking.experiment_name,
            outcome.run_name,
            run_tags(job, outcome, ctx.job_dir, ctx.project_dir),
            ctx.job_dir,
            wall_ms(ctx.started),
            os.environ.get(PARENT_RUN_ENV),
            float(job.tracking.system_metrics_interval_s or 0.0),
        )
        _LIVE_ATTEMPTS[str(ctx.job_dir)] = read_live(ctx.job_dir) or {}
        return live
    except Exception as exc:  # the store is down or broken: the job runs, its run is spooled
        why = mask_text(f"{type(exc).__name__}: {str(exc).strip()[:300]}").splitlines()[0]
        print(f"distbench: {ctx.label}: no live MLflow run ({why}); it is logged at the end")
        return None


def extra_artifacts(job: Job | Refused, upload_dir: Path) -> list[Path]:
    """Files a run logs besides the job dir's, written by its workload (WorkloadSpec.artifacts;
    train on DeepSpeed: ds_config.json); none for a refused config."""
    if isinstance(job, Refused) or job.spec.artifacts is None:
        return []
    return job.spec.artifacts(job, upload_dir)


def record(
    job: Job | Refused,
    outcome: Outcome,
    measured: Measured,
    ctx: JobContext,
    log_now: bool = True,
    times_ms: tuple[int, int] | None = None,
) -> Outcome:
    """Spool the MLflow run, write outcome.json, then log the run (unless log_now=False): into
    the run the job created when it started (its attempt), else a new one; a tracking failure
    is reported (the run stays spooled for `distbench sync`), never raised. A job dir that
    cannot be written (read-only, a full disk, removed meanwhile) does not lose the run: it is
    logged directly. The run spans the job's wall clock (`times_ms` when given)."""
    from distbench.tracking.secrets_mask import mask_tree
    from distbench.tracking.sweep import resolve_tracking_uri

    outcome.orchestrator_time_s = time.monotonic() - ctx.started
    uri = resolve_tracking_uri(job.tracking, Path.cwd())
    if uri is None:
        write_outcome(ctx.job_dir, outcome)
        return outcome
    artifacts = [ctx.job_dir / name for name in ARTIFACTS if name != "resolved.yaml"]
    artifacts += measured.artifacts
    try:  # the payload first: a kill after outcome.json finds the run spooled
        config_tree = mask_tree(job.tree())  # only the active workload's node, or as composed
        payload = run_payload(job, outcome, measured, ctx, config_tree, times_ms)
        spool(job, outcome, payload, config_tree, artifacts, ctx.job_dir)
    finally:  # whatever raised above, the job has its outcome
        write_outcome(ctx.job_dir, outcome)
    if not log_now and outcome.spool_error is None:
        return outcome
    log_run(uri, outcome, payload, artifacts, ctx.job_dir)
    write_outcome(ctx.job_dir, outcome)
    _LIVE_ATTEMPTS.pop(str(ctx.job_dir), None)
    return outcome


def run_payload(
    job: Job | Refused,
    outcome: Outcome,
    measured: Measured,
    ctx: JobContext,
    config_tree: dict[str, Any],
    times_ms: tuple[int, int] | None,
) -> dict[str, Any]:
    """The spooled run: params (`config_tree`, the job's tree with its secrets masked),
    metrics, series, points, tags, its parent, its time span, the job's outcome and the
    attempt the live run started (a new one without a live run)."""
    from distbench.tracking.live import read_live, read_points
    from distbench.tracking.sweep import PARENT_RUN_ENV

    start_ms, end_ms = times_ms or (wall_ms(ctx.started), now_ms())
    live = read_live(ctx.job_dir) or _LIVE_ATTEMPTS.get(str(ctx.job_dir)) or {}
    return {
        "experiment_name": job.tracking.experiment_name,
        "run_name": outcome.run_name,
        "params": logged_params(config_tree),
        "metrics": with_headline(measured.metrics),  # + headline/*: MLflow's first charts
        "series": stamped_series(measured.series, ctx.job_dir),
        "points": read_points(ctx.job_dir),
        "tags": run_tags(job, outcome, ctx.job_dir, ctx.project_dir, extra=measured.tags),
        "artifacts": [],
        "failed": outcome.status != "FINISHED",
        "parent_run_id": os.environ.get(PARENT_RUN_ENV),
        "start_time_ms": start_ms,
        "end_time_ms": end_ms,
        "outcome": outcome.as_dict(),  # `sync` writes it back if the job died before it did
        "attempt_id": live.get("attempt_id") or uuid.uuid4().hex,
        **{k: live[k] for k in ("attempt", "previous_run_id") if live.get(k)},
    }


def spool(
    job: Job | Refused,
    outcome: Outcome,
    payload: dict[str, Any],
    config_tree: dict[str, Any],
    artifacts: list[Path],
    job_dir: Path,
) -> None:
    """Write the run's payload into the job dir, with the config (`config_tree`, its secrets
    masked) and the workload's artifacts in upload/; a dir that cannot hold it sets the
    outcome's spool_error."""
    from distbench.tracking.spool import write_payload

    try:
        upload_dir = job_dir / "upload"  # what is logged: the config with its secrets masked
        upload_dir.mkdir(exist_ok=True)
        masked_config = upload_dir / "resolved.yaml"
        masked_config.write_text(OmegaConf.to_yaml(OmegaConf.create(config_tree)))
        payload["artifacts"] = [
            str(p.relative_to(job_dir))
            for p in [masked_config, *extra_artifacts(job, upload_dir), *artifacts]
            if p.is_relative_to(job_dir)
        ]
        write_payload(job_dir, payload)
    except OSError as exc:
        outcome.spool_error = f"{type(exc).__name__}: {exc}"[:2000]
        print(f"distbench: cannot spool in {job_dir} ({outcome.spool_error}); logging directly")


def log_run(
    uri: str, outcome: Outcome, payload: dict[str, Any], artifacts: list[Path], job_dir: Path
) -> None:
    """Upload the spooled run (or, without a spool, log it directly); the outcome gets its run
    id, or the tracking error (the run stays spooled for `distbench sync`)."""
    from distbench.tracking.secrets_mask import mask_text
    from distbench.tracking.spool import upload

    try:
        if outcome.spool_error is not None:
            outcome.run_id = _log_unspooled(uri, payload, artifacts, outcome.spool_error, job_dir)
        else:
            outcome.run_id = upload(uri, job_dir)
    except Exception as exc:  # nothing measured is lost: the run is spooled in the job dir
        outcome.tracking_error = mask_text(f"{type(exc).__name__}: {exc}")[:2000]
        print(
            f"distbench: could not log to MLflow ({outcome.tracking_error[:300]}); "
            f"spooled in {job_dir} for `distbench sync`"
        )


def write_outcome(job_dir: Path, outcome: Outcome) -> None:
    """outcome.json, unless the job dir cannot be written: the run is then logged directly and
    the outcome kept for the sweep's end (job_outcomes.with_unwritten)."""
    from distbench.tracking.job_outcomes import remember_unwritten

    try:
        write_json_atomic(job_dir / "outcome.json", outcome.as_dict())
    except OSError as exc:
        if outcome.spool_error is None:
            outcome.spool_error = f"{type(exc).__name__}: {exc}"[:2000]
        remember_unwritten(job_dir, outcome.as_dict())
    else:
        remember_unwritten(job_dir, None)


def _log_unspooled(
    uri: str, payload: dict[str, Any], artifacts: list[Path], spool_error: str, job_dir: Path
) -> str:
    """Log a run whose job dir could not hold its spool: straight to the store (into the run
    the job started, when it did), with the job dir's files that exist as artifacts and the
    reason in a `spool_error` tag."""
    from distbench.tracking.spool import upload_payload

    existing = [p for p in artifacts if p.is_file()]
    tags = {"spool_error": spool_error}
    return upload_payload(uri, job_dir, payload, existing, tags)[0]
