"""hardware.time_source=auto, the default: a training job on this machine's device predicts its
compute from measured parts; a plan for other hardware (an H100 cluster planned on a laptop)
keeps the efficiency model, and nothing is timed for it.

    python -m pytest tests/unit/test_time_source.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distbench.compose import hardware, step_parts
from distbench.compose.hardware import STEP_PARTS_FIELDS, resolve_time_source
from distbench.compose.schema import ConfigError
from distbench.job import resolve_job
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("hw", "workload", "local_gpus", "expected"),
    [
        ({"device": "cpu", "name": "cpu", "time_source": "auto"}, "train", [], "measured"),
        ({"device": "cpu", "name": "cpu", "time_source": "auto"}, "inference", [], "efficiency"),
        ({"device": "cuda", "name": "h100_sxm", "time_source": "auto"}, "train", [], "efficiency"),
        (
            {"device": "cuda", "name": "h100_sxm", "time_source": "auto"},
            "train",
            [H100],
            "measured",
        ),
        ({"device": "cuda", "name": "h200", "time_source": "auto"}, "train", [H100], "efficiency"),
        # a GPU outside the catalog: hardware=auto names it after the device itself
        (
            {"device": "cuda", "name": "NVIDIA B200", "time_source": "auto"},
            "train",
            ["NVIDIA B200"],
            "measured",
        ),
        # given values stand, whatever the machine
        ({"device": "cuda", "name": "h200", "time_source": "measured"}, "train", [], "measured"),
        ({"device": "cpu", "name": "cpu", "time_source": "efficiency"}, "train", [], "efficiency"),
    ],
)
def test_auto_measures_only_what_runs_on_this_machine(
    hw, workload, local_gpus, expected, monkeypatch
):
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    assert resolve_time_source(hw, workload, local_gpus) == expected


def test_the_environment_says_what_auto_means(monkeypatch):
    local_cpu = {"device": "cpu", "name": "cpu", "time_source": "auto"}
    monkeypatch.setenv("DISTBENCH_TIME_SOURCE", "efficiency")
    assert resolve_time_source(local_cpu, "train", []) == "efficiency"
    given = {**local_cpu, "time_source": "measured"}
    assert resolve_time_source(given, "train", []) == "measured"  # a given value stands
    monkeypatch.setenv("DISTBENCH_TIME_SOURCE", "fitted")
    with pytest.raises(ConfigError, match=r"DISTBENCH_TIME_SOURCE='fitted' is not allowed"):
        resolve_time_source(local_cpu, "train", [])
    with pytest.raises(ConfigError, match="fitted"):  # before anything runs
        resolve_job(compose_config(["hardware=cpu"]), CONF_DIR)


def _no_subprocess(*args, **kwargs):
    raise AssertionError(f"a subprocess was started: {args}")


def test_the_default_job_predicts_from_this_cpus_measured_parts(monkeypatch, tmp_path):
    """With nothing set, `python run.py`'s job (tiny, dp, 2 ranks on this CPU) reads its parts
    from the cache a probe filled; an H100 plan of the same job times nothing."""
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    cfg = compose_config(["hardware=cpu"])
    assert cfg.hardware.time_source == "auto"
    model = resolve_job(compose_config(["hardware.time_source=efficiency"]), CONF_DIR).model
    # each of the 2 ranks gets its share of this machine's cores (launch/workers.py)
    threads = hardware.rank_threads(hardware.num_cpu_cores(), 2)
    name = hardware._device_name("cpu")
    key = step_parts.cache_key(
        name, "fp32", model, cfg.batch.micro_batch_size, cfg.batch.seq_len, threads
    )
    figures = {field: 0.25 for field in STEP_PARTS_FIELDS}
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({key: figures}))
    monkeypatch.setattr(hardware.subprocess, "run", _no_subprocess)
    monkeypatch.setattr(hardware, "gpu_names", lambda: [])  # as here, on a GPU machine too

    job = resolve_job(cfg, CONF_DIR)
    assert job.hardware.time_source == "measured"
    assert job.hardware.micro_batch_gemm_s == 0.25 and job.hardware.time_calibration_error is None

    planned = resolve_job(compose_config(["hardware=h100_sxm", "workload.dtype=bf16"]), CONF_DIR)
    assert planned.hardware.time_source == "efficiency"
    assert planned.hardware.micro_batch_gemm_s is None
    assert planned.hardware.time_calibration_error is None  # a choice, not a failure


def test_a_command_that_only_shows_a_job_measures_nothing(monkeypatch, tmp_path):
    """`distbench resolve`, run.py's precheck and a failure recorded after the fact resolve
    the job without a probe: cached parts where there are some, else the efficiency model."""
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hardware.subprocess, "run", _no_subprocess)
    shown = resolve_job(compose_config(["hardware=cpu"]), CONF_DIR, measure=False)
    assert shown.hardware.time_source == "efficiency"
    assert shown.hardware.time_calibration_error == hardware.NOT_MEASURED_HERE
    assert not (tmp_path / step_parts.CACHE_FILE).exists()


def test_plan_with_an_efficiency_predicts_with_it_and_times_nothing(tmp_path):
    """`distbench plan --efficiency 0.5` on this CPU: the efficiency asked for, not measured
    parts (which the default, auto, would time here)."""
    env = {k: v for k, v in os.environ.items() if k != "DISTBENCH_TIME_SOURCE"}
    env["DISTBENCH_CACHE_DIR"] = str(tmp_path)
    cmd = [sys.executable, "-m", "distbench.cli", "plan", "--efficiency", "0.5", "--json"]
    proc = subprocess.run(
        [*cmd, "model=tiny", "hardware=cpu"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    predictions = json.loads(proc.stdout)[:-1]  # one object per strategy, then the summary
    assert predictions and all(p["assumptions"]["time_source"] == "efficiency" for p in predictions)
    assert all(p["assumptions"]["efficiency"] == 0.5 for p in predictions)
    assert not (tmp_path / step_parts.CACHE_FILE).exists()
