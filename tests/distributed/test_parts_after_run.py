"""A first run under the default `hardware.time_source=auto`, nothing cached: its ranks start
without waiting on a probe, and once they have exited the step parts are measured, cached and
used for the run's prediction (distbench/prepare.py `measured_after_run`).

    pytest tests/distributed/test_parts_after_run.py -m distributed
"""

from __future__ import annotations

import json

import pytest

from distbench.figures.predict import predict
from distbench.job import Job
from distbench.orchestrator import run_job
from distbench.probes import step_parts
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed


def test_a_first_run_under_auto_is_predicted_from_parts_measured_after_its_ranks(
    tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(cache))
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")  # the suite's pin (tests/conftest.py)
    steps = ["workload.num_warmup_steps=1", "workload.num_steps=1"]
    cfg = compose_config(["tracking=none", "strategy=single", "world_size=1", *steps])
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    outcome = run_job(cfg, job_dir, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    # the ranks ran first: the parts' cache entry was written after the last step's line
    progress = [json.loads(line) for line in (job_dir / "progress.jsonl").read_text().splitlines()]
    entry = next(iter(json.loads((cache / step_parts.CACHE_FILE).read_text()).values()))
    last_step_s = max(line["time_unix_s"] for line in progress)
    measured_at = entry["measured_at"]  # local time, to the second
    assert measured_at >= _local_stamp(last_step_s)
    # resolved.yaml says what the prediction used, and the logged prediction is that job's
    job = Job.load(job_dir)
    assert job.hardware.time_source == "measured"
    assert job.measured.time_calibration_error is None
    assert job.measured.micro_batch_gemm_s == entry["micro_batch_gemm_s"]
    assert job.measured.cpu_direct_over_parts == entry["cpu_direct_over_parts"]
    assert outcome["metrics"]["pred_step_time_s"] == pytest.approx(predict(job).step_time_s)


def _local_stamp(unix_s: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(unix_s)))
