"""The GPU path: nccl ranks, CUDA memory and catalog peaks. Skipped with a reason without GPUs.

pytest tests/gpu -m gpu       # on a machine with >= 2 CUDA devices
"""

from __future__ import annotations

import json

import pytest

from distbench.orchestrator import run_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config, requires_gpus

pytestmark = [pytest.mark.gpu, requires_gpus(2)]


@pytest.mark.parametrize("strategy", ["dp", "zero3", "tp"])
def test_strategy_runs_on_two_gpus_with_nccl(tmp_path, strategy):
    cfg = compose_config(
        [
            f"strategy={strategy}",
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
