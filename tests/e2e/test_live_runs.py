"""MLflow used as its users expect, through run.py with real ranks into a real sqlite store read
back with MlflowClient: child runs RUNNING while their job runs, stepped metrics at the time of
their step, the job's real start and end, system metrics, MLflow's reserved tags, the DeepSpeed
config as an artifact, a parent run that summarises the sweep; a store down at the start, and an
orchestrator SIGKILLed mid-job, each end as ONE run after `distbench sync`.

    pytest tests/e2e/test_live_runs.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from distbench.launch.workers import free_port
from tests.conftest import PROJECT_DIR, processes_mentioning
from tests.e2e.test_sweep import run_py, sync_py

pytestmark = pytest.mark.e2e

STEPS = ["model=tiny", "workload.num_warmup_steps=1", "workload.num_steps=3"]
RESERVED = ("mlflow.source.name", "mlflow.source.type", "mlflow.user", "mlflow.source.git.commit")


def store(tmp_path) -> tuple[MlflowClient, list]:
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("distbench")
    return client, client.search_runs([experiment.experiment_id])


def children_of(runs: list) -> list:
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def assert_real_times(client: MlflowClient, run) -> None:
    """The run spans its job (seconds, not the milliseconds of a run logged after the fact),
    and each step of its series is stamped with its own, later, time inside the run."""
    info = run.info
    assert info.end_time - info.start_time > 3000, info
    for key in ("step_time_s", "progress/step_time_s"):
        stamps = [m.timestamp for m in client.get_metric_history(info.run_id, key)]
        assert len(stamps) == 4 and stamps == sorted(set(stamps)), (key, stamps)
        assert info.start_time < stamps[0] and stamps[-1] <= info.end_time


def test_a_sweep_logs_live_children_with_real_times_and_a_parent_that_summarises(tmp_path):
    proc = run_py(
        [
            "-m",
            "strategy=dp,zero3",
            "world_size=2",
            *STEPS,
            "tracking.system_metrics_interval_s=1",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, runs = store(tmp_path)
    children = children_of(runs)
    (parent,) = [r for r in runs if r not in children]
    assert len(children) == 2 and {r.info.status for r in children} == {"FINISHED"}
    for child in children:
        assert_real_times(client, child)
        assert parent.info.start_time <= child.info.start_time
        assert child.info.end_time <= parent.info.end_time
        assert "distbench.incomplete" not in child.data.tags
        assert any(k.startswith("system/cpu") for k in child.data.metrics), child.data.metrics
        for tag in RESERVED:
            assert child.data.tags.get(tag) and parent.data.tags.get(tag), tag
        assert child.data.tags["mlflow.source.name"].endswith("run.py")
        assert child.data.tags["mlflow.source.type"] == "LOCAL"
        params = child.data.params
        assert not [k for k in params if k.startswith(("gemm.", "collectives.", "fault."))]
        config = client.download_artifacts(child.info.run_id, "ds_config.json", str(tmp_path))
        ds = json.loads(Path(config).read_text())
        stage = 0 if child.data.tags["strategy"] == "dp" else 3
        assert ds["zero_optimization"]["stage"] == stage
        assert ds["train_micro_batch_size_per_gpu"] == int(params["batch.micro_batch_size"])
    assert parent.data.params == {"strategy": "dp,zero3"}
    metrics = parent.data.metrics
    assert (metrics["num_jobs"], metrics["num_finished"], metrics["num_failed"]) == (2, 2, 0)
    best = max(children, key=lambda r: r.data.metrics["throughput_tokens_per_s"])
    assert metrics["best_throughput_tokens_per_s"] == best.data.metrics["throughput_tokens_per_s"]
    assert parent.data.tags["best_run_name"] == best.info.run_name
    assert parent.data.tags["best_strategy"] == best.data.tags["strategy"]
    assert parent.data.tags["best_run_id"] == best.info.run_id


def test_a_job_is_running_in_mlflow_while_its_ranks_run_and_sync_ends_it_after_a_sigkill(
    tmp_path,
):
    """Read from this test process while the job runs (rank 1 stalls at step 1): the child run
    is RUNNING and already has step 0. The orchestrator is then SIGKILLed; `distbench sync`
    ends that same run FAILED (orchestrator_lost) at the job's last sign of life."""
    sweep_dir = tmp_path / "sweep"
    stall = ["fault.kind=stall", "fault.rank=1", "fault.at_step=1", "limits.stall_timeout_s=600"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    orchestrator = subprocess.Popen(
        [
            sys.executable,
            str(PROJECT_DIR / "run.py"),
            "-m",
            "strategy=dp",
            "world_size=2",
            *STEPS,
            *stall,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job_dir = sweep_dir / "0"
    try:
        deadline = time.monotonic() + 300
        beat = job_dir / "heartbeat" / "rank1"
        while not (beat.exists() and beat.read_text() == "1"):
            assert orchestrator.poll() is None, "the orchestrator ended before the stall"
            assert time.monotonic() < deadline, "rank 1 never reached its stall"
            time.sleep(0.5)
        run_id = json.loads((job_dir / "mlflow_live_run.json").read_text())["run_id"]
        client = MlflowClient(env["MLFLOW_TRACKING_URI"])
        deadline = time.monotonic() + 30
        while not client.get_metric_history(run_id, "progress/step_time_s"):
            assert time.monotonic() < deadline, "step 0 was not streamed while the job ran"
            time.sleep(1)
        live = client.get_run(run_id)
        assert live.info.status == "RUNNING" and live.info.end_time is None
        assert live.data.tags["distbench.incomplete"] and live.data.tags["strategy"] == "dp"
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait()
    finally:
        orchestrator.kill()
        orchestrator.wait()
        for proc in processes_mentioning(str(job_dir)):  # ranks the lifeline missed
            proc.kill()
    time.sleep(1)
    sync = sync_py(sweep_dir, tmp_path)
    assert sync.returncode == 0, sync.stderr[-2000:]
    client, runs = store(tmp_path)
    (child,) = children_of(runs)
    assert child.info.run_id == run_id and child.info.status == "FAILED"
    assert child.data.tags["failure_kind"] == "orchestrator_lost"
    assert "distbench.incomplete" not in child.data.tags
    assert child.info.end_time - child.info.start_time > 3000
    assert len(client.get_metric_history(run_id, "progress/step_time_s")) == 1


def test_a_store_down_at_the_start_is_spooled_and_synced_as_one_run_with_the_jobs_times(
    tmp_path,
):
    sweep_dir = tmp_path / "sweep"
    down = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"}
    proc = run_py(["-m", "strategy=dp", "world_size=2", *STEPS, f"hydra.sweep.dir={sweep_dir}"],
                  tmp_path, env=down)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no live MLflow run" in proc.stdout and "distbench sync" in proc.stdout
    assert not (sweep_dir / "0" / "mlflow_live_run.json").exists()
    first = sync_py(sweep_dir, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "1 uploaded, 0 already in the store" in first.stdout
    assert "0 uploaded, 1 already in the store" in sync_py(sweep_dir, tmp_path).stdout
    client, runs = store(tmp_path)
    (child,) = children_of(runs)
    assert child.info.status == "FINISHED"
    assert_real_times(client, child)
    assert child.data.metrics["throughput_tokens_per_s"] > 0
