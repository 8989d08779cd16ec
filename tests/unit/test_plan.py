"""`distbench plan`'s logic: every strategy composed, validated and predicted; refusals kept."""

from __future__ import annotations

import json

import pytest

from distbench.tools.plan import make_plan, plan_json, plan_table, project_dir, strategy_options
from tests.conftest import CONF_DIR, PROJECT_DIR

pytestmark = pytest.mark.unit

KEYS = {
    "strategy",
    "world_size",
    "num_params",
    "mem_bytes",
    "fits",
    "comm_bytes_per_step",
    "step_time_s",
    "tokens_per_s",
    "cost_usd_per_1m_tokens",
    "recommended",
}


def test_project_dir_is_the_checkout_with_conf():
    assert project_dir() == PROJECT_DIR
    assert strategy_options(CONF_DIR)[:3] == ["dp", "zero1", "zero2"]


def test_every_strategy_predicted_for_llama3_8b_on_8_h100():
    plan = make_plan(["model=llama3_8b", "world_size=8", "hardware=h100_sxm"])
    # `single` is the one-device baseline: refused at world_size 8, with its reason
    assert sorted(p.strategy for p in plan.predictions) == sorted(
        set(strategy_options(CONF_DIR)) - {"single"}
    )
    assert set(plan.refused) == {"single"} and "world_size" in plan.refused["single"]
    rows = plan_json(plan)
    json.dumps(rows)  # plain JSON
    *predictions, final = rows
    for row in predictions:
        assert set(row) >= KEYS, row["strategy"]
        assert set(row["mem_bytes"]) >= {"params", "grads", "optimizer", "activations", "total"}
        assert row["world_size"] == 8
    assert final["recommendation"] == plan.recommendation
    assert [r["strategy"] for r in predictions if r["recommended"]] == [plan.recommendation]
    dp = next(r for r in predictions if r["strategy"] == "dp")
    assert dp["fits"] is False  # fp32: 16 bytes × 8B params
    assert "dp does not fit" in final["reason"]
    assert plan_table(plan).row_count == len(predictions)


def test_refused_strategies_are_listed_with_their_reason():
    plan = make_plan(["world_size=3", "hardware=cpu"], ["dp", "tp", "pp"])
    assert [p.strategy for p in plan.predictions] == ["dp"]
    assert "world_size(3) is not divisible by tp(2)" in plan.refused["tp"]
    assert "pp" in plan.refused
    assert plan_json(plan)[-1]["refused"] == plan.refused


def test_strategy_override_picks_the_strategies_and_auto_works_on_this_host():
    plan = make_plan(["strategy=dp,zero3", "hardware=auto"])
    assert [p.strategy for p in plan.predictions] == ["dp", "zero3"]
    if plan.hardware["device"] == "cpu":  # no GPU here: the CPU estimate and host memory
        assert plan.hardware["peak_tflops_fp32"] > 0 and plan.hardware["mem_gib"] > 0
        assert all(p.fits and p.step_time_s > 0 for p in plan.predictions)
    assert plan.recommendation == "dp"  # the tiny model fits: least communication wins


def test_a_workload_without_a_model_is_refused_not_predicted():
    plan = make_plan(["workload=gemm", "hardware=cpu"], ["dp"])
    assert plan.predictions == [] and plan.recommendation is None
    assert "workload=gemm builds no model" in plan.refused["dp"]


def test_the_plan_predicts_the_resolved_job_on_the_plans_hardware():
    plan = make_plan(["hardware=cpu", "world_size=2"], ["ddp", "fsdp", "zero2"])
    layouts = {p.strategy: p.layout for p in plan.predictions}
    # the torch engine has no ZeRO stage; the plan shows how sharded it is (fsdp like ZeRO-3)
    assert {s: layout.zero_stage for s, layout in layouts.items()} == {
        "ddp": 0,
        "fsdp": 3,
        "zero2": 2,
    }
    assert plan.hardware["name"] == "cpu" and plan.hardware["mem_gib"] > 0
    assert "detected" not in plan.hardware  # a resolution note appears only when set


