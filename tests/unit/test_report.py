"""The report's pure functions on a hand-made table of runs: pivots, the grid table and its run
links, best per metric, the Pareto front, scaling efficiency, missing metrics (failed runs, other
workloads) and the documents (report.html self-contained, rendered from its packaged template)."""

from __future__ import annotations

import base64
import math
import re
from importlib import resources

import numpy as np
import pandas as pd
import pytest

from distbench.tools import report

pytestmark = pytest.mark.unit

NAN = float("nan")


def runs() -> pd.DataFrame:
    """dp and zero3 at 1, 2 and 4 ranks, one failed tp run, one gemm run without train metrics."""
    rows = [
        # name, strategy, ws, zero, status, step p50, tokens/s, peak mem, cost
        ("dp-ws1-z0", "dp", 1, "0", "FINISHED", 1.0, 1000.0, 2.0, 0.10),
        ("dp-ws2-z0", "dp", 2, "0", "FINISHED", 1.0, 1800.0, 2.0, 0.11),
        ("dp-ws4-z0", "dp", 4, "0", "FINISHED", 1.0, 3000.0, 2.1, 0.13),
        ("zero3-ws2-z3", "zero3", 2, "3", "FINISHED", 1.5, 1200.0, 1.0, 0.16),
        ("zero3-ws4-z3", "zero3", 4, "3", "FINISHED", 1.5, 2000.0, 0.6, 0.20),
        ("tp-ws3-z0", "tp", 3, "0", "FAILED", NAN, NAN, NAN, NAN),
    ]
    df = pd.DataFrame(
        rows,
        columns=[
            "run_name",
            "strategy",
            "world_size",
            "zero_stage",
            "status",
            "step_time_s_p50",
            "throughput_tokens_per_s",
            "peak_mem_gib",
            "cost_usd_per_1m_tokens",
        ],
    )
    df["run_id"] = [f"id{i}" for i in range(len(df))]
    df["tflops_per_device"] = df["throughput_tokens_per_s"] / df["world_size"] * 1e-3
    df["peak_mem_gib_rank0"] = df["peak_mem_gib"]
    df["peak_mem_gib_rank1"] = df["peak_mem_gib"] * 0.9
    df["pred_peak_mem_gib"] = df["peak_mem_gib"] * 1.5
    df["pred_step_time_s"] = df["step_time_s_p50"] * 0.5
    df["failure_kind"] = [None] * 5 + ["invalid_config"]
    df["failure_reason"] = [None] * 5 + ["world_size(3) is not divisible by tp(2) * pp(1)"]
    gemm = {"run_name": "dp-ws2-z0-gemm", "strategy": "dp", "world_size": 2, "zero_stage": "0"}
    gemm.update(status="FINISHED", workload="gemm", run_id="idg", gemm_time_s_p50=0.01)
    return pd.concat([df, pd.DataFrame([gemm])], ignore_index=True)


def test_pivot_is_strategy_by_world_size_over_finished_runs():
    table = report.pivot(runs(), "throughput_tokens_per_s")
    assert list(table.index) == ["dp", "zero3"]  # the failed tp run has no value
    assert list(table.columns) == [1, 2, 4]
    assert table.loc["dp", 4] == 3000.0
    assert table.loc["zero3", 2] == 1200.0
    assert math.isnan(table.loc["zero3", 1])


def test_pivot_of_a_metric_nobody_has_is_empty():
    assert report.pivot(runs(), "mfu_pct").empty
    assert report.pivot(runs().drop(columns="world_size"), "peak_mem_gib").empty


def test_pivot_splits_a_strategy_run_at_several_zero_stages():
    df = runs()
    df.loc[df["run_name"] == "dp-ws4-z0", "zero_stage"] = "1"
    assert set(report.pivot(df, "peak_mem_gib").index) == {"dp-z0", "dp-z1", "zero3"}


