"""A job's MLflow child run while the job runs: created RUNNING as the ranks start, fed each
line rank 0 appends to progress.jsonl (as `progress/<field>` stepped metrics, stamped with the
time the step ended), sampled by MLflow's system metrics monitor (`system/...`: CPU, memory,
disk, network, GPU through pynvml when installed), then filled and ended by the same upload that
logs a spooled run (spool.upload_attempt: final metrics, params, tags, artifacts, real end time).

The job dir names the live run (`mlflow_live_run.json`: its attempt id first, then its run id),
so the spooled payload of the job is that attempt: `distbench sync` fills the live run instead of
logging another, also for a job whose orchestrator was SIGKILLed (orphans.py). A store that is
down at the start or fails while streaming costs nothing measured: every line stays in
progress.jsonl and the payload carries them with their times.

    python run.py workload.num_steps=50     # watch the run's charts grow in `distbench ui`
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from distbench.files import write_json_atomic

LIVE_FILE = "mlflow_live_run.json"
PROGRESS_FILE = "progress.jsonl"
# Wall clock (seconds since the epoch) at which rank 0 finished the step: the metric's timestamp.
STEP_TIME_FIELD = "time_unix_s"
NOT_METRICS = ("step", "num_steps", "phase", STEP_TIME_FIELD)
PROGRESS_PREFIX = "progress/"  # rank 0's step lines as they happened, apart from the final series
# A training/inference step line's phase; `progress/warmup` (1 warm-up, 0 timed) marks each step,
# so the warm-up points of progress/* can be told from the timed ones the final metrics use.
STEP_PHASES = ("warmup", "timed")
WARMUP_METRIC = f"{PROGRESS_PREFIX}warmup"
STREAM_INTERVAL_S = 2.0
Point = tuple[str, float, int, int]  # (metric, value, step, timestamp in ms)


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_lines(text: str) -> list[dict[str, Any]]:
    """The complete JSON objects of a progress.jsonl text (a line being written is skipped)."""
    out = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            parsed = json.loads(line)
            if isinstance(parsed, dict) and isinstance(parsed.get("step"), int):
                out.append(parsed)
    return out


class ProgressTail:
    """Reads a progress.jsonl as it grows: each call of new_lines() returns the complete lines
    appended since the previous call (a line being written waits for its newline)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_lines(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        return parse_lines(data[:end].decode(errors="replace"))


def step_points(lines: Iterable[dict[str, Any]], fallback_ms: int) -> list[Point]:
    """Each numeric field of each progress line as a stepped metric `progress/<field>` at step
    `step - 1` (0-based, as the final series), timestamped by the line's wall clock (else
    `fallback_ms`: when it was read)."""
    points = []
    for line in lines:
        stamp = line.get(STEP_TIME_FIELD)
        ts = int(stamp * 1000) if isinstance(stamp, (int, float)) else fallback_ms
        for key, value in line.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if key not in NOT_METRICS and numeric and math.isfinite(value):
                points.append((f"{PROGRESS_PREFIX}{key}", float(value), line["step"] - 1, ts))
        if line.get("phase") in STEP_PHASES:  # warm-up steps are not the run's figures: say so
            warmup = float(line["phase"] == "warmup")
            points.append((WARMUP_METRIC, warmup, line["step"] - 1, ts))
    return points


def read_points(job_dir: Path) -> list[Point]:
    """Every step point of a job dir's progress.jsonl ([] when it has none)."""
    path = job_dir / PROGRESS_FILE
    try:
        text = path.read_text()
        fallback = int(path.stat().st_mtime * 1000)
    except OSError:
        return []
    return step_points(parse_lines(text), fallback)


def step_timestamps(lines: Iterable[dict[str, Any]]) -> dict[tuple[str, int], int]:
    """(field, 0-based step) → the ms at which the line carrying it was written: the final
    series of a field the lines carry (step_time_s, loss) get the real time of their step."""
    out = {}
    for line in lines:
        stamp = line.get(STEP_TIME_FIELD)
        if isinstance(stamp, (int, float)):
            for key in line:
                out[(key, line["step"] - 1)] = int(stamp * 1000)
    return out


def read_live(job_dir: Path) -> dict[str, Any] | None:
    """The job dir's live run ({attempt_id, run_id?, attempt, previous_run_id}), or None."""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((job_dir / LIVE_FILE).read_text())
        if isinstance(info, dict) and info.get("attempt_id"):
            return info
    return None


def forget_live(job_dir: Path) -> None:
    """A new execution of the job: the live run of an earlier one is no longer this attempt."""
    with contextlib.suppress(OSError):
        (job_dir / LIVE_FILE).unlink(missing_ok=True)


class LiveRun:
    """The RUNNING child run of one job: `start()` streams progress.jsonl and system metrics
    in background threads, `stop()` flushes them. Streaming failures are remembered, never
    raised (the upload at the end logs what was not streamed)."""

    def __init__(self, tracking_uri: str, run_id: str, job_dir: Path, interval_s: float) -> None:
        self.tracking_uri, self.run_id, self.job_dir = tracking_uri, run_id, job_dir
        self.system_interval_s = interval_s
        self.error: str | None = None
        self._progress = ProgressTail(job_dir / PROGRESS_FILE)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitor: Any = None

    def start(self) -> LiveRun:
        self._thread = threading.Thread(target=self._stream, name="distbench-live", daemon=True)
        self._thread.start()
        if self.system_interval_s > 0:
            self._monitor = system_monitor(self.tracking_uri, self.run_id, self.system_interval_s)
        return self

    def poll(self) -> None:
        """Log the lines written since the last poll."""
        if self.error is not None:
            return
        points = step_points(self._progress.new_lines(), now_ms())
        if not points:
            return
        from distbench.tracking.mlflow_store import log_points

        try:
            log_points(self.tracking_uri, self.run_id, points)
        except Exception as exc:  # the store left: the upload at the end logs the rest
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def _stream(self) -> None:
        while not self._stop.wait(STREAM_INTERVAL_S):
            self.poll()

    def stop(self) -> None:
        """Stop streaming, after logging the last lines; stop the system metrics monitor."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.poll()
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.finish()


def system_monitor(tracking_uri: str, run_id: str, interval_s: float) -> Any:
    """MLflow's own system metrics sampler (what `mlflow.start_run(log_system_metrics=True)`
    starts) on a run created through MlflowClient, sampling every `interval_s`; None when it
    cannot start (psutil missing)."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        monitor = SystemMetricsMonitor(
            run_id, sampling_interval=interval_s, tracking_uri=tracking_uri
        )
        monitor.start()
        return monitor
    except Exception:  # no psutil, an MLflow without the monitor: the run goes on without
        return None


