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

from distbench.compose import hardware
from distbench.compose.schema import ConfigError
from distbench.job import resolve_job
from distbench.prepare import measured_after_run, prepare_job
from distbench.probes import detect, runner, step_parts
from distbench.probes.parts import STEP_PARTS_FIELDS
from distbench.probes.runner import NOT_MEASURED_HERE
from distbench.probes.threads import rank_threads
from distbench.tracking.signature import run_signature
from distbench.workloads.train.prepare import resolve_time_source
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("time_source", "device", "name", "local_gpus", "expected"),
    [
        ("auto", "cpu", "cpu", [], "measured"),
        ("auto", "cuda", "h100_sxm", [], "efficiency"),
        ("auto", "cuda", "h100_sxm", [H100], "measured"),
        ("auto", "cuda", "h200", [H100], "efficiency"),
        # a GPU outside the catalog: hardware=auto names it after the device itself
        ("auto", "cuda", "NVIDIA B200", ["NVIDIA B200"], "measured"),
        # given values stand, whatever the machine
        ("measured", "cuda", "h200", [], "measured"),
        ("efficiency", "cpu", "cpu", [], "efficiency"),
    ],
)
def test_auto_measures_only_what_runs_on_this_machine(
    time_source, device, name, local_gpus, expected, monkeypatch
):
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    assert resolve_time_source(time_source, device, name, local_gpus) == expected


def test_a_workload_without_a_prepare_hook_predicts_with_the_efficiency_model(monkeypatch):
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    inference = resolve_job(compose_config(["workload=inference", "hardware=cpu"]), CONF_DIR)
    assert prepare_job(inference).hardware.time_source == "efficiency"


def test_the_environment_says_what_auto_means(monkeypatch):
    monkeypatch.setenv("DISTBENCH_TIME_SOURCE", "efficiency")
    assert resolve_time_source("auto", "cpu", "cpu", []) == "efficiency"
    assert resolve_time_source("measured", "cpu", "cpu", []) == "measured"  # given: it stands
    monkeypatch.setenv("DISTBENCH_TIME_SOURCE", "fitted")
    with pytest.raises(ConfigError, match=r"DISTBENCH_TIME_SOURCE='fitted' is not allowed"):
        resolve_time_source("auto", "cpu", "cpu", [])
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
    threads = rank_threads(detect.num_cpu_cores(), 2)
    name = detect.device_name("cpu")
    key = step_parts.cache_key(
        name, "fp32", model, cfg.batch.micro_batch_size, cfg.batch.seq_len, threads
    )
    figures = {field: 0.25 for field in STEP_PARTS_FIELDS}
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({key: figures}))
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    monkeypatch.setattr(hardware, "gpu_names", lambda: [])  # as here, on a GPU machine too

    job = prepare_job(resolve_job(cfg, CONF_DIR))
    assert job.hardware.time_source == "measured"
    assert job.measured.micro_batch_gemm_s == 0.25 and job.measured.time_calibration_error is None

    planned = resolve_job(compose_config(["hardware=h100_sxm", "workload.dtype=bf16"]), CONF_DIR)
    planned = prepare_job(planned)
    assert planned.hardware.time_source == "efficiency"
    assert planned.measured.micro_batch_gemm_s is None
    assert planned.measured.time_calibration_error is None  # a choice, not a failure


def test_a_command_that_only_shows_a_job_measures_nothing(monkeypatch, tmp_path):
    """`distbench resolve`, run.py's precheck and a failure recorded after the fact resolve
    the job without a probe: cached parts where there are some, else the efficiency model."""
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    shown = prepare_job(resolve_job(compose_config(["hardware=cpu"]), CONF_DIR), probe=False)
    assert shown.hardware.time_source == "efficiency"
    assert shown.measured.time_calibration_error == NOT_MEASURED_HERE
    assert not (tmp_path / step_parts.CACHE_FILE).exists()


def test_resolving_a_job_starts_nothing_reads_no_store_and_writes_no_cache(monkeypatch, tmp_path):
    """resolve_job is pure: a measured ZeRO-3 job with a measured peak and measured links
    resolves without a subprocess, a store or a cache (prepare_job attaches them later)."""
    import subprocess as subprocess_module

    from distbench.tracking import pred_history

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess_module, "run", _no_subprocess)
    monkeypatch.setattr(subprocess_module, "Popen", _no_subprocess)
    monkeypatch.setattr(pred_history, "store_exists", _no_subprocess)  # no store is read
    measured = [
        "model=tiny",
        "strategy=zero3",
        "hardware=h100_sxm",
        "hardware.time_source=measured",
        "hardware.peak_source=measured",
        "hardware.link_source=measured",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
    ]
    job = resolve_job(compose_config(measured), CONF_DIR)
    assert job.hardware.time_source == "measured" and job.measured.micro_batch_gemm_s is None
    assert list(cache.iterdir()) == [] and list(tmp_path.iterdir()) == [cache]


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


