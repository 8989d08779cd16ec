"""The batch-size scan: a sweep over micro batches under a per-rank memory cap records the batch
that does not fit as FAILED oom (naming the batch) while the smaller one finishes, and the
sweep's end names the largest that fits (the rule over several finished batches:
tests/unit/test_batch_scan_answer.py).

    pytest tests/e2e/test_batch_scan.py
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_batch_scan_finds_the_largest_batch_that_fits(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_py(
        [
            "-m",
            # batch=small's other keys: the finished job's single-device reference loss is the
            # one the session's earlier jobs of that shape cached (not computed again, ~10 s)
            "batch.micro_batch_size=2,64",
            "world_size=2",
            "limits.max_mem_gib=1.25",
            "workload.num_warmup_steps=1",
            "workload.num_steps=1",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = [json.loads((sweep_dir / str(i) / "outcome.json").read_text()) for i in range(2)]
    assert [o["status"] for o in outcomes] == ["FINISHED", "FAILED"]
    assert outcomes[1]["failure_kind"] == "oom"
    assert outcomes[1]["failure_reason"].endswith("(batch.micro_batch_size=64)")
    assert "largest batch.micro_batch_size that fits: 2 (dp, world_size 2)" in proc.stdout
    children = runs_of(tmp_path).dropna(subset=["tags.mlflow.parentRunId"])
    assert sorted(children["status"]) == ["FAILED", "FINISHED"]
