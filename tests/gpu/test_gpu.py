"""The GPU path: nccl ranks, CUDA memory and catalog peaks. Skipped with a reason without GPUs.

pytest tests/gpu -m gpu       # one GPU runs the world-size-1 tests; two run them all
"""

from __future__ import annotations

import json

import pytest

from distbench.job import Job, resolve_job
from distbench.orchestrator import run_job
from distbench.prepare import prepare_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config, requires_gpus

pytestmark = [pytest.mark.gpu]
ONE_GPU = ["world_size=1", "tracking=none", "workload.num_warmup_steps=1", "workload.num_steps=3"]


@requires_gpus(1)
@pytest.mark.parametrize(
    "overrides",
    [
        ["strategy=single", "workload.dtype=bf16"],
        ["strategy=fsdp", "workload.dtype=bf16"],
        ["strategy=dp", "workload.dtype=bf16"],
        ["strategy=zero3", "workload.dtype=bf16"],
        ["strategy=zero3", "workload.dtype=bf16", "workload.profile_steps=1"],
        ["workload=inference", "strategy=dp", "workload.dtype=bf16", "inference.cuda_graph=false"],
        ["workload=inference", "strategy=dp", "workload.dtype=bf16", "inference.cuda_graph=true"],
        ["workload=gemm", "gemm.dtype=bf16"],  # crashed on the first H100 run (a host tensor)
        ["workload=collectives"],
        ["strategy=single", "workload.dtype=bf16", "activation_checkpointing=full"],
        ["strategy=fsdp", "workload.dtype=bf16", "activation_checkpointing=selective"],
        ["strategy=zero3", "workload.dtype=bf16", "activation_checkpointing=full"],
        ["strategy=single", "workload.dtype=bf16", "workload.compile=true"],
    ],
    ids=[
        "single",
        "fsdp",
        "dp",
        "zero3",
        "zero3-profiled",
        "inference",
        "inference-cuda-graph",
        "gemm",
        "collectives",
        "single-ac-full",
        "fsdp-ac-selective",
        "zero3-ac-full",
        "single-compile",
    ],
)
def test_every_workload_runs_on_one_gpu(tmp_path, overrides):
    outcome = run_job(compose_config([*ONE_GPU, *overrides]), tmp_path, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["backend"] == "nccl" and result["device"] == "cuda"
    metrics = outcome["metrics"]
    # built on the device: no host-side copy of the model (the tiny model is ~30 MB)
    assert metrics["host_peak_rss_gib"] < 8
    if outcome["workload"] == "train":
        assert outcome["precision"] == "bf16-mixed" and outcome["optimizer_impl"] == "fused"
        assert outcome["equivalent"] == "true"
        assert metrics["init_time_s"] < 120
    for override in overrides:
        if override.startswith("activation_checkpointing="):
            assert outcome["activation_checkpointing"] == override.split("=")[1]
    if "workload.compile=true" in overrides:
        # compile_time_s is clamped at 0; what compiled is told by the compile counts
        assert metrics["compile_time_s"] >= 0 and metrics["compiled_timed_steps"] == 0
    if "inference.cuda_graph=true" in overrides:
        assert outcome["decode"] == "cuda_graph"
    if "workload.profile_steps=1" in overrides:
        profile = (tmp_path / "profile.rank0.txt").read_text()
        assert "## by device time" in profile and "## by host time" in profile
        assert 0 < metrics["profile_device_busy_frac"] <= 1


@requires_gpus(2)
@pytest.mark.parametrize(
    "strategy",
    ["dp", "zero3", "tp", "torch_tp", "torch_tp strategy.sequence_parallel=true"],
    ids=["dp", "zero3", "tp", "torch_tp", "torch_tp-sp"],
)
def test_strategy_runs_on_two_gpus_with_nccl(tmp_path, strategy):
    """torch_tp: the vocab-parallel head's logits and the sequence-parallel residual stream are
    DTensors on the GPUs, the loss read under loss_parallel over nccl."""
    name, *extra = strategy.split()
    cfg = compose_config(
        [
            f"strategy={name}",
            *extra,
            "world_size=2",
            "tracking=none",
            "workload.dtype=bf16",
            "workload.num_steps=10",
        ]
    )
    outcome = run_job(cfg, tmp_path, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["backend"] == "nccl" and result["device"] == "cuda"
    # CUDA max_memory_allocated: at least the bf16 weights of the tiny model, far below a GPU
    assert 0.001 < outcome["metrics"]["peak_mem_gib"] < 80
    resolved = (tmp_path / "resolved.yaml").read_text()
    assert "device: cuda" in resolved


@requires_gpus(1)
def test_the_step_parts_are_measured_on_the_gpu(tmp_path, monkeypatch):
    """`hardware.time_source=measured` on this machine's GPU measures the step parts: GEMMs timed
    on the device, a kernel floor from CUDA events, and the run's own prediction built from
    them. The next job of that shape under the default `auto` reads them from the cache (a run
    never probes under `auto`: an H200 run of 2026-11-27 showed the old form of this test
    expecting it to)."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DISTBENCH_TIME_SOURCE")  # the suite's pin (tests/conftest.py)
    overrides = [*ONE_GPU, "strategy=single", "workload.dtype=bf16"]
    asked = compose_config([*overrides, "hardware.time_source=measured"])
    (tmp_path / "job").mkdir()
    outcome = run_job(asked, tmp_path / "job", CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    resolved = (tmp_path / "job" / "resolved.yaml").read_text()
    assert "time_source: measured" in resolved and "time_calibration_error: null" in resolved
    measured = Job.load(tmp_path / "job").measured
    assert 0 < measured.kernel_floor_us < 50 and measured.micro_batch_gemm_s > 0
    assert measured.measured_mem_bandwidth_gbps > 100  # HBM, not a host copy
    assert outcome["metrics"]["pred_step_time_s"] > 0

    under_auto = resolve_job(compose_config(overrides), CONF_DIR)
    cached = prepare_job(under_auto, probe_when_auto=False)
    assert cached.hardware.time_source == "measured"
    assert cached.measured.micro_batch_gemm_s == measured.micro_batch_gemm_s


@requires_gpus(1)
def test_zero3s_engine_is_probed_on_the_gpu(tmp_path, monkeypatch):
    """A measured ZeRO-3 job on CUDA probes its engine's hooks (workloads/train/engine_probe.py) and
    predicts with them (benchmarks/gpu_runs/2026-11-26_job_shape_probe: 0.11-0.32 s per
    micro-batch for gpt2_124m and llama_1b on an H200 and an H100)."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path / "cache"))
    overrides = ["strategy=zero3", "workload.dtype=bf16", "hardware.time_source=measured"]
    outcome = run_job(compose_config([*ONE_GPU, *overrides]), tmp_path, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    measured = Job.load(tmp_path).measured
    assert measured.time_calibration_error is None
    # clamped at 0 where noise makes a layer look free, but never missing
    assert measured.micro_batch_engine_host_s >= 0 and measured.engine_step_s >= 0
    assert outcome["metrics"]["pred_step_time_s"] > 0