def test_groups_that_span_nodes_use_the_internode_link():
    from distbench.figures.communication import group_spans_nodes
    from distbench.figures.predict import predict
    from distbench.job import Layout, resolve_job
    from tests.conftest import compose_config

    layout = Layout(world_size=64, dp=8, tp=4, pp=2, zero_stage=1)
    # ranks arange(64).view(8, 2, 4): tp and pp stay in a node of 8, dp crosses nodes
    assert [group_spans_nodes(g, layout, 8) for g in ("tp", "pp", "dp")] == [False, False, True]
    base = ["model=llama3_70b", "hardware=h100_sxm", "workload.dtype=bf16", "strategy=zero3"]
    one_node = predict(resolve_job(compose_config([*base, "world_size=8"]), CONF_DIR))
    eight = predict(resolve_job(compose_config([*base, "world_size=64"]), CONF_DIR))
    assert one_node.assumptions["link_gbytes_per_s"]["dp"] == 900.0
    assert eight.assumptions["num_nodes"] == 8 and eight.assumptions["ranks_per_node"] == 8
    # 400 Gb/s NDR per GPU: a ring's channels cross all 8 NICs of a node (8 × 50 GB/s)
    assert eight.assumptions["link_gbytes_per_s"]["dp"] == 400.0
    # the data-parallel bytes now cross InfiniBand: communication is no longer NVLink-cheap
    assert eight.time_s["comm"] > 2 * eight.comm_bytes["dp"] / 900e9


def test_a_large_model_with_the_cpu_batch_is_warned_about():
    gpu = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm", "workload.dtype=bf16"]
    plan = make_plan(gpu, ["zero3"])  # bf16: no dtype warning (tests/unit/test_fair_plan.py)
    (warning,) = plan.extra["warnings"]
    assert "batch=small" in warning and "8.0B parameters" in warning
    assert plan_json(plan)[-1]["warnings"] == [warning]
    chosen = make_plan([*gpu, "batch=medium"])
    assert chosen.extra["warnings"] == []
    assert make_plan(["hardware=cpu"], ["dp"]).extra["warnings"] == []  # tiny: no warning


def test_search_ranks_every_layout_that_fits_and_says_why_the_rest_do_not():
    from distbench.tools.plan import search_json, search_layouts

    overrides = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm", "workload.dtype=bf16"]
    found = search_layouts([*overrides, "batch=medium"], micro_batches=(1, 4))
    speeds = [p.tokens_per_s for _, p in found.ranked]
    assert speeds and speeds == sorted(speeds, reverse=True)
    assert all(p.fits for _, p in found.ranked)
    tried = {(p.layout.tp, p.layout.pp) for _, p in found.ranked}
    assert any(tp >= 4 or pp >= 4 for tp, pp in tried)  # not only the strategy files' degrees
    reasons = set(found.refused.values())
    assert any("not supported by the deepspeed engine" in r for r in reasons)
    assert any(r.startswith("does not fit:") for r in reasons)
    doc = json.loads(json.dumps(search_json(found)))
    assert len(doc["ranked"]) == len(found.ranked) and doc["refused"] == found.refused


def test_the_efficiency_model_takes_the_hardwares_train_efficiency_unless_overridden():
    def predicted(hardware: str, efficiency: float | None = None):
        plan = make_plan([f"hardware={hardware}", "model=llama_1b"], ["dp"], efficiency=efficiency)
        return plan.predictions[0], plan.extra["sources"]["compute"]

    a100, source = predicted("a100_80gb")
    assert a100.assumptions["efficiency"] == 0.626
    assert source.startswith("hardware.train_efficiency (0.626) × the catalog peak")
    assert predicted("h100_sxm")[0].assumptions["efficiency"] == 0.467
    h200, source = predicted("h200")  # no catalog figure: the GPU default
    assert h200.assumptions["efficiency"] == 0.4 and source.startswith("DEFAULT_EFFICIENCY")
    slower, source = predicted("a100_80gb", efficiency=0.4)
    assert slower.assumptions["efficiency"] == 0.4 and source.startswith("--efficiency")
    assert slower.time_s["compute"] == pytest.approx(a100.time_s["compute"] * 0.626 / 0.4)
