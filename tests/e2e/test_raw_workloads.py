"""The raw workloads through run.py into a real sqlite MLflow store, read back with mlflow's
client: series stepped by message size, the CSV table and the PNG plot as artifacts. The
collectives run on 4 ranks, every collective native: each call checked (zero error) and
busbw / algbw nccl-tests' bus factor for 4 ranks (2 ranks: tests/distributed/test_collectives.py);
what a user reads of it: nccl-tests' table printed at the end, its average bus bandwidth logged.
The gemm runs its rows sharding on 2 ranks under the device audit, checked against the float64
reference as tests/distributed/test_gemm.py checks the other shardings.

pytest tests/e2e/test_raw_workloads.py -m e2e
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest

from distbench.ranks.worker import DEVICE_AUDIT_ENV
from tests.distributed.test_collectives import BUS_FACTOR, OPS
from tests.distributed.test_gemm import FAST as GEMM_FAST
from tests.distributed.test_gemm import assert_sharded_gemm
from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e

SIZES = [1024, 8192, 65536]
FEW = ["workload.num_warmup_steps=1", "workload.num_steps=2"]


@dataclass(frozen=True)
class Collectives:
    proc: subprocess.CompletedProcess
    root: Path
    run: object  # the child run's row of mlflow.search_runs

    @property
    def client(self) -> mlflow.MlflowClient:
        return mlflow.MlflowClient(f"sqlite:///{self.root}/mlflow.db")


@pytest.fixture(scope="module")
def collectives(tmp_path_factory, store_template) -> Collectives:
    """One collectives sweep on 4 ranks (all six collectives, 3 sizes), run once."""
    root = tmp_path_factory.mktemp("collectives")
    shutil.copy(store_template, root / "mlflow.db")  # a copy of the empty store: no migrations
    proc = run_py(
        [
            "-m",
            "workload=collectives",
            "world_size=4",
            "collectives.max_bytes=65536",
            "collectives.factor=8",
            "objective=busbw_gbps_avg",
            *FEW,
            f"hydra.sweep.dir={root}/sweep",
        ],
        root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [r for _, r in runs_of(root).dropna(subset=["tags.mlflow.parentRunId"]).iterrows()]
    return Collectives(proc, root, run)


def test_collectives_sweep_lands_series_csv_and_png(collectives, tmp_path):
    run, client = collectives.run, collectives.client
    assert run["status"] == "FINISHED" and run["tags.world_size"] == "4"
    assert run["tags.workload"] == "collectives"
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"):
        busbw = {m.step: m.value for m in client.get_metric_history(run.run_id, f"busbw_gbps.{op}")}
        algbw = {m.step: m.value for m in client.get_metric_history(run.run_id, f"algbw_gbps.{op}")}
        assert sorted(busbw) == SIZES, op
        for size in SIZES:
            assert busbw[size] == pytest.approx(algbw[size] * BUS_FACTOR[4].get(op, 1.0))
        assert run[f"metrics.busbw_gbps_peak.{op}"] == pytest.approx(max(busbw.values()))
    assert run["metrics.alpha_s.all_reduce"] == run["metrics.alpha_s.all_reduce"]  # not NaN
    artifacts = {a.path for a in client.list_artifacts(run.run_id)}
    assert {"collectives.csv", "collectives_busbw.png", "collectives.txt", "result.json"} <= (
        artifacts
    )
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


def test_collectives_print_nccl_tests_table_and_log_the_average_busbw(collectives):
    out = collectives.proc.stdout.splitlines()
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    assert out.count(header) == len(OPS)  # one table per collective, as nccl-tests prints them
    assert "        1024           256     float     sum      -1" in collectives.proc.stdout
    assert out.count("# Out of bounds values : 0 OK") == len(OPS)
    num_calls = len(OPS) * len(SIZES)
    calls = [ln for ln in out if " step " in ln and f"/{num_calls}" in ln]
    assert len(calls) == num_calls and all("busbw" in ln and "0.000 s" not in ln for ln in calls)
    assert "64 KiB" in calls[len(SIZES) - 1]
    assert "zero" not in next(ln for ln in out if "strategy" in ln and "status" in ln)

    job_dir = collectives.root / "sweep" / "0"
    rows = list(csv.DictReader((job_dir / "collectives.csv").open()))
    busbw = {
        op: [float(r["busbw_gbps"]) for r in rows if r["collective"] == op]
        for op in {r["collective"] for r in rows}
    }
    metrics = collectives.client.get_run(collectives.run.run_id).data.metrics
    for op, values in busbw.items():
        mean = sum(values) / len(values)
        assert metrics[f"busbw_gbps_avg.{op}"] == pytest.approx(mean, rel=1e-9)
        assert f"# Avg bus bandwidth    : {mean:g} " in out
    every = [v for values in busbw.values() for v in values]
    assert metrics["busbw_gbps_avg"] == pytest.approx(sum(every) / len(every), rel=1e-9)


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_gemm_run_lands_its_metrics_and_equals_the_reference(tmp_path):
    """The rows sharding on 2 ranks of tests/distributed/test_gemm.py (its shape, steps and
    device audit), through run.py: the metrics land in MLflow, the job checks as there."""
    gemm = [o for o in GEMM_FAST if o != "tracking=none"]
    proc = run_py(
        [*gemm, "gemm.sharding=rows", "world_size=2", f"hydra.run.dir={tmp_path}/job"],
        tmp_path,
        env={DEVICE_AUDIT_ENV: "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads((tmp_path / "job" / "outcome.json").read_text())
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    assert_sharded_gemm(outcome["metrics"], result, "rows", 2)
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
    assert len(client.get_metric_history(run.run_id, "gemm_time_s")) == 3  # the timed steps
