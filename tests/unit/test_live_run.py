"""Live child runs, the parent's summary and the logged params, against a real sqlite MLflow
store read back with MLflow's own client (the ranks are stood in for by progress lines).

    pytest tests/unit/test_live_run.py
"""

from __future__ import annotations

import json
import time

import pytest
from mlflow.tracking import MlflowClient

from distbench.orchestrator import logged_params
from distbench.tracking.live import (
    LIVE_FILE,
    parse_lines,
    read_live,
    start_live_run,
    step_points,
)
from distbench.tracking.mlflow_store import ensure_experiment
from distbench.tracking.parent import sweep_summary, varied_params
from distbench.tracking.spool import (
    ATTEMPT_ID_TAG,
    INCOMPLETE_TAG,
    SWEEP_DIR_TAG,
    sync_sweep,
    write_payload,
)

pytestmark = pytest.mark.unit


def test_progress_lines_become_stepped_metrics_at_their_own_time():
    text = (
        '{"phase": "warmup", "step": 1, "num_steps": 2, "step_time_s": 0.5, "loss": 9.1,'
        ' "time_unix_s": 1000.25}\n'
        '{"phase": "timed", "step": 2, "num_steps": 2, "step_time_s": 0.4, "mfu_pct": 12,'
        ' "ok": true}\n'
        '{"phase": "timed", "step": 3, "num_st'  # being written: skipped
    )
    lines = parse_lines(text)
    assert [line["step"] for line in lines] == [1, 2]
    points = step_points(lines, fallback_ms=7)
    assert ("progress/step_time_s", 0.5, 0, 1_000_250) in points
    assert ("progress/loss", 9.1, 0, 1_000_250) in points
    assert ("progress/mfu_pct", 12.0, 1, 7) in points  # no wall clock: when it was read
    assert ("progress/warmup", 1.0, 0, 1_000_250) in points  # told apart from timed steps
    assert ("progress/warmup", 0.0, 1, 7) in points
    assert not [p for p in points if p[0].endswith(("/step", "/num_steps", "/ok", "/time_unix_s"))]


def test_the_parent_params_are_the_swept_keys_and_its_summary_names_the_best_run():
    params = varied_params(
        ["strategy=dp,zero3", "world_size=2,4", "model=tiny", "+zero_optimization.x=1,2"],
        {"batch.micro_batch_size": "choice(1, 2)"},
    )
    assert params == {
        "strategy": "dp,zero3",
        "world_size": "2,4",
        "zero_optimization.x": "1,2",
        "batch.micro_batch_size": "1,2",
    }
    outcomes = [
        {"status": "FINISHED", "run_name": "dp-ws2", "strategy": "dp", "run_id": "a",
         "metrics": {"throughput_tokens_per_s": 10.0}},
        {"status": "FINISHED", "run_name": "zero3-ws2", "strategy": "zero3", "run_id": "b",
         "metrics": {"throughput_tokens_per_s": 30.0}},
        {"status": "FAILED", "run_name": "tp-ws3", "strategy": "tp", "metrics": {}},
    ]  # fmt: skip
    metrics, tags = sweep_summary(outcomes, num_jobs=4)
    assert metrics == {
        "num_finished": 2.0,
        "num_failed": 1.0,
        "num_skipped": 0.0,
        "num_jobs": 4.0,
        "best_throughput_tokens_per_s": 30.0,
    }
    assert tags["best_run_name"] == "zero3-ws2" and tags["best_strategy"] == "zero3"
    assert tags["best_run_id"] == "b" and tags["num_failed"] == "1"


def test_no_fault_params_unless_a_fault_is_injected():
    tree = {"strategy": {"name": "dp"}, "fault": {"kind": "none", "rank": 0}}
    assert logged_params(tree) == {"strategy.name": "dp"}
    tree["fault"]["kind"] = "stall"
    assert logged_params(tree)["fault.kind"] == "stall"


