"""benchmarks/plan_vs_published.py: its table of published measurements is well-formed and
covers what issue 26 asks for, each row composes as `distbench plan` would take it, and one
row goes through the planner (fast: nothing runs)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from distbench.job import resolve_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.unit


def _load_benchmark():
    path = PROJECT_DIR / "benchmarks" / "plan_vs_published.py"
    spec = importlib.util.spec_from_file_location("plan_vs_published", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


BENCH = _load_benchmark()


@pytest.fixture
def bench():
    return BENCH


def test_the_rows_are_well_formed_and_cover_the_issue(bench):
    rows = bench.ROWS
    names = [r.name for r in rows]
    assert len(names) == len(set(names)) >= 8
    hardware = {p.stem for p in (CONF_DIR / "hardware").glob("*.yaml")}
    strategies = {p.stem for p in (CONF_DIR / "strategy").glob("*.yaml")}
    for r in rows:
        assert r.source in bench.SOURCES and bench.SOURCES[r.source].url.startswith("https://")
        assert r.table and r.hardware in hardware and r.strategy in strategies
        assert r.world_size >= 1 and (r.mem_gib or r.tokens_per_s_per_gpu)
        assert all(v is None or v > 0 for v in (r.mem_gib, r.tokens_per_s_per_gpu))
        assert not r.mem_gib or r.mem_kind  # say what the published memory is
    independent = {r.source.split("_")[0] for r in rows}
    assert len(independent) >= 2
    assert any(bench._mode(r) == "full" for r in rows)
    assert any(r.world_size >= 64 for r in rows)
    assert any("strategy.tp=" in o or "strategy.pp=" in o for r in rows for o in r.overrides)
    assert {"a100_80gb", "h100_sxm"} <= {r.hardware for r in rows}
    assert sum(r.mem_gib is not None for r in rows) >= 2


# one row of each source (the last: Megatron's 64-stage pipeline, the gist's ZeRO-3, ...): each
# source's rows are written by the same helpers; the benchmark itself plans them all
ONE_PER_SOURCE = list({r.source: r for r in BENCH.ROWS}.values())


@pytest.mark.parametrize("row", ONE_PER_SOURCE, ids=[r.source for r in ONE_PER_SOURCE])
def test_a_row_of_each_source_resolves_as_run_py_would(row):
    cfg = compose_config([*BENCH.row_overrides(row), f"strategy={row.strategy}"])
    job = resolve_job(cfg, CONF_DIR)  # a refusal (a degree that does not divide) raises
    assert job.world_size == row.world_size and job.hardware.name == row.hardware
    assert job.activation_checkpointing == BENCH._mode(row)


def test_megatrons_tflops_become_tokens_per_s_by_its_own_count(bench):
    # 1T row: 163 TFLOP/s per GPU, l=128, h=25600, s=2048, V=51200 (eq. 3 per token)
    per_token = 96 * 128 * 25600**2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
    got = bench.megatron_tokens_per_s(163, 128, 25600, 2048, 51200)
    assert got == pytest.approx(163e12 / per_token) and 19 < got < 21


def test_one_row_through_the_planner(bench):
    row = next(r for r in bench.ROWS if r.name == "llama3.1-8b fsdp8")
    out = bench.predict_row(row)
    assert out["layout"] == "dp8×tp1×pp1" and out["activation_checkpointing"] == "selective"
    assert out["pred_mem_gib"] > 0 and out["pred_tokens_per_s_per_gpu"] > 0
    assert out["mem_err_pct"] == pytest.approx((out["pred_mem_gib"] - 82.4) / 82.4 * 100) and out[
        "mem_ok"
    ] == (abs(out["mem_err_pct"]) <= 20)
    fit = bench.fit_rows(bench.ROWS)
    stats = bench.summary([{**out, "role": bench.role(row, fit)}])
    assert stats["rows"] == 1 and stats["fit_tput_within_30pct"] == f"{int(out['tput_ok'])} of 1"
    assert stats["heldout_tput_within_30pct"] == "0 of 0"  # this row is a fit row


def test_the_catalogs_train_efficiency_is_fitted_on_half_the_rows_and_judged_on_the_rest(bench):
    fit = bench.fit_rows(bench.ROWS)
    assert set(fit) == {"a100_80gb", "h100_sxm"}
    for hardware, rows in fit.items():
        judged = [r for r in bench.ROWS if r.hardware == hardware and bench.role(r, fit)]
        held = [r for r in judged if bench.role(r, fit) == bench.HELD]
        assert len(rows) + len(held) == len(judged) and 0 <= len(rows) - len(held) <= 1
        assert not set(r.name for r in rows) & set(r.name for r in held)
    # what conf/hardware holds is what the fit gives: nobody typed a constant in
    fitted = bench.fit_efficiency(bench.ROWS)
    assert fitted == {hw: bench.catalog_efficiency(hw) for hw in fit}
