"""The gemm workload for real: each sharding on gloo ranks equals the float64 single-device
reference (the ranks compare and fail the job otherwise; the error is reported and checked
here), and the single-device mode reports what fits without allocating it. The jobs run under
the device audit (tests/distributed/test_device_audit.py): a tensor made without naming its
device fails them. The rows sharding's job is the one tests/e2e/test_raw_workloads.py runs
through run.py (assert_sharded_gemm checks it there).

    pytest tests/distributed/test_gemm.py -m distributed
"""

from __future__ import annotations

import json

import pytest

from distbench.orchestrator import run_job
from distbench.ranks.worker import DEVICE_AUDIT_ENV
from distbench.workloads.gemm import metrics as gm
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed

FAST = [
    "tracking=none",
    "workload=gemm",
    "workload.num_warmup_steps=1",
    "workload.num_steps=3",
    "gemm.m=384",
    "gemm.k=256",
    "gemm.n=128",
    "gemm.check_max_dim=96",
]


@pytest.fixture(autouse=True)
def device_audit(monkeypatch):
    monkeypatch.setenv(DEVICE_AUDIT_ENV, "1")


def run(tmp_path, overrides):
    outcome = run_job(compose_config([*FAST, *overrides]), tmp_path, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    return outcome["metrics"], json.loads((tmp_path / "result.json").read_text())


def assert_sharded_gemm(metrics: dict, result: dict, sharding: str, world_size: int) -> None:
    """What a sharded job of FAST's shape reports: its check against the float64 reference,
    its FLOP/s, its communication and its memory per rank."""
    # float32 against float64: a real comparison is never exactly 0, and stays at round-off
    assert 0 < metrics["max_rel_err"] < 1e-5
    assert result["check_shape"][gm.sharded_dim(sharding)] % world_size == 0
    assert metrics["gemm_flops"] == 2 * 384 * 256 * 128
    assert metrics["tflops_total"] == pytest.approx(
        2 * 384 * 256 * 128 / metrics["gemm_time_s_p50"] / 1e12
    )
    assert metrics["tflops_per_device"] == pytest.approx(metrics["tflops_total"] / world_size)
    assert metrics["comm_time_s_p50"] > 0 and metrics["compute_time_s_p50"] > 0
    assert 0 < metrics["comm_fraction"] < 1
    assert len(result["gemm_times_s"]) == 3 and len(result["ranks"]) == world_size
    want = gm.mem_per_rank_bytes(384, 256, 128, world_size, sharding, "fp32") / 2**30
    assert metrics["mem_per_rank_gib_sharded"] == pytest.approx(want)


# rows on 2 ranks: tests/e2e/test_raw_workloads.py's gemm run through run.py, the same job
@pytest.mark.parametrize(("sharding", "world_size"), [("cols", 2), ("k", 2)])
def test_sharded_gemm_equals_the_reference(tmp_path, sharding, world_size):
    metrics, result = run(tmp_path, [f"gemm.sharding={sharding}", f"world_size={world_size}"])
    assert_sharded_gemm(metrics, result, sharding, world_size)


def test_single_device_mode_reports_what_does_not_fit(tmp_path):
    """The lab's out-of-memory example in bf16: 65536^3 needs 3 x 8 GiB on one device; capped
    at 1 GiB it does not fit, nothing is allocated, and 8 k-sharded ranks would need
    A/8 + B/8 + C = 1 + 1 + 8 GiB each. The small bf16 check still runs, with bf16's error."""
    metrics, result = run(
        tmp_path,
        [
            "world_size=1",
            "gemm.mode=single",
            "gemm.sharding=k",
            "gemm.m=65536",
            "gemm.k=65536",
            "gemm.n=65536",
            "gemm.mem_cap_gib=1",
            "gemm.dtype=bf16",
        ],
    )
    assert metrics["fits_single_device"] == 0.0
    assert metrics["device_mem_gib"] == pytest.approx(1.0)
    assert metrics["max_square_n_fits"] == 13377  # isqrt(2**30 / (3 * 2))
    assert metrics["mem_single_gib"] == pytest.approx(24.0)
    assert metrics["mem_per_rank_gib_sharded"] == pytest.approx(10.0)
    assert "gemm_time_s_p50" not in metrics and result["gemm_times_s"] == []
    assert 1e-4 < metrics["max_rel_err"] < gm.MAX_REL_ERR["bf16"]  # bf16 rounding, not fp32
