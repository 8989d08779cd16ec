"""A sweep's view charts its swept keys against its headline metrics (tracking/view_charts.py):
the axes are params every job logs and metrics its workload logs, the chart state is what
MLflow 3.17's UI applies (every card in a listed section; the UI's section order), and the
axes are cut to those every finished run has. The store round trip is
tests/e2e/test_sweep_view_charts.py.

    pytest tests/unit/test_view_charts.py
"""

from __future__ import annotations

import pytest
from mlflow.entities import Metric, Param, Run, RunData, RunInfo

from distbench.job import resolve_job
from distbench.orchestrator.recording import logged_params
from distbench.tracking import view_charts as vc
from distbench.tracking.dashboard import headline_names, sweep_axes
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


def test_the_axes_are_params_every_job_logs_and_metrics_its_workload_logs():
    config = compose_config(["model=tiny"])
    swept = {"strategy": "dp,tp", "world_size": "2,4", "batch.micro_batch_size": "1,2"}
    params, metrics = sweep_axes({**swept, "extra": "1,2"}, config)  # +extra=1,2: no param
    assert params == ["strategy.name", "world_size", "batch.micro_batch_size"]
    logged = logged_params(resolve_job(config, CONF_DIR).tree())
    assert set(params) <= set(logged)
    assert metrics == headline_names()  # train logs all six

    inference = vc.axis_metrics(["inference"], headline_names())
    assert "step_time_s_p50" not in inference and "throughput_tokens_per_s" in inference
    assert vc.axis_metrics(["train", "inference"], headline_names()) == inference
    assert sweep_axes({"workload": "train,inference"}, config)[1] == inference


def test_the_chart_state_puts_the_parallel_chart_right_after_the_headline_section():
    state = vc.chart_state(["strategy.name", "world_size"], ["step_time_s_p50", "peak_mem_gib"])
    (card,) = state["compareRunCharts"]
    assert card["type"] == "PARALLEL" and card["showAllRuns"] is True
    assert card["selectedParams"] == ["strategy.name", "world_size"]
    assert card["selectedMetrics"] == ["step_time_s_p50", "peak_mem_gib"]
    sections = {s["uuid"]: s["name"] for s in state["compareRunSections"]}
    assert sections[card["metricSectionId"]] == vc.PARALLEL_SECTION
    (own,) = [s for s in state["compareRunSections"] if s["uuid"] == card["metricSectionId"]]
    assert own["columns"] == 1  # the whole width: legible axis names
    # The UI's order (updateChartAndSectionConfigs): by name, its two own sections last.
    names = [*sorted(n for n in sections.values() if n not in SECTIONS_LAST), *SECTIONS_LAST]
    assert names[:2] == ["headline", vc.PARALLEL_SECTION] and vc.PARALLEL_SECTION < "progress"
    assert vc.parallel_axes(state) == (card["selectedParams"], card["selectedMetrics"])


SECTIONS_LAST = ["Model metrics", "System metrics"]


def finished_run(params: dict[str, str], metrics: dict[str, float], status="FINISHED") -> Run:
    info = RunInfo("r", "0", "me", status, 0, None, "active")
    data = RunData(
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
        params=[Param(k, v) for k, v in params.items()],
    )
    return Run(info, data)


def test_the_axes_are_cut_to_those_every_finished_run_has():
    params, metrics = ["strategy.name", "world_size"], ["mfu_pct", "peak_mem_gib"]
    full = finished_run(
        {"strategy.name": "dp", "world_size": "2"}, {"mfu_pct": 1, "peak_mem_gib": 2}
    )
    no_mfu = finished_run({"strategy.name": "tp", "world_size": "2"}, {"peak_mem_gib": 2})
    failed = finished_run({}, {}, status="FAILED")  # no metrics: never charted, not counted
    assert vc.axes_present(params, metrics, [full, no_mfu, failed]) == (params, ["peak_mem_gib"])
    assert vc.axes_present(params, metrics, [full, failed]) == (params, metrics)
    assert vc.axes_present(params, metrics, [failed]) is None
