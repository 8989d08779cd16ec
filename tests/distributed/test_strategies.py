"""Each DeepSpeed strategy runs for real: 2 gloo ranks on CPU, through torchrun and the worker.

All strategies with the same data-parallel degree see the same global batch and start from the
same weights, so their first-step losses must agree (fp32): a strategy that computes something
else than the model fails here. The jobs are the session's shared sweeps
(tests/e2e/shared_sweeps.py: dp, tp and zero3 in the README's, the others in the grid), read
from their job dirs. zero1 and zero2 train in sweeps other tests run anyway, where their
first-step loss is checked against the single device (equivalent=true): zero1 in
tests/e2e/test_hydra_conventions_sweeper.py, zero2 in tests/e2e/test_optuna_search.py.

    pytest tests/distributed -m distributed
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.distributed

README = ["dp", "tp", "zero3"]
GRID = ["zero2_offload", "zero3_offload", "pp"]
METRICS = (
    "step_time_s_p50",
    "throughput_tokens_per_s",
    "tflops_per_device",
    "mfu_pct",
    "peak_mem_gib",
    "peak_mem_gib_rank0",
    "peak_mem_gib_rank1",
    "cost_usd_per_1m_tokens",
    "init_time_s",
    "host_peak_rss_gib",
)


@pytest.fixture(scope="module")
def jobs(readme_sweep, grid_sweep) -> dict[str, tuple[dict, dict]]:
    """(outcome, result) of each DeepSpeed strategy's 2-rank job, and of `single` (1 rank)."""
    found = {s: (readme_sweep.outcome(s), readme_sweep.result(s)) for s in README}
    found |= {s: (grid_sweep.outcome(s), grid_sweep.result(s)) for s in GRID}
    found["single"] = (grid_sweep.outcome("single", 1), grid_sweep.result("single", 1))
    return found


@pytest.mark.parametrize("strategy", README + GRID)
def test_strategy_trains_on_two_gloo_ranks(jobs, strategy):
    outcome, result = jobs[strategy]
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    assert result["backend"] == "gloo" and result["device"] == "cpu"
    assert len(result["ranks"]) == 2 and len(result["step_times_s"]) == 3
    assert all(math.isfinite(x) and x > 0 for x in result["losses"])
    # a random-token batch: the first loss is near ln(vocab) = ln(8192) = 9.01
    assert abs(result["losses"][0] - math.log(8192)) < 0.2
    for name in METRICS:
        assert outcome["metrics"][name] > 0, name
    layout = result["layout"]
    assert layout["dp"] * layout["tp"] * layout["pp"] == 2
    # dp=2 for data-parallel strategies (the same first loss as dp's); tp and pp use both
    # ranks for one replica (below)
    if layout["dp"] == 2:
        assert result["losses"][0] == pytest.approx(jobs["dp"][1]["losses"][0], rel=1e-5)


def test_tp_and_pp_first_loss_equals_the_single_device(jobs):
    """tp=2 and pp=2 hold one replica on 2 ranks: the global batch of `single` on one rank
    (the same micro-batch), so equal first losses."""
    single = jobs["single"][1]
    for strategy in ("tp", "pp"):
        assert jobs[strategy][1]["layout"]["dp"] == 1
        assert jobs[strategy][1]["losses"][0] == pytest.approx(single["losses"][0], rel=1e-5)
