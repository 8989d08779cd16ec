"""The raw workloads through run.py into a real sqlite MLflow store, read back with mlflow's
client: series stepped by message size, the CSV table and the PNG plot as artifacts. The
collectives run on 4 ranks, every collective native: each call checked (zero error) and
busbw / algbw nccl-tests' bus factor for 4 ranks (2 ranks: tests/distributed/test_collectives.py).

pytest tests/e2e/test_raw_workloads.py -m e2e
"""

from __future__ import annotations

import csv
from pathlib import Path

import mlflow
import pytest

from tests.distributed.test_collectives import BUS_FACTOR, OPS
from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e

SIZES = [1024, 8192, 65536]
FEW = ["workload.num_warmup_steps=1", "workload.num_steps=2"]


def test_collectives_sweep_lands_series_csv_and_png(tmp_path):
    proc = run_py(
        [
            "-m",
            "workload=collectives",
            "world_size=4",
            "collectives.max_bytes=65536",
            "collectives.factor=8",
            *FEW,
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [r for _, r in runs_of(tmp_path).dropna(subset=["tags.mlflow.parentRunId"]).iterrows()]
    assert run["status"] == "FINISHED" and run["tags.world_size"] == "4"
    assert run["tags.workload"] == "collectives"
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"):
        busbw = {m.step: m.value for m in client.get_metric_history(run.run_id, f"busbw_gbps.{op}")}
        algbw = {m.step: m.value for m in client.get_metric_history(run.run_id, f"algbw_gbps.{op}")}
        assert sorted(busbw) == SIZES, op
        for size in SIZES:
            assert busbw[size] == pytest.approx(algbw[size] * BUS_FACTOR[4].get(op, 1.0))
        assert run[f"metrics.busbw_gbps_peak.{op}"] == pytest.approx(max(busbw.values()))
    assert run["metrics.alpha_s.all_reduce"] == run["metrics.alpha_s.all_reduce"]  # not NaN
    artifacts = {a.path for a in client.list_artifacts(run.run_id)}
    assert {"collectives.csv", "collectives_busbw.png", "result.json"} <= artifacts
    local = client.download_artifacts(run.run_id, "collectives.csv", str(tmp_path))
    rows = list(csv.DictReader(Path(local).read_text().splitlines()))
    assert [(r["collective"], int(r["size_bytes"])) for r in rows] == [
        (op, size) for op in OPS for size in SIZES
    ]
    for row in rows:  # fp32 sums of small integers: exact; gloo on 4 ranks has every one
        assert row["world_size"] == "4" and row["implementation"] == "native", row
        assert float(row["check_max_rel_err"]) == 0.0, row
        algbw, busbw = float(row["algbw_gbps"]), float(row["busbw_gbps"])
        assert busbw / algbw == pytest.approx(BUS_FACTOR[4].get(row["collective"], 1.0))


def test_gemm_run_lands_its_metrics(tmp_path):
    proc = run_py(
        ["workload=gemm", "world_size=2", "gemm.m=256", "gemm.k=256", "gemm.n=256", *FEW],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [r for _, r in runs_of(tmp_path).iterrows()]
    assert run["status"] == "FINISHED" and run["tags.workload"] == "gemm"
    for metric in (
        "gemm_time_s_p50",
        "tflops_per_device",
        "tflops_total",
        "comm_time_s_p50",
        "compute_time_s_p50",
        "comm_fraction",
        "max_rel_err",
        "mem_per_rank_gib_sharded",
        "max_square_n_fits",
    ):
        assert run[f"metrics.{metric}"] > 0, metric
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert len(client.get_metric_history(run.run_id, "gemm_time_s")) == 2
