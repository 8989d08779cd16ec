"""MLflow used as its users expect, through run.py with real ranks into a real sqlite store read
back with MlflowClient: child runs RUNNING while their job runs, stepped metrics at the time of
their step, the job's real start and end, system metrics, MLflow's reserved tags, the DeepSpeed
config as an artifact, a parent run that summarises the sweep (the README's sweep, shared by the
session: tests/e2e/shared_sweeps.py); an orchestrator SIGKILLed mid-job takes its ranks and
their /dev/shm files along, and `distbench sync` ends its live run as ONE run and closes the
parent. (A store down at the start, spooled and synced: tests/e2e/test_survive.py.)

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

from tests.conftest import PROJECT_DIR, processes_mentioning
from tests.e2e.shared_sweeps import FEW_STEPS
from tests.e2e.test_sweep import runs_of, sync_py

pytestmark = pytest.mark.e2e

NUM_STEPS = 3  # FEW_STEPS: 1 warm-up + 2 timed
RESERVED = ("mlflow.source.name", "mlflow.source.type", "mlflow.user", "mlflow.source.git.commit")


def assert_real_times(client: MlflowClient, run, num_steps: int = NUM_STEPS) -> None:
    """The run spans its job (seconds, not the milliseconds of a run logged after the fact),
    and each step of its series is stamped with its own, later, time inside the run."""
    info = run.info
    assert info.end_time - info.start_time > 3000, info
    for key in ("step_time_s", "progress/step_time_s"):
        stamps = [m.timestamp for m in client.get_metric_history(info.run_id, key)]
        assert len(stamps) == num_steps and stamps == sorted(set(stamps)), (key, stamps)
        assert info.start_time < stamps[0] and stamps[-1] <= info.end_time


def test_a_sweep_logs_live_children_with_real_times_and_a_parent_that_summarises(readme_sweep):
    client = MlflowClient(readme_sweep.tracking_uri)
    parent, children = readme_sweep.parent, readme_sweep.children
    assert len(children) == 6 and {r.info.status for r in children} == {"FINISHED"}
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
        local = readme_sweep.root / "downloads" / child.info.run_id
        local.mkdir(parents=True, exist_ok=True)
        ds = json.loads(
            Path(
                client.download_artifacts(child.info.run_id, "ds_config.json", str(local))
            ).read_text()
        )
        stage = 3 if child.data.tags["strategy"] == "zero3" else 0
        assert ds["zero_optimization"]["stage"] == stage
        assert ds["train_micro_batch_size_per_gpu"] == int(params["batch.micro_batch_size"])
    assert parent.data.params == {"strategy": "dp,tp,zero3", "world_size": "2,4"}
    metrics = parent.data.metrics
    assert (metrics["num_jobs"], metrics["num_finished"], metrics["num_failed"]) == (6, 6, 0)
    # the best of one world size and tokens per step (figures/fair.py): ws 4, 2,048 tokens
    best = max(
        (
            r
            for r in children
            if r.data.tags["world_size"] == "4" and r.data.metrics["tokens_per_step"] == 2048
        ),
        key=lambda r: r.data.metrics["throughput_tokens_per_s"],
    )
    assert metrics["best_throughput_tokens_per_s"] == best.data.metrics["throughput_tokens_per_s"]
    assert parent.data.tags["best_run_name"] == best.info.run_name
    assert parent.data.tags["best_strategy"] == best.data.tags["strategy"]
    assert parent.data.tags["best_run_id"] == best.info.run_id


def wait_for_stall(sweep: subprocess.Popen, job_dir: Path) -> None:
    """Until rank 1 sleeps at step 1 (its heartbeat says 1): a stall the sweep waits on."""
    deadline = time.monotonic() + 300
    beat = job_dir / "heartbeat" / "rank1"
    while not (beat.exists() and beat.read_text() == "1"):
        assert sweep.poll() is None, "the sweep ended before the stall"
        assert time.monotonic() < deadline, "rank 1 never reached its stall"
        time.sleep(0.5)


def assert_live(client: MlflowClient, job_dir: Path) -> str:
    """The job's child run while its ranks run: RUNNING, step 0 streamed; returns its id."""
    run_id = json.loads((job_dir / "mlflow_live_run.json").read_text())["run_id"]
    deadline = time.monotonic() + 30
    while not client.get_metric_history(run_id, "progress/step_time_s"):
        assert time.monotonic() < deadline, "step 0 was not streamed while the job ran"
        time.sleep(1)
    live = client.get_run(run_id)
    assert live.info.status == "RUNNING" and live.info.end_time is None
    assert live.data.tags["distbench.incomplete"] and live.data.tags["strategy"] == "dp"
    return run_id


