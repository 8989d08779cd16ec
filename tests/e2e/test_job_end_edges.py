"""A job's end at its edges (issue 28, defects 1, 7, 11, 12), each with a real process that dies
or fails as an orchestrator does and a real sqlite store read back with MLflow's client:

- a SIGKILL at the job's end: killed as outcome.json appears, `sync` fills the job's FINISHED
  run and ends the parent KILLED (nothing lost, nothing RUNNING forever); killed after the spool,
  before outcome.json, `sync` writes the outcome back from the payload and uploads it (not an
  orphan);
- a job dir that cannot be written (gone, a full disk): its live run ends FAILED (no RUNNING
  duplicate), the parent's counts and the end table include it, a later `sync` writes its
  outcome back instead of recording a false orchestrator_lost; no logging traceback, no
  temporary file left;
- SIGHUP (a closed terminal) stops the sweep as SIGTERM does: rc 129, the job cancelled, the
  parent KILLED, no rank left;
- `resume=true` ends what a SIGKILLed sweep left RUNNING, and `sync` still can after the job's dir
  was reused.

The orchestrators that die are tests/e2e/job_end_child.py (no rank: the FINISHED job's figures
are the README sweep's dp job), except SIGHUP's, a real run.py sweep whose ranks are starting.

    pytest tests/e2e/test_job_end_edges.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf, open_dict

from distbench.cli import main
from distbench.orchestrator import resolve_or_refuse, resume_decision, run_job
from distbench.orphans import OWNER_FILE, mark_owner
from distbench.tracking.live import read_live
from distbench.tracking.mlflow_store import ensure_experiment
from distbench.tracking.signature import run_signature
from distbench.tracking.spool import JOB_DIR_TAG, write_payload
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config, processes_mentioning
from tests.e2e.shared_sweeps import FEW_STEPS, parents_and_children

pytestmark = pytest.mark.e2e

CHILD_TIMEOUT_S = 300  # imports and a store on a loaded 2-core host
LOST = "orchestrator_lost"


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory, store_template):
    """An empty store holding the experiment, made once: each test works on a copy of it
    (MLflow's migrations of a new sqlite store cost seconds)."""
    root = tmp_path_factory.mktemp("empty_store")
    shutil.copy(store_template, root / "mlflow.db")  # the session's: migrated once
    ensure_experiment(f"sqlite:///{root}/mlflow.db", "distbench")
    return root / "mlflow.db"


def store(empty_store, tmp_path) -> str:
    """A fresh store in tmp_path (a copy of the empty one); its tracking URI."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db"


def child(scenario: str, args: dict, tmp_path, env=None) -> subprocess.Popen:
    """tests/e2e/job_end_child.py running `scenario` with `args`."""
    (tmp_path / f"{scenario}.json").write_text(json.dumps(args))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.job_end_child", scenario, f"{tmp_path}/{scenario}.json"],
        cwd=PROJECT_DIR,
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_config(tmp_path, name: str, overrides: list[str]) -> str:
    """A job's composed config saved as Hydra saves .hydra/config.yaml."""
    path = tmp_path / f"{name}.yaml"
    OmegaConf.save(compose_config(overrides), path)
    return str(path)


def test_a_sigkill_between_the_spool_and_outcome_json_loses_no_finished_run(
    readme_sweep, empty_store, tmp_path
):
    uri = store(empty_store, tmp_path)
    source = readme_sweep.job_dir("dp", 2)  # a real measurement for the job to record
    sweep_dir = tmp_path / "sweep"
    job_dir = sweep_dir / "0"
    job_dir.mkdir(parents=True)
    for name in ("result.json", "progress.jsonl"):
        shutil.copy(source / name, job_dir / name)
    cfg = OmegaConf.load(source / ".hydra" / "config.yaml")
    with open_dict(cfg):
        cfg.tracking.uri = uri
    OmegaConf.save(cfg, tmp_path / "dp.yaml")
    args = {"sweep_dir": str(sweep_dir), "uri": uri, "config": str(tmp_path / "dp.yaml")}
    proc = child("finish", args, tmp_path, env=readme_sweep.env(uri))
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not (job_dir / "outcome.json").exists():  # the moment the job's end is on disk
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the job never recorded its outcome"
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    live_run_id = read_live(job_dir)["run_id"]
    assert main(["sync", str(sweep_dir), "--tracking-uri", uri]) == 0
    parents, children = parents_and_children(uri)
    assert [c.info.run_id for c in children] == [live_run_id]  # one run: the live one, filled
    run = children[0]
    assert run.info.status == "FINISHED" and "distbench.incomplete" not in run.data.tags
    assert run.data.metrics["throughput_tokens_per_s"] > 0
    (parent,) = parents
    assert parent.info.status == "KILLED"  # its process died: not RUNNING forever
    assert (parent.data.tags["num_finished"], parent.data.tags["num_not_run"]) == ("1", "1")
    assert json.loads((job_dir / "outcome.json").read_text())["run_id"] == live_run_id


def dead_owner(job_dir) -> None:
    """The job dir names an orchestrator that has exited (a real process, reaped)."""
    mark_owner(job_dir)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owner = json.loads((job_dir / OWNER_FILE).read_text())
    (job_dir / OWNER_FILE).write_text(json.dumps({**owner, "pid": dead.pid}))


def test_a_job_killed_after_its_spool_and_before_outcome_json_is_uploaded_not_lost(
    empty_store, tmp_path, capsys
):
    """The other side of the kill above, as the job dir holds it: sync writes the outcome back
    from the payload and uploads it, instead of taking the job for an orphan."""
    uri = store(empty_store, tmp_path)
    job_dir = tmp_path / "sweep" / "0"
    (job_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(compose_config(["model=tiny"]), job_dir / ".hydra" / "config.yaml")
    dead_owner(job_dir)  # then the job spooled its FINISHED run and was SIGKILLed
    outcome = {"job": "job 1/1", "status": "FINISHED", "strategy": "dp", "metrics": {"m": 1.0}}
    write_payload(
        job_dir,
        {
            "experiment_name": "distbench",
            "run_name": "dp-ws2",
            "params": {"strategy.name": "dp"},
            "metrics": {"m": 1.0},
            "tags": {"strategy": "dp", JOB_DIR_TAG: str(job_dir)},
            "artifacts": ["outcome.json"],
            "failed": False,
            "parent_run_id": None,
            "outcome": outcome,
        },
    )
    assert main(["sync", str(job_dir.parent), "--tracking-uri", uri]) == 0
    assert "1 uploaded" in capsys.readouterr().out
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("distbench").experiment_id])
    (run,) = [r for r in runs if JOB_DIR_TAG in r.data.tags]
    assert run.info.status == "FINISHED" and "failure_kind" not in run.data.tags  # not lost
    written = json.loads((job_dir / "outcome.json").read_text())
    assert written == {**outcome, "run_id": run.info.run_id}


