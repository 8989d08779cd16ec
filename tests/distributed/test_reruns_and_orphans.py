"""A job dir rerun (a retried sweep into the same hydra.sweep.dir) never reads an earlier
attempt's files. (A SIGKILLed orchestrator taking its torchrun, its ranks and their /dev/shm
files along: tests/e2e/test_live_runs.py's SIGKILL test.)

    pytest tests/distributed/test_reruns_and_orphans.py
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from distbench.orchestrator import run_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed

FAST = [
    "tracking=none",
    "model=tiny",
    "workload=inference",
    "workload.num_warmup_steps=0",
    "workload.num_steps=2",
    "world_size=2",
]
STALE_S = 3600.0  # how old an earlier attempt's heartbeats are


def run(job_dir: Path, overrides: list[str]) -> dict:
    return run_job(compose_config([*FAST, *overrides]), job_dir, CONF_DIR, PROJECT_DIR)


@pytest.fixture(scope="module")
def finished_job_dir(inference_sweep) -> Path:
    """The dir of a job that ran and FINISHED (the shared inference sweep's dp job): its
    result.json and heartbeats are there."""
    job_dir = inference_sweep.job_dir("dp")
    assert inference_sweep.outcome("dp")["status"] == "FINISHED"
    assert (job_dir / "result.json").exists() and (job_dir / "heartbeat" / "rank1").exists()
    return job_dir


def test_a_crashed_rerun_is_not_finished_by_the_earlier_attempts_result(finished_job_dir, tmp_path):
    job_dir = tmp_path / "job"
    shutil.copytree(finished_job_dir, job_dir)
    outcome = run(job_dir, ["fault.kind=raise", "fault.rank=1", "fault.at_step=1"])
    assert outcome["status"] == "FAILED", "the earlier attempt's measurement was recorded"
    assert outcome["failure_kind"] == "crash"
    assert outcome["failure_reason"].startswith("rank 1: RuntimeError: fault injected")
    assert not (job_dir / "result.json").exists()


def test_an_earlier_attempts_heartbeats_do_not_stop_a_healthy_rerun(finished_job_dir, tmp_path):
    job_dir = tmp_path / "job"
    shutil.copytree(finished_job_dir, job_dir)
    long_ago = time.time() - STALE_S
    for beat in (job_dir / "heartbeat").iterdir():
        os.utime(beat, (long_ago, long_ago))
    outcome = run(job_dir, ["limits.stall_timeout_s=300"])
    assert outcome["status"] == "FINISHED", outcome
