"""ZeRO-3's host work under hardware.time_source=measured: the probe times DeepSpeed's real
ZeRO-3 engine on one rank against the bare model, the job's prediction adds what it found, and
a failed probe never loses the job.

    python -m pytest tests/unit/test_engine_probe.py -q
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from distbench.figures.predict import predict
from distbench.figures.step_time import engine_step_host_s, optimizer_step_s
from distbench.job import resolve_job
from distbench.prepare import prepare_job
from distbench.probes import runner
from distbench.probes.detect import device_name
from distbench.probes.parts import ENGINE_PARTS_FIELDS
from distbench.workloads.train import engine_probe, prepare
from distbench.workloads.train.engine_probe import PROBE_FIELDS
from tests.conftest import CONF_DIR, compose_config, with_measured_parts

pytestmark = pytest.mark.unit

TINY_ZERO3 = ["model=tiny", "strategy=zero3", "world_size=2"]


def _job(overrides: list[str]):
    return resolve_job(compose_config(overrides), CONF_DIR)


def _measured(job, **engine):
    return with_measured_parts(job, gemm_s=0.03, other_s=0.02, host_s=0.05, **engine)


def test_the_probe_is_one_rank_of_the_same_engine_on_one_micro_batch():
    bucket = "+zero_optimization.stage3_prefetch_bucket_size=7"
    job = _job([*TINY_ZERO3, "batch=medium", "hardware=h100_sxm", bucket])
    cut = engine_probe.probe_job(job, 2)
    assert (cut.layout.world_size, cut.layout.dp, cut.layout.zero_stage) == (1, 1, 3)
    # the job's own micro-batch: what the kernels hide of the hooks depends on their size
    shape = (cut.batch.micro_batch_size, cut.batch.seq_len)
    assert shape == (job.batch.micro_batch_size, job.batch.seq_len)
    assert cut.batch.grad_accum_steps == 1 and cut.model.num_layers == 2
    assert cut.zero_optimization == job.zero_optimization  # the run's own buckets
    assert cut.model.hidden_size == job.model.hidden_size and cut.dtype == job.dtype
    # ZeRO-3 on a GPU is probed, with AutoTP too (probed without it); the engines whose hooks
    # the trace covers and a CPU are not
    assert engine_probe.applies(job)
    with_tp = _job(["model=tiny", "strategy=dp", "zero_stage=3", "strategy.tp=2", "world_size=4"])
    with_tp = with_tp.replace(hardware=job.hardware)
    assert engine_probe.applies(with_tp)
    assert engine_probe.probe_job(with_tp, 1).layout.tp == 1
    assert not engine_probe.applies(_job(TINY_ZERO3))
    for other in ("zero2", "dp", "ddp", "fsdp"):
        gpu = ["model=tiny", "world_size=2", "hardware=h100_sxm", f"strategy={other}"]
        assert not engine_probe.applies(_job(gpu))


def test_the_cuts_extrapolate_to_the_models_depth():
    probe = {
        "forward_backward_s": {"1": 0.03, "2": 0.05},
        "bare_forward_backward_s": {"1": 0.01, "2": 0.015},
        "step_s": {"1": 0.01, "2": 0.012},
    }
    parts = engine_probe.engine_parts(probe, 16)
    assert parts["micro_batch_engine_host_s"] == pytest.approx(0.02 + 15 * 0.015)
    assert parts["engine_step_s"] == pytest.approx(0.01 + 15 * 0.002)
    # noise that makes a layer look cheaper than none gives 0, not a negative time
    noisy = {**probe, "forward_backward_s": {"1": 0.05, "2": 0.03}}
    assert engine_probe.engine_parts(noisy, 16)["micro_batch_engine_host_s"] == 0.0


def test_zero3s_hooks_are_measured_on_its_real_engine_once_then_read_from_the_cache(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    job = _job(TINY_ZERO3)
    job_yaml = tmp_path / "job.yaml"
    job_yaml.write_text(job.to_yaml())
    cmd = [sys.executable, "-m", engine_probe.MODULE, "--job-yaml", str(job_yaml)]
    proc = subprocess.run(
        [*cmd, "--device-name", "test-cpu"], capture_output=True, text=True, check=True
    )
    first = json.loads(proc.stdout.strip().splitlines()[-1])
    # the engine's forward + backward and the bare model's, at both cuts (which of the two is
    # longer is a timing, not a unit test's business: benchmarks/gpu_runs has the figures)
    assert engine_probe.is_probe(first)
    for n in ("1", "2"):
        assert all(first[field][n] > 0 for field in PROBE_FIELDS)
    assert first == {**first, **engine_probe.engine_parts(first, job.model.num_layers)}
    assert first["cached"] is False
    # the same engine at another world size or depth reads it from the cache
    for again in (["world_size=4"], ["model.num_layers=8"]):
        read = engine_probe.cached_or_measured(_job([*TINY_ZERO3, *again]), "test-cpu")
        assert read["cached"] is True
        assert {f: read[f] for f in PROBE_FIELDS} == {f: first[f] for f in PROBE_FIELDS}
    # another prefetch bucket, optimizer or micro-batch shape: its own entry
    bucket = _job([*TINY_ZERO3, "+zero_optimization.stage3_prefetch_bucket_size=7"])
    assert engine_probe.cache_key(bucket, "test-cpu") != engine_probe.cache_key(job, "test-cpu")
    longer = _job([*TINY_ZERO3, "batch.seq_len=64"])
    assert engine_probe.cache_key(longer, "test-cpu") != engine_probe.cache_key(job, "test-cpu")
    foreach = job.replace(workload=dataclasses.replace(job.workload, optimizer_impl="foreach"))
    assert engine_probe.cache_key(foreach, "test-cpu") != engine_probe.cache_key(job, "test-cpu")


def _no_subprocess(*args, **kwargs):
    raise AssertionError(f"a subprocess was started: {args}")


def test_only_a_measured_zero3_job_on_a_gpu_is_probed(monkeypatch, tmp_path):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    by_efficiency = _job([*TINY_ZERO3, "hardware=h100_sxm"])
    assert prepare.with_engine_parts(by_efficiency) is by_efficiency
    for cpu_or_zero2 in (TINY_ZERO3, ["model=tiny", "strategy=zero2", "hardware=h100_sxm"]):
        job = _measured(_job(cpu_or_zero2))
        assert prepare.with_engine_parts(job) is job
    # a GPU ZeRO-3 job whose engine is cached reads it in-process, at its own depth
    gpu = _measured(_job([*TINY_ZERO3, "hardware=h100_sxm"]))
    key = engine_probe.cache_key(gpu, device_name("cuda"))
    cached = {field: {"1": 0.1, "2": 0.2} for field in PROBE_FIELDS}
    (tmp_path / engine_probe.CACHE_FILE).write_text(json.dumps({key: cached}))
    probed = prepare.with_engine_parts(gpu).measured
    at_depth = engine_probe.engine_parts(cached, gpu.model.num_layers)
    assert (probed.micro_batch_engine_host_s, probed.engine_step_s) == (
        at_depth["micro_batch_engine_host_s"],
        at_depth["engine_step_s"],
    )
    assert probed.engine_step_s == pytest.approx(0.1 + (gpu.model.num_layers - 1) * 0.1)


def test_a_failed_probe_keeps_the_step_parts_and_says_why_once(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prepare, "_ENGINE_FAILED", {})
    job = _measured(_job([*TINY_ZERO3, "hardware=h100_sxm"]))
    # a damaged cache entry is measured again, not read
    key = engine_probe.cache_key(job, device_name("cuda"))
    (tmp_path / engine_probe.CACHE_FILE).write_text(json.dumps({key: {"step_s": 1.0}}))
    failed = prepare.with_engine_parts(job, timeout_s=0.01)  # too short to import torch
    assert failed.hardware.time_source == "measured"
    assert failed.measured.micro_batch_gemm_s == job.measured.micro_batch_gemm_s
    assert failed.measured.micro_batch_engine_host_s is None
    assert failed.measured.time_calibration_error.startswith("engine probe: TimeoutExpired")
    assert "the engine probe failed" in capsys.readouterr().err
    # the next job of the same engine neither retries nor repeats it
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    again = prepare.with_engine_parts(job)
    assert again.measured.time_calibration_error == failed.measured.time_calibration_error
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_predict_adds_zero3s_hooks_to_every_micro_batch_and_its_step_beyond_the_kernels(device):
    llama = ["model=llama_1b", "batch=medium", "workload.dtype=bf16", "strategy=zero3"]
    hw = ["hardware=h100_sxm"] if device == "cuda" else []
    job = _measured(_job([*llama, *hw, "world_size=1"]))
    assert job.device == device
    bare = predict(job)
    probed = predict(_measured(job, micro_batch_engine_host_s=0.05, engine_step_s=0.4))
    m = job.batch.grad_accum_steps
    assert probed.time_s["compute"] == pytest.approx(bare.time_s["compute"] + m * 0.05)
    full_model_kernels = optimizer_step_s(bare.num_params, 4, True, 3000.0)
    assert probed.time_s["optimizer"] == pytest.approx(
        bare.time_s["optimizer"] + 0.4 - full_model_kernels
    )
    # a step the kernels alone explain adds nothing
    assert engine_step_host_s(full_model_kernels / 2, full_model_kernels) == 0.0
    assert engine_step_host_s(None, 1.0) == 0.0


def test_the_engine_parts_are_not_part_of_the_runs_signature():
    from distbench.tracking.signature import run_signature

    job = _measured(_job(TINY_ZERO3))
    probed = _measured(job, **{field: 0.25 for field in ENGINE_PARTS_FIELDS})
    assert run_signature(probed.tree()) == run_signature(job.tree())
    other_model = _measured(_job([*TINY_ZERO3, "model.num_layers=3"]))
    assert run_signature(other_model.tree()) != run_signature(job.tree())


def test_each_plan_row_predicts_with_its_own_engine_probe(monkeypatch, tmp_path):
    """`distbench plan --strategies dp,zero3` on a measured GPU: the rows share the hardware's
    figures, but zero3's row adds its engine's probe and dp's does not."""
    from distbench.probes import step_parts
    from distbench.probes.parts import STEP_PARTS_FIELDS
    from distbench.tools.plan import make_plan

    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    gpu = [*TINY_ZERO3, "hardware=h100_sxm", "hardware.time_source=measured"]
    job = _job(["model=tiny", "world_size=2", "hardware=h100_sxm"])
    name = device_name("cuda")
    shape = (job.batch.micro_batch_size, job.batch.seq_len)
    parts_key = step_parts.cache_key(name, job.dtype, job.model, *shape)
    parts = {field: 0.01 for field in STEP_PARTS_FIELDS}
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({parts_key: parts}))
    zero3 = resolve_job(compose_config(gpu), CONF_DIR)
    probe = {field: {"1": 0.1, "2": 0.2} for field in PROBE_FIELDS}
    probe["bare_forward_backward_s"] = {"1": 0.01, "2": 0.02}
    engine_key = engine_probe.cache_key(zero3, name)
    (tmp_path / engine_probe.CACHE_FILE).write_text(json.dumps({engine_key: probe}))
    assert prepare_job(_job(gpu)).measured.micro_batch_engine_host_s > 0

    plan = make_plan([arg for arg in gpu if arg != "strategy=zero3"], ["dp", "zero3"])
    by_strategy = {p.strategy: p for p in plan.predictions}
    for strategy in ("dp", "zero3"):
        alone = predict(prepare_job(_job([*gpu, f"strategy={strategy}"])))
        assert by_strategy[strategy].step_time_s == pytest.approx(alone.step_time_s)
    assert by_strategy["zero3"].time_s["compute"] > by_strategy["dp"].time_s["compute"]
