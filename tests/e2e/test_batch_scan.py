"""The batch-size scan: a sweep over micro batches under a per-rank memory cap records the batch
that does not fit as FAILED oom (naming the batch) while the smaller ones finish.

    pytest tests/e2e/test_batch_scan.py
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e


def test_batch_scan_finds_the_largest_batch_that_fits(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_py(
        [
            "-m",
            "batch.micro_batch_size=1,2,64",
            "batch.grad_accum_steps=1",
            "world_size=2",
            "limits.max_mem_gib=1.25",
            "workload.num_warmup_steps=1",
            "workload.num_steps=1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = [json.loads((sweep_dir / str(i) / "outcome.json").read_text()) for i in range(3)]
    assert [o["status"] for o in outcomes] == ["FINISHED", "FINISHED", "FAILED"]
    assert outcomes[2]["failure_kind"] == "oom"
    assert outcomes[2]["failure_reason"].endswith("(batch.micro_batch_size=64)")
    assert "largest batch.micro_batch_size that fits: 2 (dp, world_size 2)" in proc.stdout
    children = runs_of(tmp_path).dropna(subset=["tags.mlflow.parentRunId"])
    assert sorted(children["status"]) == ["FAILED", "FINISHED", "FINISHED"]
