"""The shared view a sweep stores on its experiment charts its swept keys against its headline
metrics (tracking/view_charts.py), read back with MLflow's own client from the session's shared
sweeps (no run of its own): the README sweep's parallel-coordinates chart has the axes
strategy.name, world_size and the six headline metrics, which every child has; the inference
sweep's leaves out the step time its workload does not log; and a finished child that lacks an
axis has that axis cut at the sweep's end (fit_view_axes, on a copy of the store).

    pytest tests/e2e/test_sweep_view_charts.py
"""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from distbench.tracking import view_charts as vc
from distbench.tracking.dashboard import (
    SHARED_VIEW_TAG_PREFIX,
    fit_view_axes,
    headline_names,
    sweep_view_key,
)

pytestmark = pytest.mark.e2e


def view(uri: str, experiment_id: str, parent_run_id: str) -> tuple[dict, dict]:
    """(the saved view's envelope, its state) as the experiment's tag holds them."""
    tags = MlflowClient(uri).get_experiment(experiment_id).tags
    envelope = json.loads(tags[f"{SHARED_VIEW_TAG_PREFIX}{sweep_view_key(parent_run_id)}"])
    return envelope, json.loads(envelope["state"])


def charted(sweep) -> tuple[list[str], list[str]]:
    """The axes of the sweep's parallel chart; each one every child has (else the chart drops
    the child)."""
    _, state = view(sweep.tracking_uri, sweep.experiment_id, sweep.parent_run_id)
    params, metrics = vc.parallel_axes(state)
    sections = {s["uuid"] for s in state["compareRunSections"]}
    assert all(card["metricSectionId"] in sections for card in state["compareRunCharts"])
    for child in sweep.children:
        assert set(params) <= set(child.data.params), child.info.run_name
        assert set(metrics) <= set(child.data.metrics), child.info.run_name
    return params, metrics


def test_the_readme_sweep_charts_strategy_and_world_size_against_the_headline(readme_sweep):
    assert charted(readme_sweep) == (["strategy.name", "world_size"], headline_names())


def test_an_inference_sweep_charts_only_the_headline_metrics_it_logs(inference_sweep):
    params, metrics = charted(inference_sweep)
    assert params == ["strategy.name"]  # world_size=2 is no sweep
    assert "step_time_s_p50" not in metrics and "throughput_tokens_per_s" in metrics


def test_a_finished_child_without_an_axis_has_that_axis_cut(readme_sweep, tmp_path):
    uri = readme_sweep.copy_store(tmp_path)
    experiment_id, parent_id = readme_sweep.experiment_id, readme_sweep.parent_run_id
    client = MlflowClient(uri)
    child = client.create_run(experiment_id, tags={"mlflow.parentRunId": parent_id})
    client.log_param(child.info.run_id, "strategy.name", "dp")
    client.log_param(child.info.run_id, "world_size", "2")
    for name in headline_names():
        if name != "cost_usd_per_1m_tokens":  # e.g. hardware with no price
            client.log_metric(child.info.run_id, name, 1.0)
    client.set_terminated(child.info.run_id, "FINISHED")

    created = view(uri, experiment_id, parent_id)[0]["createdAt"]
    assert fit_view_axes(uri, experiment_id, parent_id) is True
    envelope, state = view(uri, experiment_id, parent_id)
    expected = [m for m in headline_names() if m != "cost_usd_per_1m_tokens"]
    assert vc.parallel_axes(state) == (["strategy.name", "world_size"], expected)
    assert envelope["createdAt"] == created and envelope["updatedAt"] >= created
    assert state["searchFilter"].endswith(f"'{parent_id}'")  # the rest of the view kept
    assert fit_view_axes(uri, experiment_id, parent_id) is False  # nothing left to cut