def test_best_per_metric_takes_min_for_time_memory_cost_and_max_for_speed():
    best = report.best_per_metric(runs()).set_index("metric")
    # a whole-job figure per world size (dp-ws1 alone at 1 rank compares with nothing)
    assert list(best.loc["throughput_tokens_per_s", "run_name"]) == ["dp-ws2-z0", "dp-ws4-z0"]
    assert best.loc["peak_mem_gib", "run_name"] == "zero3-ws4-z3"  # per device: every size
    assert best.loc["peak_mem_gib", "value"] == 0.6
    assert best.loc["cost_usd_per_1m_tokens", "run_name"] == "dp-ws1-z0"
    assert set(best.loc["step_time_s_p50", "goal"]) == {"min"}
    assert best.loc["tflops_per_device", "run_name"] == "dp-ws1-z0"  # 1.0 per device
    assert "mfu_pct" not in best.index  # no run has it


def test_pareto_front_keeps_the_runs_nothing_beats_on_both_memory_and_throughput():
    front = report.pareto_front(runs())
    # zero3-ws4 (0.6 GiB, 2000 tokens/s) is the leanest, dp-ws4 (2.1 GiB, 3000) the fastest;
    # zero3-ws4 beats dp-ws1, dp-ws2 and zero3-ws2 on both axes.
    assert list(front["run_name"]) == ["zero3-ws4-z3", "dp-ws4-z0"]


def test_pareto_front_keeps_ties_and_drops_strictly_dominated_points():
    df = pd.DataFrame(
        {
            "status": ["FINISHED"] * 4,
            "run_name": list("abcd"),
            "peak_mem_gib": [1.0, 1.0, 2.0, 3.0],
            "throughput_tokens_per_s": [10.0, 10.0, 20.0, 15.0],
        }
    )
    assert list(report.pareto_front(df)["run_name"]) == ["a", "b", "c"]


def test_scaling_efficiency_is_per_device_throughput_over_the_smallest_world_size():
    eff = report.scaling_efficiency(runs()).set_index(["label", "world_size"])
    assert eff.loc[("dp", 1), "efficiency"] == 1.0
    assert eff.loc[("dp", 2), "efficiency"] == pytest.approx(0.9)  # 900 / 1000
    assert eff.loc[("dp", 4), "efficiency"] == pytest.approx(0.75)  # 750 / 1000
    assert eff.loc[("zero3", 2), "efficiency"] == 1.0  # its smallest world size is 2
    assert eff.loc[("zero3", 4), "efficiency"] == pytest.approx(500 / 600)
    assert eff.loc[("dp", 4), "throughput_per_device"] == 750.0


def test_failed_runs_carry_kind_and_reason():
    failed = report.failed_runs(runs())
    assert list(failed["run_name"]) == ["tp-ws3-z0"]
    assert failed.iloc[0]["failure_kind"] == "invalid_config"
    assert "tp(2)" in failed.iloc[0]["failure_reason"]


def test_pred_vs_measured_recomputes_missing_relative_errors():
    table = report.pred_vs_measured(runs()).set_index("run_name")
    assert table.loc["dp-ws1-z0", "mem_pred_rel_err"] == pytest.approx(0.5)
    assert table.loc["dp-ws1-z0", "time_pred_rel_err"] == pytest.approx(-0.5)
    assert "tp-ws3-z0" not in table.index


def test_a_table_without_any_train_metric_yields_empty_sections_not_errors(tmp_path):
    df = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "run_name": ["dp-ws2-z0", "dp-ws2-z0"],
            "status": ["FINISHED", "FAILED"],
            "strategy": ["dp", "dp"],
            "world_size": [2, 2],
            "workload": ["collectives", "collectives"],
            "busbw_gbps_all_reduce": [1.2, np.nan],
        }
    )
    files, sections = report.write_report(df, tmp_path, "collectives only")
    assert sections.best.empty and sections.plots == []
    assert sections.pred.empty and sections.scaling.empty
    assert list(sections.grid["run_name"]) == ["dp-ws2-z0", "dp-ws2-z0"]  # rows, no metrics
    assert "throughput_tokens_per_s" not in sections.grid
    assert {p.name for p in files} == {"report.md", "report.html", "runs.csv"}
    assert "_none_" in (tmp_path / "report.md").read_text()


def test_grid_table_is_one_row_per_run_with_every_headline_metric_someone_has():
    grid = report.grid_table(runs())
    assert len(grid) == len(runs())  # failed and gemm runs too
    assert list(grid.columns[:6]) == list(report.GRID_KEYS)
    assert "throughput_tokens_per_s" in grid and "mfu_pct" not in grid  # nobody has MFU
    assert grid.columns[-1] == "run_id"
    best = report.best_rows(grid)  # of each world size; per device: of all
    assert list(grid.loc[best["throughput_tokens_per_s"], "run_name"]) == ["dp-ws2-z0", "dp-ws4-z0"]
    assert list(grid.loc[best["peak_mem_gib"], "run_name"]) == ["zero3-ws4-z3"]