def test_a_job_dir_that_cannot_be_written_ends_its_live_run_and_is_counted(
    empty_store, tmp_path, capsys
):
    uri = store(empty_store, tmp_path)
    sweep_dir = tmp_path / "sweep"
    config = job_config(tmp_path, "dp", [*FEW_STEPS, f"tracking.uri={uri}"])
    proc = child(
        "unwritable", {"sweep_dir": str(sweep_dir), "uri": uri, "config": config}, tmp_path
    )
    out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    assert "Logging error" not in err and "Traceback" not in err
    parents, children = parents_and_children(uri)
    (run,) = children  # the live run, ended: no RUNNING duplicate beside a FAILED one
    assert (run.info.status, run.data.tags["failure_kind"]) == ("FAILED", "orchestrator_error")
    assert "NotADirectoryError" in run.data.tags["spool_error"]
    (parent,) = parents
    assert parent.info.status == "FINISHED" and parent.data.tags["num_failed"] == "1"
    assert "FAILED" in out.split("distbench sweep")[-1]  # the end table has the job's row

    job_dir = sweep_dir / "0"
    job_dir.unlink()  # the dir comes back (its mount returns)
    (sweep_dir / "0.away").rename(job_dir)
    assert read_live(job_dir)["run_id"] == run.info.run_id
    capsys.readouterr()
    assert main(["sync", str(sweep_dir), "--tracking-uri", uri]) == 0
    assert "orchestrator_lost" not in capsys.readouterr().out
    runs = MlflowClient(uri).search_runs([parent.info.experiment_id])
    assert len(runs) == 2 and not any(r.data.tags.get("failure_kind") == LOST for r in runs)
    assert json.loads((job_dir / "outcome.json").read_text())["status"] == "FAILED"
    assert main(["summary", str(sweep_dir)]) == 0  # its table now reads the job's outcome
    assert "FAILED" in capsys.readouterr().out


