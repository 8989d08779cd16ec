"""`make gpu-check` (benchmarks/gpu_check.py) runs here on CPU ranks with --device cpu: the same
grid, the same summary; and --device cuda without a GPU stops in one line.

    python -m pytest tests/e2e/test_gpu_check.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distbench.probes.detect import gpu_names
from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.e2e
SCRIPT = PROJECT_DIR / "benchmarks" / "gpu_check.py"


def gpu_check(*args: str, timeout_s: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout_s
    )


def test_the_gpu_check_grid_runs_on_cpu_ranks_and_writes_its_summary(tmp_path):
    args = ["--device", "cpu", "--no-bare", "--world-sizes", "2", "--out-dir", str(tmp_path)]
    listed = gpu_check(*args, "--list", timeout_s=120)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.split() == [
        "train-ddp-ws2",
        "train-fsdp-ws2",
        "train-dp-ws2",
        "train-zero3-ws2",
        "inference-dp-ws2",
        "gemm-ws2",
        "collectives-ws2",
    ]
    typo = gpu_check(*args, "--only", "train-zero4-ws2", timeout_s=120)
    assert typo.returncode == 1 and "train-zero4-ws2: not in the grid" in typo.stderr
    # Every engine and workload runs in other e2e tests: here two rows of the grid, one each
    # of a training engine and of a raw workload, through the script's summary (the torch
    # engine's row: DeepSpeed ZeRO-3's measured time source adds its engine probe, whose real
    # run is tests/unit/test_engine_probe.py's).
    args += ["--num-steps", "2", "--num-warmup-steps", "1", "--only", "train-ddp-ws2,gemm-ws2"]
    proc = gpu_check(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "gpu_check.json").exists()  # a rerun of rows keeps the full summary
    summary = json.loads((tmp_path / "gpu_check_only.json").read_text())
    assert [job["name"] for job in summary["jobs"]] == ["train-ddp-ws2", "gemm-ws2"]
    assert summary["num_finished"] == summary["num_jobs"] == 2
    for job in summary["jobs"]:
        assert job["metrics"]["host_peak_rss_gib"] > 0, job["name"]
        if job["name"].startswith("train"):
            assert job["precision"] == "fp32" and job["optimizer_impl"] == "fused"
            assert job["metrics"]["init_time_s"] > 0
            assert job["metrics"]["pred_peak_mem_gib"] > 0  # predicted beside measured
    table = (tmp_path / "gpu_check_only.md").read_text()
    assert "| train-ddp-ws2 | FINISHED |" in table and "2 of 2 jobs finished" in table


@pytest.mark.skipif(bool(gpu_names()), reason="a GPU is visible: the cuda check would run")
def test_the_cuda_check_without_a_gpu_stops_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "gpu_check: no CUDA device visible (nvidia-smi lists none); --device cpu runs the same "
        "grid on CPU ranks"
    ]
