"""Both engines on one grid through run.py: every strategy lands FINISHED in MLflow and computes
the single-device model (equivalent=true), and a 2D layout on 4 ranks records its rank grid.

    pytest tests/e2e/test_engines_sweep.py
"""

from __future__ import annotations

import pytest

from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e

STRATEGIES = ["ddp", "fsdp", "torch_tp", "torch_pp", "dp", "zero3", "tp", "pp"]


def test_torch_and_deepspeed_strategies_all_equal_the_single_device(tmp_path):
    grid = run_py(
        [
            "-m",
            f"strategy={','.join(STRATEGIES)}",
            "world_size=2",
            *FEW_STEPS,
            f"hydra.sweep.dir={tmp_path}/grid",
        ],
        tmp_path,
    )
    assert grid.returncode == 0, grid.stderr[-3000:]
    single = run_py(
        ["strategy=single", "world_size=1", *FEW_STEPS, f"hydra.run.dir={tmp_path}/single"],
        tmp_path,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    two_d = run_py(
        ["strategy=torch_tp", "world_size=4", *FEW_STEPS, f"hydra.run.dir={tmp_path}/two_d"],
        tmp_path,
    )
    assert two_d.returncode == 0, two_d.stderr[-3000:]
    runs = runs_of(tmp_path)
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert sorted(children["tags.strategy"]) == sorted(STRATEGIES)
    assert (children["status"] == "FINISHED").all()
    assert (children["tags.equivalent"] == "true").all(), children[
        ["tags.strategy", "metrics.loss_rel_err_vs_single"]
    ]
    engines = dict(zip(children["tags.strategy"], children["tags.engine"], strict=True))
    assert engines["fsdp"] == "torch" and engines["zero3"] == "deepspeed"
    assert set(children[children["tags.engine"] == "torch"]["tags.zero_stage"]) == {"none"}
    solo = runs[runs["tags.strategy"] == "single"].iloc[0]
    assert solo["status"] == "FINISHED" and solo["tags.equivalent"] == "true"
    grid_4 = runs[(runs["tags.strategy"] == "torch_tp") & (runs["tags.world_size"] == "4")]
    assert grid_4.iloc[0]["tags.layout_tag"] == "dp2-pp1-tp2"
    assert grid_4.iloc[0]["tags.equivalent"] == "true"
