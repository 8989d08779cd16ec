"""hardware.peak_source=measured for real: `python -m distbench.probes.calibrate` times a GEMM
on this CPU (one thread) and caches it; the session's shared README sweep ran with the measured
peak; a calibration that fails leaves the catalog peak with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distbench.job import resolve_job
from distbench.prepare import prepare_job
from distbench.probes import calibrate
from distbench.probes.detect import device_name
from tests.conftest import CONF_DIR, compose_config
from tests.e2e.shared_sweeps import Sweep

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sweep(readme_sweep) -> Sweep:
    return readme_sweep


def calibrate_cpu(cache_dir) -> dict:
    env = dict(os.environ, DISTBENCH_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "distbench.probes.calibrate",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
    ]
    cmd += ["--threads", "1", "--size", "512"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_calibrating_this_cpu_times_a_gemm_on_one_thread_and_caches_it(tmp_path):
    first = calibrate_cpu(tmp_path)
    assert first["cached"] is False and first["statistic"] == "best"
    assert first["num_iters"] >= 10 and first["threads"] == 1
    assert 0 < first["median_tflops"] <= first["tflops"] < 10  # one core: far below 10 TFLOP/s
    again = calibrate_cpu(tmp_path)
    assert again["cached"] is True and again["tflops"] == first["tflops"]


def test_the_sweep_ran_with_the_measured_peak_of_this_machine(sweep):
    from mlflow.tracking import MlflowClient

    cache = json.loads((sweep.cache_dir / "peak_tflops.json").read_text())
    key = calibrate.cache_key(device_name("cpu"), "fp32", 1)
    client = MlflowClient(sweep.tracking_uri)
    for run_id in sweep.child_run_ids:
        params = client.get_run(run_id).data.params
        assert params["hardware.peak_source"] == "measured"
        assert float(params["hardware.peak_tflops_fp32"]) == pytest.approx(cache[key]["tflops"])


def test_a_failed_calibration_keeps_the_catalog_peak_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "MODULE", "distbench.probes.no_such_probe")  # exits 1
    job = resolve_job(compose_config(["hardware=cpu", "hardware.peak_source=measured"]), CONF_DIR)
    prepared = prepare_job(job)
    hw = prepared.hardware
    assert hw.peak_source == "catalog"
    assert "no_such_probe exited 1" in prepared.measured.peak_calibration_error
    assert hw.peak_tflops_fp32 == job.hardware.peak_tflops_fp32 > 0
