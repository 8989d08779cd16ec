"""The orchestrator itself under faults: whatever raises inside a job (a mandatory value left
unset, an unresolvable ${oc.env:...} override) becomes a FAILED child with its reason and
the sweep goes on to its summary; SIGTERM to the sweep records the running job as `cancelled`,
kills its ranks and closes the parent run; a CPU world size this machine cannot host is refused
in one line before anything starts; a resumed sweep (the README's, shared by the session)
reports its whole grid. (SIGKILL to the sweep: tests/e2e/test_live_runs.py.)

    pytest tests/e2e/test_orchestrator_faults.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_DIR, processes_mentioning
from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_exceptions_in_the_orchestrator_become_failed_runs_and_the_sweep_finishes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_py(
        [
            "-m",
            "strategy.name=???,dp",  # a mandatory value left unset
            "+unresolvable=${oc.env:DISTBENCH_NO_SUCH_VARIABLE}",
            *FEW_STEPS,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "distbench sweep" in proc.stdout  # the summary printed: on_multirun_end ran
    runs = runs_of(tmp_path)
    parent = runs[runs["tags.mlflow.parentRunId"].isna()].iloc[0]
    assert parent["status"] == "FINISHED"
    children = runs.dropna(subset=["tags.mlflow.parentRunId"])
    assert len(children) == 2
    assert set(children["status"]) == {"FAILED"}
    assert set(children["tags.failure_kind"]) == {"invalid_config"}
    reasons = " ".join(children["tags.failure_reason"])
    assert "Missing mandatory value" in reasons and "DISTBENCH_NO_SUCH_VARIABLE" in reasons


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_sigterm_records_the_running_job_as_cancelled_and_closes_the_parent(tmp_path):
    sweep_dir = tmp_path / "sweep"
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    args = ["-m", "world_size=2", "fault.kind=stall", "fault.rank=1", "fault.at_step=1"]
    sweep = subprocess.Popen(
        [
            sys.executable,
            str(PROJECT_DIR / "run.py"),
            *args,
            *FEW_STEPS,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    beats = sweep_dir / "0" / "heartbeat"
    deadline = time.monotonic() + 300
    while not (beats.is_dir() and len(list(beats.glob("rank*"))) == 2):
        assert time.monotonic() < deadline, "the ranks never started"
        assert sweep.poll() is None, sweep.communicate()[0][-3000:]
        time.sleep(1)  # the ranks are up once both beat
    time.sleep(3)
    sweep.send_signal(signal.SIGTERM)
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 143, output[-3000:]
    assert "Traceback" not in output
    outcome = json.loads((sweep_dir / "0" / "outcome.json").read_text())
    assert (outcome["status"], outcome["failure_kind"]) == ("FAILED", "cancelled")
    runs = runs_of(tmp_path)
    parent = runs[runs["tags.mlflow.parentRunId"].isna()].iloc[0]
    assert parent["status"] == "KILLED"  # closed, not RUNNING forever
    child = runs.dropna(subset=["tags.mlflow.parentRunId"]).iloc[0]
    assert (child["status"], child["tags.failure_kind"]) == ("FAILED", "cancelled")
    time.sleep(2)
    assert not processes_mentioning(str(sweep_dir)), "a rank outlived the cancelled job"


def test_more_cpu_ranks_than_this_machine_can_host_are_refused_in_one_line(tmp_path):
    proc = run_py(["world_size=1024", "tracking=none"], tmp_path)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("distbench: invalid config: 1024 ranks on this machine's")
    assert "per core" in last


def test_a_resumed_sweep_reports_the_whole_grid_with_the_earlier_figures(readme_sweep, tmp_path):
    from distbench.tools.report import load_runs

    uri = readme_sweep.copy_store(tmp_path)  # the same store as run_py's, written here only
    args = ["-m", *readme_sweep.args, "resume=true", f"hydra.sweep.dir={tmp_path}/s2"]
    again = run_py(args, tmp_path, env=readme_sweep.env(uri))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count(" skipped: ") == 6  # one line per job of the grid
    assert "SKIPPED (earlier FINISHED)" in again.stdout  # the end table (every row: its caption)
    outcomes = [json.loads(p.read_text()) for p in sorted((tmp_path / "s2").glob("*/outcome.json"))]
    assert len(outcomes) == 6
    assert all(o["status"] == "SKIPPED" and o["metrics"]["step_time_s_p50"] > 0 for o in outcomes)
    latest = load_runs(uri, "latest")  # the resumed sweep: every job of its grid, none rerun
    earlier = {o["previous_run_id"] for o in outcomes}
    assert {r.info.run_id for r in latest.runs} == earlier == set(readme_sweep.child_run_ids)
    assert latest.parent_run_id != readme_sweep.parent_run_id


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_a_job_dir_that_cannot_be_written_still_lands_its_failed_run(tmp_path, monkeypatch):
    # Root ignores a read-only mode, so the job dir is made unwritable the way a vanished or
    # replaced mount is: its path runs through a regular file.
    from distbench.orchestrator import run_job
    from tests.conftest import CONF_DIR, compose_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "gone").write_text("not a directory")
    job_dir = tmp_path / "gone" / "0"
    cfg = compose_config([*FEW_STEPS, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"])
    outcome = run_job(cfg, job_dir, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FAILED" and outcome["failure_kind"] == "orchestrator_error"
    assert "NotADirectoryError" in outcome["spool_error"]
    runs = runs_of(tmp_path)
    assert len(runs) == 1 and runs.iloc[0]["run_id"] == outcome["run_id"]
    run = runs.iloc[0]
    assert run["status"] == "FAILED" and run["tags.failure_kind"] == "orchestrator_error"
    assert "NotADirectoryError" in run["tags.spool_error"]
    assert run["params.strategy.name"] == "dp"