def start_live_run(
    tracking_uri: str,
    experiment_name: str,
    run_name: str,
    tags: dict[str, str],
    job_dir: Path,
    start_time_ms: int,
    parent_run_id: str | None,
    system_metrics_interval_s: float,
) -> LiveRun:
    """Create the job's child run RUNNING (started at `start_time_ms`) and start streaming.
    The attempt id is written to the job dir before the run exists: whatever happens next, the
    job's payload names this attempt and sync fills this run, never a second one. Raises when
    the store cannot be reached (the job is then spooled as before)."""
    from distbench.tracking.mlflow_store import client, ensure_experiment, retry
    from distbench.tracking.spool import (
        ATTEMPT_ID_TAG,
        ATTEMPT_TAG,
        INCOMPLETE_TAG,
        JOB_DIR_TAG,
        PREVIOUS_RUN_TAG,
        job_lock,
        next_attempt_tags,
    )

    job_dir = job_dir.absolute()
    experiment_id = ensure_experiment(tracking_uri, experiment_name)
    attempt_id = uuid.uuid4().hex
    with job_lock(job_dir):
        attempt = next_attempt_tags(tracking_uri, experiment_id, job_dir)
        info: dict[str, Any] = {
            "attempt_id": attempt_id,
            "attempt": int(attempt[ATTEMPT_TAG]),
            "previous_run_id": attempt.get(PREVIOUS_RUN_TAG),
        }
        write_json_atomic(job_dir / LIVE_FILE, info)
        run_tags = {
            **tags,
            **attempt,
            JOB_DIR_TAG: str(job_dir.resolve()),
            ATTEMPT_ID_TAG: attempt_id,
            INCOMPLETE_TAG: "running",
        }
        if parent_run_id:
            run_tags["mlflow.parentRunId"] = parent_run_id
        mlflow = client(tracking_uri)
        run = retry(
            lambda: mlflow.create_run(
                experiment_id, start_time=start_time_ms, tags=run_tags, run_name=run_name
            ),
            tracking_uri=tracking_uri,
        )
        info["run_id"] = run.info.run_id
        write_json_atomic(job_dir / LIVE_FILE, info)
    return LiveRun(tracking_uri, run.info.run_id, job_dir, system_metrics_interval_s).start()
