"""Both engines through run.py: every training strategy lands FINISHED in MLflow and computes the
single-device model (equivalent=true), and a 2D layout on 4 ranks records its rank grid.

The strategies ran in the session's shared sweeps (tests/e2e/shared_sweeps.py): the README's
(dp, tp, zero3 at 2 and 4 ranks) and the grid of every other strategy at world_size=2, where
`single` runs on one rank (the baseline row).

    pytest tests/e2e/test_engines_sweep.py
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.e2e.shared_sweeps import GRID_STRATEGIES
from tests.e2e.test_sweep import runs_in

pytestmark = pytest.mark.e2e

STRATEGIES = sorted([*GRID_STRATEGIES, "dp", "tp", "zero3"])


@pytest.fixture(scope="module")
def runs(readme_sweep, grid_sweep) -> pd.DataFrame:
    """The child runs of both sweeps, as MLflow's pandas frame."""
    frames = [runs_in(s.tracking_uri) for s in (readme_sweep, grid_sweep)]
    both = pd.concat(frames, ignore_index=True)
    return both[both["tags.mlflow.parentRunId"].notna()]


def test_torch_and_deepspeed_strategies_all_equal_the_single_device(runs):
    children = runs[runs["tags.world_size"].isin(["1", "2"])]
    assert sorted(children["tags.strategy"]) == STRATEGIES
    assert (children["status"] == "FINISHED").all(), children[["tags.strategy", "status"]]
    assert (children["tags.equivalent"] == "true").all(), children[
        ["tags.strategy", "metrics.loss_rel_err_vs_single"]
    ]
    engines = dict(zip(children["tags.strategy"], children["tags.engine"], strict=True))
    assert engines["fsdp"] == "torch" and engines["zero3"] == "deepspeed"
    assert set(children[children["tags.engine"] == "torch"]["tags.zero_stage"]) == {"none"}
    solo = runs[runs["tags.strategy"] == "single"].iloc[0]
    assert solo["tags.world_size"] == "1" and solo["tags.world_size_requested"] == "2"
    assert solo["tags.layout_tag"] == "dp1-pp1-tp1"


def test_a_2d_layout_on_four_ranks_records_its_rank_grid(runs):
    on_four = runs[runs["tags.world_size"] == "4"].set_index("tags.strategy")
    assert (on_four["status"] == "FINISHED").all()
    assert on_four.loc["tp", "tags.layout_tag"] == "dp2-pp1-tp2"  # AutoTP inside each replica
    assert on_four.loc["dp", "tags.layout_tag"] == "dp4-pp1-tp1"
    assert (on_four["tags.equivalent"] == "true").all()
    # the torch engine's 2D and 3D grids (torch_tp x FSDP on 4 ranks, 3d on 8): the rank
    # coordinates in tests/distributed/test_torch_engine.py
