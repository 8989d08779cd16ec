"""A first run under the default `hardware.time_source=auto`, nothing cached: its ranks start
without waiting on a probe, and once they have exited the step parts are measured, cached and
used for the run's prediction (distbench/prepare.py `measured_after_run`).

    pytest tests/distributed/test_parts_after_run.py -m distributed
"""

from __future__ import annotations

import json

import pytest

from distbench import prepare
from distbench.figures.predict import predict
from distbench.job import Job
from distbench.orchestrator import run_job
from distbench.probes import step_parts
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed


@pytest.fixture(autouse=True)
def no_parts_in_this_process(monkeypatch):
    """A fresh cache is not enough: parts timed on a busy host (the suite's other worker) are
    kept for the rest of the process (step_parts._BUSY), and an earlier test's would serve
    these jobs before launch."""
    monkeypatch.setattr(step_parts, "_BUSY", {})
    monkeypatch.setattr(step_parts, "_FAILED", {})


def test_a_first_run_under_auto_is_predicted_from_parts_measured_after_its_ranks(
    tmp_path, monkeypatch, capsys
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
    said = capsys.readouterr()
    assert "timing the step parts of a 2 x 128 fp32 micro-batch" in said.err
    assert "predicted after the run with time_source=measured" in said.out
    # the ranks ran first: resolved.yaml was rewritten after the last step's line
    progress = [json.loads(line) for line in (job_dir / "progress.jsonl").read_text().splitlines()]
    last_step_s = max(line["time_unix_s"] for line in progress)
    assert (job_dir / "resolved.yaml").stat().st_mtime >= last_step_s
    # resolved.yaml says what the prediction used, and the logged prediction is that job's
    job = Job.load(job_dir)
    assert job.hardware.time_source == "measured"
    assert job.measured.time_calibration_error is None
    assert job.measured.cpu_direct_over_parts > 0  # the tiny micro-batch was run whole
    assert outcome["metrics"]["pred_step_time_s"] == pytest.approx(predict(job).step_time_s)
    parts_file = cache / step_parts.CACHE_FILE
    if parts_file.exists():  # cached, unless the suite's other worker kept the host busy
        entry = next(iter(json.loads(parts_file.read_text()).values()))
        assert job.measured.micro_batch_gemm_s == entry["micro_batch_gemm_s"]
    else:
        assert "the host was busy when the step parts' timing started" in said.err

    # the same job again: its parts are read before launch, and once its ranks have exited its
    # micro-batch is run whole again and the parts scaled to the host's speed now
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    outcome = run_job(cfg, again_dir, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    said = capsys.readouterr()
    assert "timing the step parts" not in said.err
    assert "the micro-batch run whole after the ranks" in said.out
    again = Job.load(again_dir)
    ratio = again.measured.cpu_direct_after_run_over_cached
    assert ratio > 0
    assert again.measured.micro_batch_gemm_s == pytest.approx(
        job.measured.micro_batch_gemm_s * ratio
    )
    assert outcome["metrics"]["pred_step_time_s"] == pytest.approx(predict(again).step_time_s)


def test_a_ctrl_c_during_the_post_run_probe_keeps_what_the_ranks_measured(tmp_path, monkeypatch):
    """The ranks are done when the probe starts: a Ctrl-C (or SIGTERM) then stops the sweep,
    and the job is recorded FINISHED with its figures first, not as a cancelled job."""
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path / "cache"))

    def interrupted_probe(job):  # the user's Ctrl-C, arriving while the parts are timed
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "measured_after_run", interrupted_probe)
    steps = ["workload.num_warmup_steps=1", "workload.num_steps=1"]
    cfg = compose_config(["tracking=none", "strategy=single", "world_size=1", *steps])
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, tmp_path, CONF_DIR, PROJECT_DIR)
    outcome = json.loads((tmp_path / "outcome.json").read_text())
    assert outcome["status"] == "FINISHED" and outcome["metrics"]["step_time_s_p50"] > 0
    assert Job.load(tmp_path).hardware.time_source == "efficiency"  # as it ran, unmeasured
