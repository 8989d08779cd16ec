"""hw.* tags (nvidia-smi and /proc parsing, this machine's tags), check_mfu, the peak cache and
hardware.peak_source (validation, a cached measured peak). Calibration runs: tests/e2e."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from distbench.compose import hardware
from distbench.compose.schema import ConfigError
from distbench.figures.metrics import check_mfu
from distbench.job import resolve_job
from distbench.prepare import prepare_job
from distbench.probes import calibrate, detect
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

SMI = (
    "NVIDIA H100 80GB HBM3, 81559 MiB, 1980 MHz, 9.0\n"
    "NVIDIA H100 80GB HBM3, 81559 MiB, 1980 MHz, 9.0\n"
    "Tesla T4, 15360 MiB, [N/A], [N/A]\n"
)


def test_nvidia_smi_lines_become_the_gpu_table():
    gpus = detect.parse_nvidia_smi(SMI)
    assert gpus[0] == {
        "name": "NVIDIA H100 80GB HBM3",
        "mem_gib": "79.6",
        "sm_clock_mhz": "1980",
        "compute_capability": "9.0",
    }
    assert len(gpus) == 3
    assert gpus[2]["sm_clock_mhz"] == "" and gpus[2]["compute_capability"] == ""


def test_cpu_model_and_memory_from_proc():
    cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC  7B13 64-Core Processor\nflags\t: avx2\n"
    assert detect.parse_cpu_model(cpuinfo) == "AMD EPYC 7B13 64-Core Processor"
    assert detect.parse_cpu_model("processor: 0\n") == "unknown"
    assert detect.parse_mem_total_gib("MemTotal:       24641536 kB\n") == pytest.approx(23.5, 0.01)


def test_this_machine_has_cpu_tags_and_the_cores_this_process_may_use():
    tags = detect.detect_tags()
    assert all(k.startswith("hw.") and isinstance(v, str) and v for k, v in tags.items())
    assert tags["hw.cpu_cores"] == str(len(os.sched_getaffinity(0)))
    assert tags["hw.cpu_model"] != "unknown"
    if not detect.detect_gpus():  # this CI machine: the CPU is the device
        assert tags["hw.device"] == "cpu"
        assert tags["hw.device_name"] == tags["hw.cpu_model"]
        assert tags["hw.device_count"] == tags["hw.cpu_cores"]
        assert float(tags["hw.mem_gib"]) > 0


def test_detection_and_the_catalog_do_not_import_torch():
    code = (
        "import sys, distbench.probes.detect as d, distbench.compose.hardware as h; "
        "d.detect_tags(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("mfu", [0.0, 12.5, 100.0, None])
def test_a_possible_mfu_passes(mfu):
    assert check_mfu(mfu) is None


def test_an_mfu_above_100_percent_is_an_error_naming_the_peak():
    reason = check_mfu(134.2, peak_tflops_per_device=0.0351)
    assert reason.startswith("mfu_pct=134.2 > 100")
    assert "0.0351 TFLOP/s" in reason and "peak_source=measured" in reason
    assert check_mfu(math.inf) and check_mfu(-1.0)


def test_peak_source_must_be_catalog_or_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    name = detect.device_name("cpu")
    calibrate.store_peak(name, "fp32", 1, {"tflops": 0.0421})  # no calibration run here
    job = resolve_job(compose_config(["hardware=cpu", "hardware.peak_source=measured"]), CONF_DIR)
    job = prepare_job(job)
    assert job.hardware.peak_source == "measured" and job.hardware.peak_tflops_fp32 == 0.0421
    with pytest.raises(ConfigError, match=r"hardware.peak_source='datasheet' is not allowed"):
        resolve_job(compose_config(["hardware.peak_source=datasheet"]), CONF_DIR)


def test_the_peak_cache_is_keyed_by_host_device_dtype_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    assert calibrate.cached_peak("cpu X", "fp32", 1) is None
    calibrate.store_peak("cpu X", "fp32", 1, {"tflops": 0.05})
    calibrate.store_peak("cpu X", "fp32", 2, {"tflops": 0.09})
    assert calibrate.cached_peak("cpu X", "fp32", 1) == 0.05
    assert calibrate.cached_peak("cpu X", "fp32", 2) == 0.09
    assert calibrate.cached_peak("cpu X", "bf16", 1) is None
    keys = json.loads((tmp_path / "peak_tflops.json").read_text())
    assert calibrate.cache_key("cpu X", "fp32", 1) in keys


def test_a_cached_measured_peak_replaces_the_catalog_one(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    calibrate.store_peak(detect.device_name("cpu"), "fp32", 1, {"tflops": 0.0421})
    measured = ["hardware=cpu", "hardware.peak_source=measured", "workload.dtype=fp32"]
    job = resolve_job(compose_config(measured), CONF_DIR)
    assert job.hardware.peak_tflops_fp32 != 0.0421  # resolving measures nothing
    prepared = prepare_job(job)
    hw = prepared.hardware
    assert hw.peak_tflops_fp32 == 0.0421 and hw.peak_source == "measured"
    catalog = hardware.resolve_hardware({"name": "cpu", "device": "cpu"}, CONF_DIR)
    assert prepared.measured.catalog_peak_tflops_fp32 == catalog["peak_tflops_fp32"]
    assert hw.peak_tflops_bf16 == catalog["peak_tflops_bf16"]  # not asked for
    again = prepare_job(prepared)  # preparing twice measures once
    assert (again.hardware, again.measured) == (hw, prepared.measured)


@pytest.mark.parametrize("content", ["null", "[1, 2]", '{"KEY": null}', '{"KEY": {"tflops": "x"}}'])
def test_a_damaged_peak_cache_reads_as_not_measured(content, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    key = calibrate.cache_key("cpu X", "fp32", 1)
    (tmp_path / calibrate.CACHE_FILE).write_text(content.replace("KEY", key))
    assert calibrate.cached_peak("cpu X", "fp32", 1) is None
    calibrate.store_peak("cpu X", "fp32", 1, {"tflops": 0.05})  # and is written over
    assert calibrate.cached_peak("cpu X", "fp32", 1) == 0.05
