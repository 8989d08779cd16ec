"""The spool and `distbench sync` against a real sqlite MLflow store, read back with MLflow's own
client: attempts, symlinks, quotes in paths, two syncs at once, a truncated payload, a parent
left RUNNING, a server that is down.

    pytest tests/unit/test_spool.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from distbench.cli import main
from distbench.launch.workers import free_port
from distbench.tracking import mlflow_store
from distbench.tracking.mlflow_store import StoreUnavailable, ensure_experiment, find_runs
from distbench.tracking.spool import (
    ATTEMPT_TAG,
    JOB_DIR_TAG,
    PAYLOAD,
    PREVIOUS_RUN_TAG,
    SWEEP_DIR_TAG,
    sync_sweep,
    upload,
    write_payload,
)
from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.unit


def spool_job(job_dir, status="FINISHED", value=1.0):
    """A job dir as the orchestrator leaves it when the store was down."""
    job_dir.mkdir(parents=True, exist_ok=True)
    outcome = {"status": status, "metrics": {"m": value}, "tracking_error": "down"}
    (job_dir / "outcome.json").write_text(json.dumps(outcome))
    write_payload(
        job_dir,
        {
            "experiment_name": "distbench",
            "run_name": f"job-{job_dir.name}",
            "params": {"strategy.name": "dp"},
            "metrics": {"m": value},
            "series": [["step_time_s", 0.5, 1]],
            "tags": {"strategy": "dp", JOB_DIR_TAG: str(job_dir)},
            "artifacts": ["outcome.json"],
            "failed": status != "FINISHED",
            "parent_run_id": None,
        },
    )


def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return uri, MlflowClient(uri), ensure_experiment(uri, "distbench")


def children(client, experiment_id):
    runs = client.search_runs([experiment_id])
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags or JOB_DIR_TAG in r.data.tags]


def test_a_rerun_in_the_same_job_dir_is_a_new_run_linked_to_the_earlier_one(tmp_path):
    uri, client, experiment_id = store(tmp_path)
    job = tmp_path / "sweep" / "0"
    spool_job(job, status="FAILED")
    first = upload(uri, job)
    assert upload(uri, job) == first  # the same attempt, once
    spool_job(job, status="FINISHED", value=2.0)  # resume=true retry_failed=true: attempt 2
    second = upload(uri, job)
    assert second != first
    assert upload(uri, job) == second
    runs = {r.info.run_id: r for r in children(client, experiment_id)}
    assert set(runs) == {first, second}
    assert runs[first].info.status == "FAILED"
    assert runs[second].info.status == "FINISHED"
    assert runs[second].data.metrics["m"] == 2.0
    assert runs[first].data.tags[ATTEMPT_TAG] == "1"
    assert runs[second].data.tags[ATTEMPT_TAG] == "2"
    assert runs[second].data.tags[PREVIOUS_RUN_TAG] == first
    assert PREVIOUS_RUN_TAG not in runs[first].data.tags
    # sync of the already-uploaded attempt uploads nothing
    assert main(["sync", str(job.parent), "--tracking-uri", uri]) == 0
    assert len(children(client, experiment_id)) == 2


def test_the_orchestrator_may_name_the_attempt_and_the_run_it_retries(tmp_path):
    uri, client, _ = store(tmp_path)
    spool_job(tmp_path / "s1" / "0", status="FAILED")
    failed = upload(uri, tmp_path / "s1" / "0")
    spool_job(tmp_path / "s2" / "0")  # resume=true into a new sweep dir
    retried = upload(uri, tmp_path / "s2" / "0", previous_run_id=failed)
    tags = client.get_run(retried).data.tags
    assert (tags[ATTEMPT_TAG], tags[PREVIOUS_RUN_TAG]) == ("2", failed)


def test_sync_through_a_symlink_uploads_nothing_again(tmp_path, capsys):
    uri, client, experiment_id = store(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for job in ("0", "1"):
        spool_job(tmp_path / "link" / job)
    upload(uri, tmp_path / "link" / "0")  # the sweep ran with hydra.sweep.dir=link
    upload(uri, tmp_path / "real" / "1")
    for path in ("link", "real", "link/0"):
        assert main(["sync", str(tmp_path / path), "--tracking-uri", uri]) == 0
        assert " 0 uploaded" in capsys.readouterr().out
    runs = children(client, experiment_id)
    assert len(runs) == 2
    assert {r.data.tags[JOB_DIR_TAG] for r in runs} == {
        str(tmp_path / "real" / "0"),
        str(tmp_path / "real" / "1"),
    }


@pytest.mark.parametrize("name", ["it's", 'say "hi"', "both ' and \"", "back\\slash"])
def test_a_sweep_dir_with_quotes_in_its_path_syncs_once(tmp_path, name):
    uri, client, experiment_id = store(tmp_path)
    sweep = tmp_path / name
    spool_job(sweep / "0")
    spool_job(sweep / "1")
    assert sync_sweep(sweep, uri)["uploaded"] == 2
    assert sync_sweep(sweep, uri)["already_in_store"] == 2
    assert len(children(client, experiment_id)) == 2
    found = find_runs(uri, experiment_id, {JOB_DIR_TAG: str(sweep / "0")})
    assert [r.data.tags[JOB_DIR_TAG] for r in found] == [str(sweep / "0")]
    parents = find_runs(uri, experiment_id, {SWEEP_DIR_TAG: str(sweep)})
    assert len(parents) == 1


def test_two_syncs_at_once_upload_each_run_once(tmp_path):
    uri, client, experiment_id = store(tmp_path)
    sweep = tmp_path / "sweep"
    for job in range(6):
        spool_job(sweep / str(job))
    cmd = [sys.executable, "-m", "distbench.cli", "sync", str(sweep), "--tracking-uri", uri]
    procs = [
        subprocess.Popen(cmd, cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
    runs = client.search_runs([experiment_id])
    jobs = [r.data.tags[JOB_DIR_TAG] for r in runs if JOB_DIR_TAG in r.data.tags]
    assert sorted(jobs) == sorted(str(sweep / str(j)) for j in range(6))
    assert len(runs) == 7  # and one parent


def test_a_truncated_payload_is_skipped_reported_and_sync_exits_nonzero(tmp_path, capsys):
    uri, client, experiment_id = store(tmp_path)
    sweep = tmp_path / "sweep"
    for job in range(3):
        spool_job(sweep / str(job))
    text = (sweep / "1" / PAYLOAD).read_text()
    (sweep / "1" / PAYLOAD).write_text(text[: len(text) // 2])
    assert main(["sync", str(sweep), "--tracking-uri", uri]) == 1
    out, err = capsys.readouterr()
    assert "2 uploaded" in out
    assert str(sweep / "1" / PAYLOAD) in err and "Traceback" not in err
    assert len(children(client, experiment_id)) == 2


def test_sync_ends_the_parent_run_a_sweep_left_running(tmp_path):
    uri, client, experiment_id = store(tmp_path)
    sweep = tmp_path / "sweep"
    parent = client.create_run(
        experiment_id, tags={SWEEP_DIR_TAG: str(sweep), "num_jobs": "3"}
    ).info.run_id  # as the sweep opened it; the store went down before it closed it
    spool_job(sweep / "0")
    spool_job(sweep / "1", status="FAILED")
    assert not sync_sweep(sweep, uri)["parent_closed"]  # job 2 has not ended yet
    assert client.get_run(parent).info.status == "RUNNING"
    spool_job(sweep / "2")
    result = sync_sweep(sweep, uri)
    assert result["parent_closed"] and result["uploaded"] == 1
    run = client.get_run(parent)
    assert run.info.status == "FINISHED"
    assert (run.data.tags["num_finished"], run.data.tags["num_failed"]) == ("2", "1")
    kids = children(client, experiment_id)
    assert {r.data.tags["mlflow.parentRunId"] for r in kids} == {parent}


def test_a_sweep_that_never_reached_the_store_gets_a_parent_with_its_summary(tmp_path):
    uri, client, experiment_id = store(tmp_path)
    sweep = tmp_path / "sweep"
    spool_job(sweep / "0", value=5.0)
    spool_job(sweep / "1", status="FAILED")
    sync_sweep(sweep, uri)
    (parent,) = find_runs(uri, experiment_id, {SWEEP_DIR_TAG: str(sweep)})
    assert parent.data.tags["synced"] == "true" and parent.info.status == "FINISHED"
    assert parent.data.metrics["num_jobs"] == 2.0
    assert (parent.data.tags["num_finished"], parent.data.tags["num_failed"]) == ("1", "1")
    spool_job(sweep / "2")  # a job synced later is counted too
    sync_sweep(sweep, uri)
    parent = client.get_run(parent.info.run_id)
    assert parent.data.metrics["num_jobs"] == 3.0 and parent.data.tags["num_finished"] == "2"
    assert {r.data.tags["mlflow.parentRunId"] for r in children(client, experiment_id)} == {
        parent.info.run_id
    }


def test_a_down_server_fails_fast_once_and_then_at_once(tmp_path, monkeypatch):
    uri = f"http://user:s3cr3t@127.0.0.1:{free_port()}"
    spool_job(tmp_path / "sweep" / "0")
    probes = []
    real_probe = mlflow_store.probe
    monkeypatch.setattr(
        mlflow_store, "probe", lambda *a, **kw: probes.append(a) or real_probe(*a, **kw)
    )
    start = time.monotonic()
    with pytest.raises(StoreUnavailable) as first:
        ensure_experiment(uri, "distbench")
    assert len(probes) == 1
    with pytest.raises(StoreUnavailable):
        upload(uri, tmp_path / "sweep" / "0")
    assert len(probes) == 1  # known down: no second probe
    assert time.monotonic() - start < 60  # was ~40 s per call
    assert "s3cr3t" not in str(first.value)
    proc = subprocess.run(
        [sys.executable, "-m", "distbench.cli", "sync", str(tmp_path / "sweep")],
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "s3cr3t" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
