"""resume=true tops up the repeats a stopped sweep left missing, through `python run.py -m`
into a real sqlite store: a store holding repeats 1 and 2 of a config FINISHED and its repeat 3
ended orchestrator_lost (what a sweep SIGKILLed during repeat 3 leaves once closed) gets exactly
one new run, repeat 3, named, tagged and placed as in a fresh sweep, whose spread counts all
three; resumed again, the job is skipped whole. One real job (one rank, one step).

    pytest tests/e2e/test_resume_repeats.py
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from distbench.job import resolve_job
from distbench.orchestrator import resolve_or_refuse
from distbench.orchestrator.outcome import JobContext, new_outcome
from distbench.orchestrator.repeats import spread_pct
from distbench.orchestrator.resume import resume_job
from distbench.tracking.mlflow_store import ensure_experiment
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX, SIGNATURE_TAG, run_signature
from tests.conftest import CONF_DIR, compose_config
from tests.e2e.test_repeats import TINY_REPEATS, run_sweep_into

pytestmark = pytest.mark.e2e

TINY = [a for a in TINY_REPEATS if not a.startswith("repeats=")]
SEEDED_STEP_S = {"1": 0.05, "2": 0.06}


def seed_stopped_sweep(uri: str, signature: str) -> dict[str, str]:
    """Repeats 1 and 2 FINISHED, repeat 3 lost with its orchestrator; {repeat: run id}."""
    client = MlflowClient(uri)
    experiment_id = ensure_experiment(uri, "distbench")
    runs = {}
    for repeat in ("1", "2", "3"):
        tags = {SIGNATURE_TAG: signature, "repeat": repeat}
        if repeat == "3":
            tags.update(failure_kind="orchestrator_lost", failure_reason="killed")
        run = client.create_run(experiment_id, tags=tags, run_name=f"single-ws1 repeat={repeat}")
        if repeat in SEEDED_STEP_S:
            client.log_metric(run.info.run_id, "step_time_s_p50", SEEDED_STEP_S[repeat])
        client.set_terminated(run.info.run_id, "FAILED" if repeat == "3" else "FINISHED")
        runs[repeat] = run.info.run_id
    return runs


def resume(tmp_path, uri: str, sweep: str) -> subprocess.CompletedProcess:
    args = [*TINY, "repeats=3", "resume=true", f"hydra.sweep.dir={tmp_path / sweep}"]
    return run_sweep_into(tmp_path, uri, args)


def test_resume_runs_only_the_missing_repeat_and_spreads_over_all_three(sqlite_store, tmp_path):
    uri = sqlite_store  # tmp_path/mlflow.db, a copy of the session's empty store
    signature = run_signature(resolve_job(compose_config(TINY), CONF_DIR).tree())
    seeded = seed_stopped_sweep(uri, signature)
    client = MlflowClient(uri)

    proc = resume(tmp_path, uri, "s1")
    assert "repeats 1, 2 of 3 already ran" in proc.stdout and "running repeat 3" in proc.stdout
    assert "repeat 3/3" in proc.stdout and "repeat 1/3" not in proc.stdout
    experiment_id = client.get_experiment_by_name("distbench").experiment_id
    same = client.search_runs([experiment_id], f"tags.`{SIGNATURE_TAG}` = '{signature}'")
    (new,) = [r for r in same if r.info.run_id not in seeded.values()]
    assert new.info.status == "FINISHED" and new.data.tags["repeat"] == "3"
    assert new.info.run_name.endswith(" repeat=3")
    parent = new.data.tags["mlflow.parentRunId"]

    metrics = new.data.metrics
    assert metrics["num_repeats_finished"] == 3  # the two earlier ones and this one
    values = [*SEEDED_STEP_S.values(), metrics["step_time_s_p50"]]
    assert metrics["step_time_s_p50_repeat_spread_pct"] == pytest.approx(spread_pct(values))
    for repeat in ("1", "2"):  # they stand in this sweep: its report covers them
        tags = client.get_run(seeded[repeat]).data.tags
        assert f"{RESUMED_INTO_TAG_PREFIX}{parent}" in tags

    job_dir = tmp_path / "s1" / "0"  # repeat 3 is the last: it runs in the job dir
    assert json.loads((job_dir / "outcome.json").read_text())["repeat"] == "3"
    assert not list(job_dir.glob("repeat-*"))

    # Resumed again, every repeat has its run: the job is skipped whole, standing by repeat 3.
    cfg = compose_config([*TINY, "repeats=3", "resume=true", f"tracking.uri={uri}"])
    job = resolve_or_refuse(cfg, CONF_DIR)
    ctx = JobContext(tmp_path / "s2" / "0", tmp_path, "job 1/1", time.monotonic())
    outcome = new_outcome(job, ctx)
    assert outcome.signature == signature and resume_job(job, outcome, ctx, 3).skipped
    assert outcome.skipped_reason.startswith(f"already FINISHED as run {new.info.run_id}")
    assert json.loads((ctx.job_dir / "outcome.json").read_text())["status"] == "SKIPPED"