def test_a_full_disk_leaves_no_traceback_no_temporary_file_and_counts_the_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    config = job_config(tmp_path, "dp", [*FEW_STEPS, "tracking=none"])
    proc = child("full_disk", {"sweep_dir": str(sweep_dir), "config": config}, tmp_path)
    out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert "Logging error" not in err, err[-3000:]
    assert not list((sweep_dir / "0").glob(".*.tmp"))
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    (outcome,) = json.loads(out.strip().splitlines()[-1])  # what the sweep's end counts
    assert (outcome["status"], outcome["failure_kind"]) == ("FAILED", "orchestrator_error")
    assert "File too large" in outcome["failure_reason"]


def test_sighup_stops_the_sweep_like_sigterm(empty_store, tmp_path):
    uri = store(empty_store, tmp_path)
    sweep_dir = tmp_path / "sweep"
    args = [
        "-m",
        "strategy=ddp",
        "model=tiny",
        "workload.num_steps=50",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    sweep = subprocess.Popen(
        [sys.executable, str(PROJECT_DIR / "run.py"), *args],
        cwd=tmp_path,
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not (read_live(sweep_dir / "0") or {}).get("run_id"):  # the job's run is RUNNING
        assert sweep.poll() is None, sweep.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the job's live run never started"
        time.sleep(0.2)
    sweep.send_signal(signal.SIGHUP)  # the terminal closed
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 129, output[-3000:]
    assert "Traceback" not in output and "stopped (signal SIGHUP)" in output
    parents, children = parents_and_children(uri)
    assert [p.info.status for p in parents] == ["KILLED"]
    (run,) = children
    assert run.info.run_id == read_live(sweep_dir / "0")["run_id"]
    assert (run.info.status, run.data.tags["failure_kind"]) == ("FAILED", "cancelled")
    assert run.data.tags["failure_reason"] == "signal SIGHUP"
    time.sleep(2)
    assert not processes_mentioning(str(sweep_dir)), "a rank outlived the hung-up sweep"


def test_resume_and_sync_end_what_a_sigkilled_sweep_left_running(empty_store, tmp_path):
    uri = store(empty_store, tmp_path)
    sweeps = [tmp_path / "s1", tmp_path / "s2"]
    overrides = [[*FEW_STEPS, f"tracking.uri={uri}"], [*FEW_STEPS, "workload.num_steps=3"]]
    overrides[1].append(f"tracking.uri={uri}")  # another signature: resume of s1 leaves it be
    configs = [job_config(tmp_path, f"job{i}", o) for i, o in enumerate(overrides)]
    args = {"sweep_dirs": [str(s) for s in sweeps], "uri": uri, "configs": configs}
    proc = child("killed", args, tmp_path)
    _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == -signal.SIGKILL, err[-3000:]
    client = MlflowClient(uri)
    parents, children = parents_and_children(uri)
    assert {r.info.status for r in parents + children} == {"RUNNING"} and len(children) == 2
    killed = {s: read_live(s / "0")["run_id"] for s in sweeps}
    parent_of = {s: client.get_run(killed[s]).data.tags["mlflow.parentRunId"] for s in sweeps}

    # resume=true: the first sweep's job is rerun, its dead sweep ended first
    resumed = compose_config([*overrides[0], "resume=true"])
    job = resolve_or_refuse(resumed, CONF_DIR)
    assert resume_decision(job, run_signature(job.tree())) is None  # lost: nothing decided
    lost = client.get_run(killed[sweeps[0]])
    assert (lost.info.status, lost.data.tags["failure_kind"]) == ("FAILED", LOST)
    assert "resume=true" in lost.data.tags["failure_reason"]
    parent = client.get_run(parent_of[sweeps[0]])
    assert parent.info.status == "KILLED" and parent.data.tags["num_not_run"] == "1"
    assert client.get_run(killed[sweeps[1]]).info.status == "RUNNING"  # not that sweep's job

    # a rerun into the second sweep's job dir (no resume) replaces what named its live run
    run_job(
        compose_config(["world_size=0", f"tracking.uri={uri}"]),
        sweeps[1] / "0",
        CONF_DIR,
        PROJECT_DIR,
    )
    assert read_live(sweeps[1] / "0") is None
    assert main(["sync", str(sweeps[1]), "--tracking-uri", uri]) == 0
    lost = client.get_run(killed[sweeps[1]])
    assert (lost.info.status, lost.data.tags["failure_kind"]) == ("FAILED", LOST)
    assert client.get_run(parent_of[sweeps[1]]).info.status == "KILLED"
    runs = client.search_runs([lost.info.experiment_id])
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
