"""workload=inference swept over dp and tp through run.py into a real sqlite MLflow store:
two FINISHED child runs carrying the inference metrics, read back with mlflow (the session's
shared inference sweep, tests/e2e/shared_sweeps.py).

    pytest tests/e2e/test_inference_sweep.py -m e2e
"""

from __future__ import annotations

import mlflow
import pytest

from tests.e2e.shared_sweeps import INFERENCE
from tests.e2e.test_sweep import runs_in

pytestmark = pytest.mark.e2e

METRICS = [
    "time_to_first_token_s",
    "time_per_output_token_s",
    "decode_tokens_per_s",
    "throughput_tokens_per_s",
    "latency_s_p50",
    "latency_s_p90",
    "tflops_per_device",
    "tflops_total",
    "arithmetic_intensity_flops_per_byte",
    "peak_mem_gib",
    "peak_mem_gib_rank0",
    "peak_mem_gib_rank1",
    "cost_usd_per_1m_tokens",
]


def test_dp_and_tp_inference_sweep_lands_two_finished_runs(inference_sweep):
    children = runs_in(inference_sweep.tracking_uri).dropna(subset=["tags.mlflow.parentRunId"])
    assert sorted(children["params.strategy.name"]) == ["dp", "tp"]
    assert sorted(children["tags.strategy"]) == ["dp", "tp"]
    assert sorted(children["tags.mlflow.runName"]) == ["inference-dp-ws2", "inference-tp-ws2"]
    assert set(children["status"]) == {"FINISHED"}
    assert set(children["tags.workload"]) == {"inference"}
    client = mlflow.MlflowClient(inference_sweep.tracking_uri)
    batch, new, steps = (INFERENCE[k] for k in ("batch_size", "num_new_tokens", "num_steps"))
    for _, run in children.iterrows():
        for metric in METRICS:
            assert run[f"metrics.{metric}"] > 0, (run["params.strategy.name"], metric)
        dp = 2 if run["params.strategy.name"] == "dp" else 1
        assert run["metrics.num_generated_tokens"] == batch * new * dp * steps
        assert len(client.get_metric_history(run.run_id, "latency_s")) == steps + 1  # warm-up
