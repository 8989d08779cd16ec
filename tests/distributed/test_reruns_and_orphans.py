"""A job dir rerun (a retried sweep into the same hydra.sweep.dir) never reads an earlier
attempt's files, and a SIGKILLed orchestrator takes its torchrun and ranks along.

    pytest tests/distributed/test_reruns_and_orphans.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distbench.orchestrator import run_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config
from tests.e2e.test_faults import processes_mentioning

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
def finished_job_dir(tmp_path_factory) -> Path:
    """The dir of a job that ran and FINISHED: its result.json and heartbeats are there."""
    job_dir = tmp_path_factory.mktemp("earlier") / "job"
    outcome = run(job_dir, [])
    assert outcome["status"] == "FINISHED", outcome
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


def pythonpath() -> str:
    """The child's: what this process was given first, then the project (for tests.conftest)."""
    return os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(PROJECT_DIR)]))


ORCHESTRATOR = """
import sys
from pathlib import Path
from distbench.orchestrator import run_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config
run_job(compose_config(sys.argv[2:]), Path(sys.argv[1]), CONF_DIR, PROJECT_DIR)
"""


def test_a_sigkilled_orchestrator_takes_torchrun_and_every_rank_along(tmp_path):
    job_dir = tmp_path / "job"
    stall = ["fault.kind=stall", "fault.rank=1", "fault.at_step=1", "limits.stall_timeout_s=600"]
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR, str(job_dir), *FAST, *stall],
        cwd=PROJECT_DIR,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=pythonpath()),
    )
    try:
        deadline = time.monotonic() + 240
        beat = job_dir / "heartbeat" / "rank1"  # rank 1 is at step 1, sleeping: a stall
        while not (beat.exists() and beat.read_text() == "1"):
            assert orchestrator.poll() is None, "the orchestrator ended before the stall"
            assert time.monotonic() < deadline, "rank 1 never reached its stall"
            time.sleep(0.5)
        workers = processes_mentioning(str(job_dir))
        assert len(workers) >= 3  # torchrun and two ranks
        port = next(arg for w in workers for arg in w.cmdline() if arg.startswith("--master_p"))
        shm_files = f"*_127.0.0.1_{port.split('=')[1]}_*"  # DeepSpeed's, 66 MB a rank
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            processes_mentioning(str(job_dir)) or list(Path("/dev/shm").glob(shm_files))
        ):
            time.sleep(0.2)
        left = [(p.pid, p.status(), p.cmdline()) for p in processes_mentioning(str(job_dir))]
        assert left == [], "workers outlived their orchestrator"
        assert not list(Path("/dev/shm").glob(shm_files)), "the killed ranks' shm files stayed"
    finally:
        orchestrator.kill()
        for proc in processes_mentioning(str(job_dir)):  # what the test itself started
            proc.kill()
