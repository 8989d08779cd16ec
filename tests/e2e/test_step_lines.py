"""What a user reads while and after a job runs, for real: run.py with stdout a pipe (a CI or
SLURM log), 2 gloo ranks, into a real sqlite MLflow store read back with MlflowClient.

- train: the step lines carry the mean loss over both ranks (each rank sees other rows) and
  the torchtitan-style figures; Hydra's run.log holds the same lines, stdout holds them once;
- collectives: nccl-tests' table is printed at the end and its average bus bandwidth logged.

pytest tests/e2e/test_step_lines.py -m e2e
"""

from __future__ import annotations

import csv
import json

import mlflow
import pytest

from tests.e2e.test_sweep import run_py, runs_of

pytestmark = pytest.mark.e2e

STEP_FIELDS = (
    "step_time_s",
    "loss",
    "throughput_tokens_per_s",
    "throughput_tokens_per_s_per_device",
    "tflops_per_device",
    "mfu_pct",
    "peak_mem_gib",
    "time_unix_s",
)


def test_step_lines_carry_the_global_mean_loss_and_reach_run_log(tmp_path):
    job_dir = tmp_path / "run"
    proc = run_py(
        [
            "model=tiny",
            "world_size=2",
            "workload.num_warmup_steps=1",
            "workload.num_steps=2",
            f"hydra.run.dir={job_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (job_dir / "progress.jsonl").read_text().splitlines()]
    result = json.loads((job_dir / "result.json").read_text())
    per_rank = [r["losses"] for r in sorted(result["ranks"], key=lambda r: r["rank"])]
    assert [line["step"] for line in lines] == [1, 2, 3]
    for i, line in enumerate(lines):
        assert set(STEP_FIELDS) <= set(line), line
        # each replica trains on its own rows: rank 0's loss is not the job's
        assert per_rank[0][i] != per_rank[1][i]
        assert line["loss"] == pytest.approx((per_rank[0][i] + per_rank[1][i]) / 2, rel=1e-12)
        assert line["loss"] == pytest.approx(result["losses"][i], rel=1e-12)
        assert line["step_time_s"] == pytest.approx(result["step_times_s"][i], rel=1e-12)
        assert line["throughput_tokens_per_s"] == pytest.approx(
            2 * line["throughput_tokens_per_s_per_device"]
        )
        assert line["peak_mem_gib"] > 0 and line["mfu_pct"] > 0

    out = proc.stdout
    assert "starting ranks at 20" in out  # a timestamp while the ranks start
    step3 = [ln for ln in out.splitlines() if "timed step 3/3" in ln]
    assert len(step3) == 1, out  # printed once: the log handlers do not echo it
    assert f"loss {lines[2]['loss']:.4f}" in step3[0] and "tok/s" in step3[0]
    assert "MFU" in step3[0] and "GiB" in step3[0]
    assert "[distbench.job]" not in out

    run_log = (job_dir / "run.log").read_text()
    assert "starting ranks at" in run_log and step3[0].strip() in run_log

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run_id = runs_of(tmp_path).iloc[0]["run_id"]
    streamed = client.get_metric_history(run_id, "progress/loss")
    assert sorted((m.step, m.value) for m in streamed) == [
        (i, pytest.approx(line["loss"])) for i, line in enumerate(lines)
    ]
    assert len(client.get_metric_history(run_id, "progress/throughput_tokens_per_s")) == 3
    # the scalar metrics keep their definitions (the p50), untouched by the step series
    metrics = client.get_run(run_id).data.metrics
    assert metrics["loss_last"] == pytest.approx(lines[-1]["loss"])


def test_collectives_print_nccl_tests_table_and_log_the_average_busbw(tmp_path):
    job_dir = tmp_path / "run"
    proc = run_py(
        [
            "workload=collectives",
            "world_size=2",
            "workload.num_warmup_steps=1",
            "workload.num_steps=2",
            "collectives.ops=[all_reduce,all_gather]",
            "collectives.min_bytes=1024",
            "collectives.max_bytes=65536",
            "collectives.factor=4",
            "objective=busbw_gbps_avg",
            f"hydra.run.dir={job_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    assert out.count(header) == 2  # one table per collective, as nccl-tests prints them
    assert "        1024           256     float     sum      -1" in proc.stdout
    assert out.count("# Out of bounds values : 0 OK") == 2
    calls = [ln for ln in out if " step " in ln and "/8" in ln]
    assert len(calls) == 8 and all("busbw" in ln and "0.000 s" not in ln for ln in calls)
    assert "64 KiB" in calls[3]
    assert "zero" not in next(ln for ln in out if "strategy" in ln and "status" in ln)

    rows = list(csv.DictReader((job_dir / "collectives.csv").open()))
    busbw = {
        op: [float(r["busbw_gbps"]) for r in rows if r["collective"] == op]
        for op in {r["collective"] for r in rows}
    }
    run = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(
        runs_of(tmp_path).iloc[0]["run_id"]
    )
    metrics = run.data.metrics
    for op, values in busbw.items():
        mean = sum(values) / len(values)
        assert metrics[f"busbw_gbps_avg.{op}"] == pytest.approx(mean, rel=1e-9)
        assert f"# Avg bus bandwidth    : {mean:g} " in out
    every = [v for values in busbw.values() for v in values]
    assert metrics["busbw_gbps_avg"] == pytest.approx(sum(every) / len(every), rel=1e-9)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert "collectives.txt" in {a.path for a in client.list_artifacts(run.info.run_id)}