def test_a_live_run_left_running_when_the_store_went_down_is_filled_by_sync_as_one_run(
    tmp_path,
):
    """The job's run is created RUNNING at its start, streams its steps, then the store is gone
    at the end (only the payload is spooled): `distbench sync` fills and ends that same run
    with the job's end time, and a second sync changes nothing."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_experiment(uri, "distbench")
    job_dir = tmp_path / "sweep" / "0"
    job_dir.mkdir(parents=True)
    start_ms = int(time.time() * 1000) - 30_000
    live = start_live_run(
        uri, "distbench", "dp-ws2", {"strategy": "dp"}, job_dir, start_ms, None, 0.5
    )
    client = MlflowClient(uri)
    assert client.get_run(live.run_id).info.status == "RUNNING"
    stamps = [time.time() - 20 + i for i in range(3)]
    with (job_dir / "progress.jsonl").open("w") as f:
        for i, stamp in enumerate(stamps):
            line = {"phase": "timed", "step": i + 1, "num_steps": 3, "step_time_s": 0.1 * (i + 1)}
            f.write(json.dumps({**line, "time_unix_s": stamp}) + "\n")
    # MLflow's SystemMetricsMonitor bumps _logging_step once a sample is queued; stop() flushes
    # it. A fixed sleep raced the sampler thread on a loaded host.
    monitor = live._monitor
    assert monitor is not None
    deadline = time.monotonic() + 60
    while monitor._logging_step == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    live.stop()
    streamed = client.get_metric_history(live.run_id, "progress/step_time_s")
    assert [m.timestamp for m in streamed] == [int(s * 1000) for s in stamps]
    assert any(k.startswith("system/") for k in client.get_run(live.run_id).data.metrics)

    info = read_live(job_dir)
    assert info["run_id"] == live.run_id and (job_dir / LIVE_FILE).exists()
    end_ms = int(stamps[-1] * 1000) + 500
    (job_dir / "outcome.json").write_text(json.dumps({"status": "FINISHED"}))
    write_payload(
        job_dir,
        {
            "experiment_name": "distbench",
            "run_name": "dp-ws2",
            "params": {"strategy.name": "dp"},
            "metrics": {"step_time_s_p50": 0.2},
            "series": [["step_time_s", 0.1, 0, int(stamps[0] * 1000)], ["loss", 9.0, 0]],
            "points": step_points(parse_lines((job_dir / "progress.jsonl").read_text()), 0),
            "tags": {"strategy": "dp"},
            "artifacts": ["outcome.json"],
            "failed": False,
            "parent_run_id": None,
            "start_time_ms": start_ms,
            "end_time_ms": end_ms,
            "attempt_id": info["attempt_id"],
        },
    )
    first = sync_sweep(tmp_path / "sweep", uri)
    assert first["uploaded"] == 1
    runs = client.search_runs([client.get_experiment_by_name("distbench").experiment_id])
    runs = [r for r in runs if SWEEP_DIR_TAG not in r.data.tags]  # not the parent sync opened
    assert [r.info.run_id for r in runs] == [live.run_id]
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert (run.info.start_time, run.info.end_time) == (start_ms, end_ms)
    assert INCOMPLETE_TAG not in run.data.tags and run.data.tags[ATTEMPT_ID_TAG]
    assert run.data.metrics["step_time_s_p50"] == 0.2 and run.data.params["strategy.name"] == "dp"
    assert len(client.get_metric_history(live.run_id, "progress/step_time_s")) == 3  # no repeats
    series = client.get_metric_history(live.run_id, "step_time_s")
    assert [m.timestamp for m in series] == [int(stamps[0] * 1000)]
    assert "outcome.json" in {a.path for a in client.list_artifacts(live.run_id)}
    second = sync_sweep(tmp_path / "sweep", uri)
    assert (second["uploaded"], second["already_in_store"]) == (0, 1)