def kill_and_wait_for_the_ranks(sweep: subprocess.Popen, sweep_dir: Path, job_dir: Path) -> None:
    """SIGKILL the sweep; its torchrun, ranks and DeepSpeed's /dev/shm files must go too."""
    workers = processes_mentioning(str(job_dir))
    assert len(workers) >= 3  # torchrun and two ranks
    port = next(arg for w in workers for arg in w.cmdline() if arg.startswith("--master_p"))
    shm_files = f"*_127.0.0.1_{port.split('=')[1]}_*"  # DeepSpeed's, 66 MB a rank
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 60  # a deadline only: a loaded host can be slow to reap
    while time.monotonic() < deadline and (
        processes_mentioning(str(sweep_dir)) or list(Path("/dev/shm").glob(shm_files))
    ):
        time.sleep(0.2)
    left = [(p.pid, p.status(), p.cmdline()) for p in processes_mentioning(str(sweep_dir))]
    assert left == [], "ranks outlived their orchestrator"
    assert not list(Path("/dev/shm").glob(shm_files)), "the killed ranks' shm files stayed"


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_a_sigkilled_sweep_leaves_no_rank_and_sync_ends_its_live_run_and_closes_the_parent(
    tmp_path,
):
    """Read from this test process while the job runs (rank 1 stalls at step 1): the child run
    is RUNNING and already has step 0. The orchestrator is then SIGKILLed; nothing it started
    survives, and `distbench sync` ends that same run FAILED (orchestrator_lost) at the job's
    last sign of life, closes the parent KILLED with the job it never started, once."""
    sweep_dir = tmp_path / "sweep"
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    grid = ["-m", "world_size=2", "fault.kind=stall,none", "fault.rank=1", "fault.at_step=1"]
    sweep = subprocess.Popen(
        [
            *(sys.executable, str(PROJECT_DIR / "run.py"), *grid, *FEW_STEPS),
            *("limits.stall_timeout_s=600", f"hydra.sweep.dir={sweep_dir}"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job_dir = sweep_dir / "0"
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    try:
        wait_for_stall(sweep, job_dir)
        run_id = assert_live(client, job_dir)
        kill_and_wait_for_the_ranks(sweep, sweep_dir, job_dir)
    finally:
        sweep.kill()
        sweep.wait()
        for proc in processes_mentioning(str(sweep_dir)):  # ranks the lifeline missed
            proc.kill()
    runs = runs_of(tmp_path)
    # the parent and the job's live run (created RUNNING at its start), left open by the kill
    assert list(runs["status"]) == ["RUNNING", "RUNNING"]
    sync = sync_py(sweep_dir, tmp_path)
    assert sync.returncode == 0, sync.stderr[-2000:]
    assert "1 job(s) whose orchestrator died recorded as orchestrator_lost" in sync.stdout
    runs = runs_of(tmp_path)
    parent = runs[runs["tags.mlflow.parentRunId"].isna()].iloc[0]
    assert parent["status"] == "KILLED" and parent["tags.num_not_run"] == "1"
    child = client.get_run(run_id)
    assert child.data.tags["mlflow.parentRunId"] == parent["run_id"]
    assert (child.info.status, child.data.tags["failure_kind"]) == ("FAILED", "orchestrator_lost")
    assert child.data.params["fault.kind"] == "stall"
    assert "distbench.incomplete" not in child.data.tags
    assert child.info.end_time - child.info.start_time > 3000
    assert len(client.get_metric_history(run_id, "progress/step_time_s")) == 1
    again = sync_py(sweep_dir, tmp_path)
    assert "0 uploaded, 1 already in the store" in again.stdout and len(runs_of(tmp_path)) == 2
