"""Both engines on one grid through run.py: every strategy lands FINISHED in MLflow and computes
the single-device model (equivalent=true), and a 2D layout on 4 ranks records its rank grid.

    pytest tests/e2e/test_engines_sweep.py
"""

from __future__ import annotations

import pytest

from tests.e2e.test_sweep import FEW_STEPS, run_py, runs_of

pytestmark = pytest.mark.e2e

# The command: `single` in a world_size=2 sweep runs on one rank (the baseline row).
STRATEGIES = ["single", "ddp", "fsdp", "torch_tp", "torch_pp", "dp", "zero3", "tp", "pp"]


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
    layouts = run_py(
        [
            "-m",
            "strategy=torch_tp,3d",
            "world_size=4",
            *FEW_STEPS,
            f"hydra.sweep.dir={tmp_path}/layouts",
        ],
        tmp_path,
    )
    assert layouts.returncode == 0, layouts.stderr[-3000:]
    runs = runs_of(tmp_path)
    children = runs[runs["tags.world_size"].isin(["1", "2"])]
    assert sorted(children["tags.strategy"]) == sorted(STRATEGIES)
    assert (children["status"] == "FINISHED").all()
    assert (children["tags.equivalent"] == "true").all(), children[
        ["tags.strategy", "metrics.loss_rel_err_vs_single"]
    ]
    engines = dict(zip(children["tags.strategy"], children["tags.engine"], strict=True))
    assert engines["fsdp"] == "torch" and engines["zero3"] == "deepspeed"
    assert set(children[children["tags.engine"] == "torch"]["tags.zero_stage"]) == {"none"}
    solo = runs[runs["tags.strategy"] == "single"].iloc[0]
    assert solo["tags.world_size"] == "1" and solo["tags.world_size_requested"] == "2"
    assert solo["tags.layout_tag"] == "dp1-pp1-tp1"
    on_four = runs[runs["tags.world_size"] == "4"].set_index("tags.strategy")
    assert (on_four["status"] == "FINISHED").all()
    assert on_four.loc["torch_tp", "tags.layout_tag"] == "dp2-pp1-tp2"
    assert on_four.loc["3d", "tags.layout_tag"] == "dp1-pp2-tp2"  # TP inside each PP stage
    assert (on_four["tags.equivalent"] == "true").all()