def test_distbench_resolve_writes_nothing_to_the_cache(tmp_path):
    """`distbench resolve` of a job whose default measures its parts (tiny on this CPU, and a
    measured peak) shows the job without a probe: the cache folder stays empty."""
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DISTBENCH_TIME_SOURCE"}
    env["DISTBENCH_CACHE_DIR"] = str(cache)
    cmd = [sys.executable, "-m", "distbench.cli", "resolve", "--json", "model=tiny"]
    cmd += ["hardware=cpu", "hardware.peak_source=measured", "strategy=zero3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)["job"]
    assert shown["hardware"]["time_source"] == "efficiency"
    assert shown["measured"]["time_calibration_error"] == NOT_MEASURED_HERE
    assert list(cache.iterdir()) == []


def _probes_print_parts(monkeypatch, tmp_path) -> list[list[str]]:
    """A CPU-only machine under `auto`, an empty cache in tmp_path, and a step-parts process
    that prints parts of 0.125 s: the commands started are appended to the list returned."""
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hardware, "gpu_names", lambda: [])
    started: list[list[str]] = []

    def probe_process(cmd, **kwargs):  # what the step-parts process prints last
        started.append(cmd)
        parts = json.dumps({field: 0.125 for field in STEP_PARTS_FIELDS})
        return subprocess.CompletedProcess(cmd, 0, stdout=parts + "\n", stderr="")

    monkeypatch.setattr(runner.subprocess, "run", probe_process)
    return started


def test_after_its_ranks_a_run_under_auto_measures_what_it_did_not_wait_for(monkeypatch, tmp_path):
    """prepare.measured_after_run: the job prepared on the efficiency model because nothing was
    cached (NOT_ASKED_TO_MEASURE) gets its parts once its ranks have exited; a job that chose
    its time source, or whose parts were cached, is left as it is."""
    started = _probes_print_parts(monkeypatch, tmp_path)
    overrides = ["hardware=cpu", "batch.micro_batch_size=5"]  # a shape nothing else caches
    in_a_run = prepare_job(resolve_job(compose_config(overrides), CONF_DIR), probe_when_auto=False)
    assert started == [] and in_a_run.hardware.time_source == "efficiency"
    after = measured_after_run(in_a_run)
    assert len(started) == 1
    assert after.hardware.time_source == "measured"
    assert after.measured.micro_batch_gemm_s == 0.125
    assert after.measured.time_calibration_error is None
    # the same config, better predicted: the run pairs with any other run of it
    assert run_signature(after.tree()) == run_signature(in_a_run.tree())
    chosen = compose_config([*overrides, "hardware.time_source=efficiency"])
    efficiency = prepare_job(resolve_job(chosen, CONF_DIR), probe_when_auto=False)
    assert measured_after_run(efficiency) is efficiency and len(started) == 1


def test_a_run_under_auto_reads_cached_parts_and_measures_only_when_asked(monkeypatch, tmp_path):
    """A run prepares with probe_when_auto=False: under the default `auto` its ranks start
    without a probe (the efficiency model, saying how to measure); `time_source=measured`
    asks for the probe, and the parts it cached serve the next `auto` run."""
    started = _probes_print_parts(monkeypatch, tmp_path)
    overrides = ["hardware=cpu", "batch.micro_batch_size=3"]  # a shape nothing else caches
    in_a_run = prepare_job(resolve_job(compose_config(overrides), CONF_DIR), probe_when_auto=False)
    assert started == []
    assert in_a_run.hardware.time_source == "efficiency"
    assert runner.NOT_ASKED_TO_MEASURE in in_a_run.measured.time_calibration_error

    asked = compose_config([*overrides, "hardware.time_source=measured"])
    measured = prepare_job(resolve_job(asked, CONF_DIR), probe_when_auto=False)
    assert len(started) == 1 and measured.measured.micro_batch_gemm_s == 0.125

    # the probe process caches what it measured (here: as it would, by hand)
    threads = rank_threads(detect.num_cpu_cores(), 2)
    key = step_parts.cache_key(detect.device_name("cpu"), "fp32", measured.model, 3, 128, threads)
    figures = {field: 0.125 for field in STEP_PARTS_FIELDS}
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({key: figures}))
    again = prepare_job(resolve_job(compose_config(overrides), CONF_DIR), probe_when_auto=False)
    assert len(started) == 1  # the cached parts serve the next run under auto
    assert again.hardware.time_source == "measured"
    assert again.measured.time_calibration_error is None
