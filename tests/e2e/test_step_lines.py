"""What a user reads while and after a job runs, for real: run.py with stdout a pipe (a CI or
SLURM log), 2 gloo ranks, into a real sqlite MLflow store read back with MlflowClient (the
README's sweep, shared by the session: tests/e2e/shared_sweeps.py): the step lines carry the
mean loss over both ranks (each rank sees other rows) and the torchtitan-style figures; Hydra's
run.log holds the same lines, stdout holds them once. (nccl-tests' table of the collectives:
tests/e2e/test_raw_workloads.py.)

pytest tests/e2e/test_step_lines.py -m e2e
"""

from __future__ import annotations

import json

import mlflow
import pytest

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


def test_step_lines_carry_the_global_mean_loss_and_reach_run_log(readme_sweep):
    job_dir = readme_sweep.job_dir("dp", 2)
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

    out = readme_sweep.stdout
    assert "starting ranks at 20" in out  # a timestamp while the ranks start
    run_log = (job_dir / "run.log").read_text()
    (step3,) = [ln.strip() for ln in run_log.splitlines() if "timed step 3/3" in ln]
    step3 = step3[step3.index("timed step 3/3") :]
    # printed once per job of the sweep: the log handlers do not echo it
    assert sum("timed step 3/3" in ln for ln in out.splitlines()) == 6, out
    assert sum(step3 in ln for ln in out.splitlines()) == 1, out  # this job's, once
    assert f"loss {lines[2]['loss']:.4f}" in step3 and "tok/s" in step3
    assert "MFU" in step3 and "GiB" in step3
    assert "[distbench.job]" not in out
    assert "starting ranks at" in run_log

    client = mlflow.MlflowClient(readme_sweep.tracking_uri)
    run_id = readme_sweep.outcome("dp", 2)["run_id"]
    streamed = client.get_metric_history(run_id, "progress/loss")
    assert sorted((m.step, m.value) for m in streamed) == [
        (i, pytest.approx(line["loss"])) for i, line in enumerate(lines)
    ]
    assert len(client.get_metric_history(run_id, "progress/throughput_tokens_per_s")) == 3
    # the scalar metrics keep their definitions (the p50), untouched by the step series
    metrics = client.get_run(run_id).data.metrics
    assert metrics["loss_last"] == pytest.approx(lines[-1]["loss"])
