"""Nothing measured is lost: every job spools its MLflow run to JOB_DIR/mlflow_run.json before
logging it, and `distbench sync SWEEP_DIR` uploads the runs that did not land (tracking server
down, sqlite broken), exactly once.

Each spooled run is one *attempt* of its job, named by a random `attempt_id` written into the
payload: the de-duplication is on the attempt (tag `distbench.attempt_id`), so a job rerun in the
same dir (resume=true retry_failed=true) is a new run, numbered (`distbench.attempt`) and linked
to the one before (`distbench.previous_run_id`), while uploading one attempt twice, or from two
`sync` at once (a file lock per job dir), logs it once. Paths are resolved before they are
tagged or looked up, so a sweep dir reached through a symlink is the same sweep.

A job spools its run before it writes outcome.json (the payload carries the outcome): an
orchestrator killed between the two leaves a payload that `sync` uploads and an outcome.json it
writes back. A sweep's parent run names the process that runs the sweep (SWEEP_OWNER_TAG), so
that `sync` ends it KILLED once that process is gone, whatever job it died in.

    distbench sync multirun/2026-11-22/10-00-00 [--tracking-uri URI]
"""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

from distbench.files import file_lock, write_json_atomic
from distbench.tracking.live import now_ms
from distbench.tracking.mlflow_store import (
    StoreUnavailable,
    client,
    ensure_experiment,
    find_runs,
    log_child_run,
    retry,
)

PAYLOAD = "mlflow_run.json"
LOCK = ".mlflow_run.lock"
JOB_DIR_TAG = "distbench.job_dir"
SWEEP_DIR_TAG = "distbench.sweep_dir"
ATTEMPT_ID_TAG = "distbench.attempt_id"
ATTEMPT_TAG = "distbench.attempt"
PREVIOUS_RUN_TAG = "distbench.previous_run_id"
# On a run created RUNNING when its job started (live.py) until its upload fills and ends it.
INCOMPLETE_TAG = "distbench.incomplete"
# On a sweep's parent run: the sweep's process (orphans.owner_record(), as JSON).
SWEEP_OWNER_TAG = "distbench.sweep_owner"
# On a parent run that `distbench sync` made: its sweep never reached the store.
SYNCED_TAG = "synced"
OUTCOME = "outcome.json"
REQUIRED_KEYS = ("experiment_name", "run_name", "params", "metrics", "tags", "artifacts")


class SpoolError(ValueError):
    """A spooled run that cannot be read (truncated, not JSON, keys missing)."""


def write_payload(job_dir: Path, payload: dict[str, Any]) -> None:
    """Spool a run: experiment_name, run_name, params, metrics, series, tags, artifacts (paths
    relative to the job dir), failed, parent_run_id; optional: attempt_id (a new random one
    when absent: each call is a new attempt), attempt (its number), previous_run_id,
    start_time_ms / end_time_ms (the job's wall clock), points (stepped metrics with their
    timestamps: name, value, step, ms; a series entry may carry its ms too).
    Written atomically: a job killed meanwhile leaves the old payload or the new one."""
    payload = {**payload, "attempt_id": payload.get("attempt_id") or uuid.uuid4().hex}
    write_json_atomic(job_dir / PAYLOAD, payload)


