"""MLflow as a dashboard (tracking/dashboard.py): headline copies of the headline metrics, the
prediction inputs out of the params, the URLs of the training view, a sweep's shared view in the
envelope MLflow 3.17's UI reads (tests/e2e/test_repeats.py finds it, and the report's tables
logged with log_table, in a real store).

    pytest tests/unit/test_dashboard_mlflow.py
"""

from __future__ import annotations

import json

import pytest

from distbench.orchestrator.recording import logged_params
from distbench.tracking import dashboard
from distbench.tracking.mlflow_store import ui_url

pytestmark = pytest.mark.unit

HEADLINE = [
    "step_time_s_p50",
    "throughput_tokens_per_s",
    "tflops_per_device",
    "mfu_pct",
    "peak_mem_gib",
    "cost_usd_per_1m_tokens",
]


def test_the_headline_metrics_get_their_own_prefix_and_keep_their_names():
    assert dashboard.headline_names() == HEADLINE
    metrics = {"step_time_s_p50": 0.3, "mfu_pct": 12.0, "loss_last": 9.0}
    assert dashboard.with_headline(metrics) == {
        **metrics,
        "headline/step_time_s_p50": 0.3,
        "headline/mfu_pct": 12.0,
    }


def test_measured_prediction_inputs_are_no_params_their_reasons_are():
    tree = {
        "world_size": 2,
        "fault": {"kind": "none"},
        "hardware": {"time_source": "measured", "peak_tflops_fp32": 1.5},
        "measured": {"micro_batch_gemm_s": 0.1, "time_calibration_error": None},
    }
    assert logged_params(tree) == {
        "world_size": "2",
        "hardware.time_source": "measured",  # read back by the prediction error bars
        "hardware.peak_tflops_fp32": "1.5",
        "measured.time_calibration_error": "None",
    }


def test_printed_urls_open_the_training_view_and_the_sweeps_view():
    runs = ui_url("sqlite:///x.db", "3", 5000)
    assert dashboard.training_url(runs) == f"{runs}?workflowType=machine_learning"
    key = dashboard.sweep_view_key("0123456789abcdef" * 2)
    assert dashboard.training_url(runs, key) == (
        f"{runs}?workflowType=machine_learning&viewStateShareKey=distbench-0123456789ab"
    )


def test_a_sweeps_view_lists_its_children_with_the_headline_columns():
    state = dashboard.sweep_view_state("p" * 32, ["strategy", "batch.micro_batch_size"])
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{'p' * 32}'"
    assert state["orderByKey"] == "tags.`mlflow.runName`"  # by start time MLflow folds them
    columns = state["selectedColumns"]
    assert "tags.`strategy`" in columns and "tags.`repeat`" in columns
    assert "params.`batch.micro_batch_size`" in columns and "params.`strategy`" not in columns
    assert columns[-6:] == [f"metrics.`headline/{m}`" for m in HEADLINE]
    envelope = json.loads(dashboard.saved_view_value("distbench sweep-1", state, 1_790_000_000_000))
    # what MLflow 3.17's UI checks before it applies a saved view: name, createdAt, state (str)
    assert envelope["name"] == "distbench sweep-1" and envelope["createdAt"] == 1_790_000_000_000
    assert json.loads(envelope["state"]) == state