def test_run_links_are_absolute_against_a_known_ui_and_relative_without_one():
    assert report.run_link("3", "abc") == "#/experiments/3/runs/abc"
    assert (
        report.run_link("3", "abc", "http://mlflow:5000/")
        == "http://mlflow:5000/#/experiments/3/runs/abc"
    )
    assert report.ui_base_url("sqlite:///x.db") is None
    assert report.ui_base_url("sqlite:///x.db", "http://127.0.0.1:5000/") == "http://127.0.0.1:5000"
    assert report.ui_base_url("https://mlflow.internal/") == "https://mlflow.internal"
    assert report.ui_base_url("http://u:secret@mlflow:80") == "http://u:***@mlflow:80"


def test_report_documents_hold_one_grid_with_run_links_the_verdict_and_every_plot(tmp_path):
    files, sections = report.write_report(
        runs(), tmp_path, "hand-made <sweep>", experiment_id="7", ui_base="http://ui:5000"
    )
    names = {p.name for p in files}
    assert {name for name, _ in report.PLOTS} <= names
    md = (tmp_path / "report.md").read_text()
    assert "| run | strategy | world_size | zero_stage | status | failure_kind |" in md
    assert "| step time p50 (s) | throughput (tokens/s) |" in md
    assert "[dp-ws4-z0](http://ui:5000/#/experiments/7/runs/id2)" in md
    assert "| **3000** |" in md  # the best throughput, marked
    assert "| strategy | 1 | 2 | 4 |" not in md  # no per-metric pivots any more
    assert "best throughput (tokens/s) (max): 3000  dp-ws4-z0" in md
    assert "invalid_config" in md
    html = (tmp_path / "report.html").read_text()
    assert html.count("<table") == 4  # the grid, failed runs, predictions, scaling
    assert "hand-made &lt;sweep&gt;" in html  # autoescaped
    assert '<a href="http://ui:5000/#/experiments/7/runs/id2">dp-ws4-z0</a>' in html
    assert html.count('class="best"') == len(sections.best)
    # every image embedded: nothing the sandboxed artifact viewer would have to fetch
    sources = re.findall(r'<img src="([^"]+)"', html)
    assert len(sources) == len(report.PLOTS)
    for src, (name, _) in zip(sources, report.PLOTS, strict=True):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == (tmp_path / name).read_bytes()
    for name, _ in report.PLOTS:
        assert (tmp_path / name).stat().st_size > 5000
    back = pd.read_csv(tmp_path / "runs.csv")
    assert len(back) == len(runs()) and "gemm_time_s_p50" in back


def test_a_sweep_at_one_world_size_has_no_scaling_plot_or_table(tmp_path):
    df = runs()
    df = df[df["world_size"] == 2]
    files, sections = report.write_report(df, tmp_path, "one world size")
    assert "scaling_efficiency.png" not in {p.name for p in files}
    assert not report.scales(report.scaling_efficiency(df)) and sections.scaling.empty
    assert f"_{report.NO_SCALING}_" in (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert report.NO_SCALING in html and html.count("<img ") == len(report.PLOTS) - 1
    assert "#/experiments/" not in html  # no experiment given: no links


def test_links_are_relative_when_no_ui_is_known(tmp_path):
    report.write_report(runs(), tmp_path, "relative", experiment_id="7")
    html = (tmp_path / "report.html").read_text()
    assert '<a href="#/experiments/7/runs/id0">dp-ws1-z0</a>' in html
    assert "--ui-url" in html  # says how to get absolute links


def test_the_template_ships_as_package_data():
    template = resources.files("distbench.tools") / "templates" / "report.html.j2"
    assert template.is_file()


def test_markdown_table_escapes_pipes_and_marks_missing_values():
    df = pd.DataFrame({"a": ["x|y", None], "b": [1.23456, np.nan]})
    assert report.markdown_table(df).splitlines()[2:] == ["| x\\|y | 1.235 |", "| - | - |"]