def read_payload(job_dir: Path) -> dict[str, Any]:
    """The spooled run of `job_dir`; SpoolError (one line) when it is unreadable."""
    try:
        payload = json.loads((job_dir / PAYLOAD).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpoolError(f"{job_dir / PAYLOAD}: unreadable ({exc})") from exc
    missing = [k for k in REQUIRED_KEYS if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise SpoolError(f"{job_dir / PAYLOAD}: incomplete (no {', '.join(missing)})")
    return payload


def job_lock(job_dir: Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on a job dir while its run is looked up and uploaded, so that two
    `sync` (or a sync and the job itself) do not both log it."""
    return file_lock(job_dir / LOCK)


def _runs_of_job_dir(tracking_uri: str, experiment_id: str, job_dir: Path) -> list[Any]:
    """Runs tagged with this job dir, resolved or as it was written (runs of older versions),
    newest first."""
    names = dict.fromkeys((str(job_dir.resolve()), str(job_dir.absolute())))
    runs = [
        r for name in names for r in find_runs(tracking_uri, experiment_id, {JOB_DIR_TAG: name})
    ]
    unique = {r.info.run_id: r for r in runs}
    return sorted(unique.values(), key=lambda r: r.info.start_time or 0, reverse=True)


def _attempt_tags(
    tracking_uri: str, earlier: list[Any], attempt: int | None, previous_run_id: str | None
) -> dict[str, str]:
    """distbench.attempt (n) and distbench.previous_run_id of a new attempt: the given ones,
    else those of the newest complete run of an earlier attempt in its job dir."""
    earlier = [r for r in earlier if "tracking_error" not in r.data.tags]
    previous = next((r for r in earlier if r.info.run_id == previous_run_id), None)
    if previous_run_id and previous is None:
        try:  # an earlier attempt in another sweep dir (resume=true into a new dir)
            previous = retry(
                lambda: client(tracking_uri).get_run(previous_run_id), tracking_uri=tracking_uri
            )
        except StoreUnavailable:
            raise
        except Exception:  # deleted meanwhile: still name it, number on
            previous = None
    elif previous is None and earlier:
        previous = earlier[0]
        previous_run_id = previous.info.run_id
    if not attempt:
        tag = previous.data.tags.get(ATTEMPT_TAG, "1") if previous else "0"
        attempt = (int(tag) if tag.isdigit() else 1) + 1
    tags = {ATTEMPT_TAG: str(attempt)}
    if previous_run_id:
        tags[PREVIOUS_RUN_TAG] = previous_run_id
    return tags


def next_attempt_tags(tracking_uri: str, experiment_id: str, job_dir: Path) -> dict[str, str]:
    """The attempt tags of a new attempt of the job in job_dir, numbered on from the newest
    complete run tagged with that dir. Call it holding job_lock(job_dir)."""
    earlier = _runs_of_job_dir(tracking_uri, experiment_id, job_dir)
    return _attempt_tags(tracking_uri, earlier, None, None)


def upload(
    tracking_uri: str,
    job_dir: Path,
    parent_run_id: str | None = None,
    attempt: int | None = None,
    previous_run_id: str | None = None,
) -> str:
    """Log the spooled run of `job_dir` unless the store already has this attempt; returns its
    run id. A run left incomplete by an earlier failed upload of the attempt is replaced.

    The attempt's number and the run it follows are the payload's `attempt` and
    `previous_run_id` (or these arguments) when given, else found in the store: the runs of
    earlier attempts in the same job dir."""
    return upload_attempt(tracking_uri, job_dir, parent_run_id, attempt, previous_run_id)[0]


def upload_attempt(
    tracking_uri: str,
    job_dir: Path,
    parent_run_id: str | None = None,
    attempt: int | None = None,
    previous_run_id: str | None = None,
) -> tuple[str, bool]:
    """upload(), and whether this attempt was already in the store."""
    job_dir = job_dir.absolute()
    payload = read_payload(job_dir)
    artifacts = [job_dir / name for name in payload["artifacts"]]
    return upload_payload(
        tracking_uri, job_dir, payload, artifacts, {}, parent_run_id, attempt, previous_run_id
    )


def upload_payload(
    tracking_uri: str,
    job_dir: Path,
    payload: dict[str, Any],
    artifacts: list[Path],
    extra_tags: dict[str, str],
    parent_run_id: str | None = None,
    attempt: int | None = None,
    previous_run_id: str | None = None,
) -> tuple[str, bool]:
    """Log a payload (read from `job_dir`, or held in memory when the job dir could not take
    it) with `artifacts` and `extra_tags`, unless the store has its attempt; the run its job
    created when it started is filled, not duplicated. Returns (run id, already there)."""
    job_dir = job_dir.absolute()
    experiment_id = ensure_experiment(tracking_uri, payload["experiment_name"])
    attempt_id = payload.get("attempt_id")
    with job_lock(job_dir):
        of_job_dir = _runs_of_job_dir(tracking_uri, experiment_id, job_dir)
        if attempt_id:  # wherever the dir was (moved, through a symlink), it is this attempt
            same = find_runs(tracking_uri, experiment_id, {ATTEMPT_ID_TAG: attempt_id})
        else:  # spooled by an older version: one run per job dir
            same = of_job_dir
        payload = {**payload, "tags": {**payload["tags"], **extra_tags}}
        for run in same:
            if INCOMPLETE_TAG in run.data.tags:  # created RUNNING when the job started: fill it
                return _fill_live(tracking_uri, run, payload, job_dir, artifacts), False
            if "tracking_error" not in run.data.tags:
                return run.info.run_id, True
            retry(
                lambda run=run: client(tracking_uri).delete_run(run.info.run_id),
                tracking_uri=tracking_uri,
            )
        tags = {**payload["tags"], JOB_DIR_TAG: str(job_dir.resolve())}
        if attempt_id:
            tags.update(
                _attempt_tags(
                    tracking_uri,
                    [r for r in of_job_dir if r.data.tags.get(ATTEMPT_ID_TAG) != attempt_id],
                    payload.get("attempt") or attempt,
                    payload.get("previous_run_id") or previous_run_id,
                )
            )
            tags[ATTEMPT_ID_TAG] = attempt_id
        payload = {**payload, "parent_run_id": parent_run_id or payload.get("parent_run_id")}
        return log_payload(tracking_uri, experiment_id, payload, tags, artifacts), False


def _payload_points(payload: dict[str, Any]) -> tuple[list[tuple], list[tuple]]:
    """(series without a timestamp, points with one) of a payload: its `points`, and each
    series entry stamped (4 items) or not (3, spooled by older versions)."""
    series = [tuple(s) for s in payload.get("series", [])]
    points = [tuple(p) for p in payload.get("points", [])]
    return [s for s in series if len(s) == 3], points + [s for s in series if len(s) == 4]


def _not_streamed(tracking_uri: str, run_id: str, points: list[tuple]) -> list[tuple]:
    """The points whose (name, step) the live run does not have yet."""
    mlflow = client(tracking_uri)
    have = set()
    for key in {p[0] for p in points}:
        history = retry(
            lambda key=key: mlflow.get_metric_history(run_id, key), tracking_uri=tracking_uri
        )
        have |= {(key, m.step) for m in history}
    return [p for p in points if (p[0], p[2]) not in have]


def _fill_live(
    tracking_uri: str, run: Any, payload: dict[str, Any], job_dir: Path, artifacts: list[Path]
) -> str:
    """Fill the run a job created when it started (what it streamed stays) with the payload,
    and end it at the job's end time."""
    from distbench.tracking.mlflow_store import fill_run, stamped_metrics

    run_id = run.info.run_id
    end_ms = payload.get("end_time_ms") or now_ms()
    series, points = _payload_points(payload)
    stamped = stamped_metrics(payload["metrics"], series, end_ms) + _not_streamed(
        tracking_uri, run_id, points
    )
    tags = {**payload["tags"], JOB_DIR_TAG: str(job_dir.resolve())}
    failed = payload.get("failed", True)
    fill_run(tracking_uri, run_id, payload["params"], stamped, tags, artifacts, failed, end_ms)
    mlflow = client(tracking_uri)  # complete: a later upload finds it in the store
    retry(lambda: mlflow.delete_tag(run_id, INCOMPLETE_TAG), tracking_uri=tracking_uri)
    return run_id


def log_payload(
    tracking_uri: str,
    experiment_id: str,
    payload: dict[str, Any],
    tags: dict[str, str],
    artifacts: list[Path],
) -> str:
    """Log a spooled run's payload (what write_payload takes) as one child run; returns its id."""
    series, points = _payload_points(payload)
    return log_child_run(
        tracking_uri,
        experiment_id,
        payload["run_name"],
        params=payload["params"],
        metrics=payload["metrics"],
        tags=tags,
        artifacts=artifacts,
        failed=payload.get("failed", True),
        parent_run_id=payload.get("parent_run_id"),
        series=series,
        points=points,
        start_time_ms=payload.get("start_time_ms"),
        end_time_ms=payload.get("end_time_ms"),
    )


def sweep_parent(tracking_uri: str, experiment_name: str, sweep_dir: Path) -> str:
    """The parent run of a sweep dir: the one its sweep opened, else a new one (FINISHED)."""
    experiment_id = ensure_experiment(tracking_uri, experiment_name)
    with job_lock(sweep_dir):  # two syncs at once: one parent
        for run in find_runs(tracking_uri, experiment_id, {SWEEP_DIR_TAG: str(sweep_dir)}):
            if "mlflow.parentRunId" not in run.data.tags:
                return run.info.run_id
        mlflow = client(tracking_uri)
        run = retry(
            lambda: mlflow.create_run(
                experiment_id,
                run_name=f"sweep-{sweep_dir.name}",
                tags={SWEEP_DIR_TAG: str(sweep_dir), SYNCED_TAG: "true"},
            ),
            tracking_uri=tracking_uri,
        )
        run_id = run.info.run_id
        retry(lambda: mlflow.set_terminated(run_id, "FINISHED"), tracking_uri=tracking_uri)
        return run_id


def close_parent(
    tracking_uri: str, parent_run_id: str, outcomes: list[dict[str, Any]], sweep_lost: bool = False
) -> bool:
    """End a sweep's parent run that is still RUNNING (its sweep lost the store before closing
    it) once every job of the sweep has an outcome: log its summary as the sweep would have
    (parent.py: counts, the best run), and mark it FINISHED. A sweep whose orchestrator is
    known dead (`sweep_lost`, or the process its SWEEP_OWNER_TAG names is gone) is ended
    KILLED, the jobs it never started counted in `num_not_run`. Returns whether it was ended
    now."""
    mlflow = client(tracking_uri)
    parent = retry(lambda: mlflow.get_run(parent_run_id), tracking_uri=tracking_uri)
    if parent.info.status != "RUNNING":
        return False
    num_jobs = parent.data.tags.get("num_jobs", "")
    end_status = "FINISHED"
    if num_jobs.isdigit() and len(outcomes) < int(num_jobs):
        if not (sweep_lost or sweep_gone(parent)):
            return False  # the sweep is still running (or died elsewhere): leave it be
        end_status = "KILLED"
        not_run = str(int(num_jobs) - len(outcomes))
        retry(
            lambda: mlflow.set_tag(parent_run_id, "num_not_run", not_run),
            tracking_uri=tracking_uri,
        )
    from distbench.tracking.parent import log_summary

    log_summary(
        tracking_uri, parent_run_id, outcomes, int(num_jobs) if num_jobs.isdigit() else None
    )
    retry(lambda: mlflow.set_terminated(parent_run_id, end_status), tracking_uri=tracking_uri)
    return True


def sweep_owner_tags() -> dict[str, str]:
    """The tag naming this process as the sweep's (on the parent run it opens)."""
    from distbench.orphans import owner_record

    return {SWEEP_OWNER_TAG: json.dumps(owner_record())}


def sweep_gone(parent: Any) -> str | None:
    """Why the process that ran a sweep (its parent run's SWEEP_OWNER_TAG) is known dead;
    None when it runs, ran on another host, or the parent names none (older versions)."""
    from distbench.orphans import process_gone

    try:
        owner = json.loads(parent.data.tags.get(SWEEP_OWNER_TAG) or "null")
    except ValueError:
        return None
    return process_gone(owner)


def _write_outcome(outcome_path: Path, outcome: dict[str, Any], run_id: str) -> None:
    outcome["run_id"] = run_id
    outcome.pop("tracking_error", None)
    write_json_atomic(outcome_path, outcome)


def _read_outcome(path: Path) -> dict[str, Any] | None:
    try:
        outcome = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return outcome if isinstance(outcome, dict) else None


def sync_sweep(sweep_dir: Path, tracking_uri: str, sweep_lost: bool = False) -> dict[str, Any]:
    """Upload every spooled run of a sweep (or of one job dir) that is not in the store yet.

    Returns counts (`uploaded`, `already_in_store`), `unreadable` (one line per payload that
    could not be read or uploaded: the rest went on) and `parent_closed` (whether the sweep's
    parent run, left RUNNING, was ended; KILLED when `sweep_lost`: its orchestrator is known
    dead). FileNotFoundError when there is no such dir."""
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no such directory: {sweep_dir}")
    sweep_dir = sweep_dir.resolve()
    from distbench.tracking.job_outcomes import restore_spooled_outcomes

    restore_spooled_outcomes(sweep_dir)
    job_dirs = sorted(p.parent for p in sweep_dir.glob(f"*/{PAYLOAD}"))
    job_dirs += sorted(p.parent for p in sweep_dir.glob(f"*/repeat-*/{PAYLOAD}"))  # repeats=N
    if (sweep_dir / PAYLOAD).exists():
        job_dirs = [sweep_dir]
    result: dict[str, Any] = {
        "uploaded": 0,
        "already_in_store": 0,
        "unreadable": [],
        "parent_closed": False,
    }
    parent: str | None = None
    for job_dir in job_dirs:
        try:
            payload = read_payload(job_dir)
            if parent is None and job_dir != sweep_dir:
                parent = sweep_parent(tracking_uri, payload["experiment_name"], sweep_dir)
            run_id, existed = upload_attempt(tracking_uri, job_dir, parent)
        except SpoolError as exc:
            result["unreadable"].append(str(exc))
            continue
        result["already_in_store" if existed else "uploaded"] += 1
        outcome_path = job_dir / OUTCOME
        outcome = _read_outcome(outcome_path) if outcome_path.exists() else None
        if outcome:
            _write_outcome(outcome_path, outcome, run_id)
    if parent is not None:
        outcomes = [o for p in sweep_dir.glob(f"*/{OUTCOME}") if (o := _read_outcome(p))]
        if is_synced_parent(tracking_uri, parent):  # made here: summed up at each sync
            from distbench.tracking.parent import log_summary

            log_summary(tracking_uri, parent, outcomes, len(outcomes))
        elif not result["unreadable"]:
            result["parent_closed"] = close_parent(tracking_uri, parent, outcomes, sweep_lost)
    return result


def is_synced_parent(tracking_uri: str, run_id: str) -> bool:
    """Whether a parent run was made by `distbench sync` (its sweep never reached the store)."""
    run = retry(lambda: client(tracking_uri).get_run(run_id), tracking_uri=tracking_uri)
    return run.data.tags.get(SYNCED_TAG) == "true"
