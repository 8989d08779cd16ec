"""resume=true with repeats=N (orchestrator/resume.py, repeats.py): which repeats an earlier
sweep decided, read from MLflow's own run entities, and where the missing ones run. The real
top-up through run.py is tests/e2e/test_resume_repeats.py.

    pytest tests/unit/test_resume_repeats.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.entities import Run, RunData, RunInfo, RunTag

from distbench.orchestrator import repeats as rp
from distbench.orchestrator.resume import repeat_of, repeats_ran

pytestmark = pytest.mark.unit


def run(run_id: str, status: str, start_s: int, **tags: str) -> Run:
    """A run as MlflowClient.search_runs returns it (status, start time, tags)."""
    info = RunInfo(run_id, "0", "me", status, start_s * 1000, None, "active")
    return Run(info, RunData(tags=[RunTag(k, v) for k, v in tags.items()]))


def newest_first(*runs: Run) -> list[Run]:
    return sorted(runs, key=lambda r: r.info.start_time, reverse=True)


def test_a_sweep_stopped_after_two_of_three_repeats_has_only_the_third_to_run():
    runs = newest_first(
        run("r1", "FINISHED", 1, repeat="1"),
        run("r2", "FINISHED", 2, repeat="2"),
        run("r3", "FAILED", 3, repeat="3", failure_kind="orchestrator_lost"),  # the kill
    )
    ran = repeats_ran(runs, 3, retry_failed=False)
    assert {r: v.info.run_id for r, v in ran.items()} == {1: "r1", 2: "r2"}
    assert rp.missing_repeats(3, ran) == [3]
    assert rp.repeat_dir(Path("j"), 3, last=3) == Path("j")  # its outcome is the job's


def test_a_failed_repeat_stands_unless_retry_failed_and_a_finished_one_wins():
    runs = newest_first(
        run("r1", "FINISHED", 1, repeat="1"),
        run("r1-again", "FAILED", 5, repeat="1", failure_kind="oom"),  # FINISHED still wins
        run("r2", "FAILED", 2, repeat="2", failure_kind="oom"),
        run("r3", "FINISHED", 3, repeat="3"),
    )
    assert sorted(repeats_ran(runs, 3, retry_failed=False)) == [1, 2, 3]
    retried = repeats_ran(runs, 3, retry_failed=True)
    assert {r: v.info.run_id for r, v in retried.items()} == {1: "r1", 3: "r3"}
    # The gap is rerun; as the last one run here, repeat 2 takes the job dir.
    assert rp.missing_repeats(3, retried) == [2]
    assert rp.repeat_dir(Path("j"), 2, last=2) == Path("j")
    assert rp.repeat_dir(Path("j"), 1, last=3) == Path("j") / "repeat-1"


def test_a_run_of_a_single_repeat_sweep_counts_as_repeat_one():
    runs = [run("once", "FINISHED", 1)]  # repeats=1 tags no `repeat`
    assert repeat_of(runs[0]) == 1
    assert list(repeats_ran(runs, 2, retry_failed=False)) == [1]
    assert rp.missing_repeats(2, [1]) == [2]
    assert repeats_ran([run("k", "KILLED", 1, repeat="1")], 1, retry_failed=False) == {}
