"""experiments/optuna_search.yaml for real: Hydra's Optuna sweeper drives run.py for two trials
(tiny model, ZeRO-2 on 2 gloo ranks, 1 warm-up + 2 timed steps) into a temporary sqlite store.
Each trial is a child run of the sweep's parent with the values Optuna picked, named by its
trial number and those values; progress counts the trials (`job 1/2`); and Optuna was told each
job's objective: its best value is a logged throughput. The trials are the suite's runs of
strategy=zero2 (DeepSpeed's ZeRO stage 2): each one's first-step loss is the single device's.

    pytest tests/e2e/test_optuna_search.py -m e2e        # ~1 min on 2 cores
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import PROJECT_DIR
from tests.e2e.shared_sweeps import parents_and_children

pytestmark = pytest.mark.e2e

SEARCHED = (
    "batch.micro_batch_size",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.allgather_bucket_size",
)


@pytest.mark.usefixtures("sqlite_store")  # a copy of the empty store: no migrations
def test_optuna_search_runs_trials_as_child_runs_and_optuna_gets_the_objective(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            str(PROJECT_DIR / "run.py"),
            "-m",
            "experiments=optuna_search",
            "hydra.sweeper.n_trials=2",
            "world_size=2",
            "model=tiny",
            "workload.num_warmup_steps=1",
            "workload.num_steps=2",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=tmp_path,
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sampler: TPESampler" in proc.stderr + proc.stdout  # the Optuna sweeper ran it
    assert "job 1/2 " in proc.stdout and "job 2/2 " in proc.stdout  # n_trials, not the choices

    parents, trials = parents_and_children(uri)
    assert len(parents) == 1 and len(trials) == 2, [r.info.run_name for r in parents + trials]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parents[0].info.run_id}
    assert {r.info.status for r in trials} == {"FINISHED"}, [
        r.data.tags.get("failure_reason") for r in trials
    ]
    assert {r.data.tags["strategy"] for r in trials} == {"zero2"}
    assert {r.data.tags["zero_stage"] for r in trials} == {"2"}
    for run in trials:  # ZeRO-2 computes the single-device model's first-step loss
        assert run.data.tags["equivalent"] == "true", run.data.metrics["loss_rel_err_vs_single"]
    names = sorted(r.info.run_name for r in trials)
    assert [n.split(" ")[0] for n in names] == ["zero2-ws2-trial0", "zero2-ws2-trial1"], names
    for run in trials:  # each name carries the values the trial ran with
        for key in SEARCHED:
            assert f"{key.rsplit('.', 1)[-1]}={run.data.params[key]}" in run.info.run_name, key

    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert results["name"] == "optuna"
    throughputs = [r.data.metrics["throughput_tokens_per_s"] for r in trials]
    assert all(t > 0 for t in throughputs)
    # Optuna maximised what main() returned: the best trial's value is the larger throughput
    assert results["best_value"] == pytest.approx(max(throughputs), rel=1e-9)
    best = max(trials, key=lambda r: r.data.metrics["throughput_tokens_per_s"])
    picked = {k.lstrip("+"): v for k, v in results["best_params"].items()}
    assert set(picked) == set(SEARCHED)
    for key in SEARCHED:  # the run Optuna calls best ran with the values it picked
        assert best.data.params[key] == str(picked[key]), key
