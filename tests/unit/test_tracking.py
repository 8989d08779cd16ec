"""Runs written to a real sqlite MLflow store and read back with MLflow's own client."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from distbench.orchestrator import run_name, swept_values
from distbench.tracking.mlflow_store import ensure_experiment, flatten, log_child_run, ui_url
from distbench.tracking.parent import varied_params
from distbench.tracking.sweep import count_sweep_jobs, num_sweep_jobs, resolve_tracking_uri

pytestmark = pytest.mark.unit


def test_flatten_uses_dotted_keys():
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2]}) == {
        "a.b": "1",
        "a.c.d": "None",
        "e": "[1, 2]",
    }


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DISTBENCH_TRACKING_URI", raising=False)
    sqlite = SimpleNamespace(backend="sqlite", uri=None)
    assert resolve_tracking_uri(sqlite, tmp_path) == f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert resolve_tracking_uri(sqlite, tmp_path) == "http://127.0.0.1:5999"
    assert resolve_tracking_uri(SimpleNamespace(backend="none", uri=None), tmp_path) is None


def test_ui_url_opens_the_runs_table():
    assert ui_url("sqlite:///x.db", "3", 5000) == "http://127.0.0.1:5000/#/experiments/3/runs"
    assert ui_url("http://mlflow:80/", "3", 5000) == "http://mlflow:80/#/experiments/3/runs"


def test_sweep_job_count_is_the_grid_product():
    assert count_sweep_jobs(["strategy=dp,tp,zero3", "world_size=2,4"], {}) == 6
    assert count_sweep_jobs(["model=tiny"], {"strategy": "dp,tp", "world_size": "2,4"}) == 4
    assert count_sweep_jobs(["world_size=2"], {"world_size": "2,4"}) == 1


def test_a_sampling_sweeper_runs_its_trial_budget_not_its_choices():
    params = {"batch.micro_batch_size": "choice(1, 2, 4, 8)"}
    optuna = OmegaConf.create({"sweeper": {"n_trials": 3, "params": params}})
    assert num_sweep_jobs(optuna, ["world_size=2"]) == 3
    grid = OmegaConf.create({"sweeper": {"params": None}})
    assert num_sweep_jobs(grid, ["strategy=dp,tp", "world_size=2,4"]) == 4


def test_run_names_tell_a_sweeps_jobs_apart_by_their_swept_values_and_trial():
    swept = list(
        varied_params(
            ["strategy=dp,zero1", "model=tiny,small", "world_size=2", "+db.password=a,b"],
            {"batch.micro_batch_size": "choice(1, 2)", "+zero_optimization.bucket_size": "1,5"},
        )
    )
    job = ["strategy=dp", "model=tiny", "world_size=2", "+db.password=a"]
    job += ["batch.micro_batch_size=2", "+zero_optimization.bucket_size=5", "+x.bucket_size=7"]
    values = swept_values(job, swept)  # strategy is in the name already; secrets are masked
    assert values == ["model=tiny", "password=***", "micro_batch_size=2", "bucket_size=5"]
    tags = {"workload": "train", "strategy": "dp", "world_size": "2", "zero_stage": "none"}
    assert run_name(tags, None) == "dp-ws2"
    assert run_name(tags, None, 3, ["micro_batch_size=2"]) == "dp-ws2-trial3 micro_batch_size=2"
    shared = swept_values(["a.size=1", "b.size=2"], ["a.size", "b.size"])
    assert shared == ["a.size=1", "b.size=2"]  # one leaf, two keys: named in full


def test_child_run_lands_with_params_metrics_tags_artifacts(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment_id = ensure_experiment(uri, "t")
    assert ensure_experiment(uri, "t") == experiment_id
    client = MlflowClient(uri)
    parent = client.create_run(experiment_id).info.run_id
    artifact = tmp_path / "result.json"
    artifact.write_text("{}")
    params = {f"p{i}": str(i) for i in range(150)}  # more than one log_batch
    run_id = log_child_run(
        uri,
        experiment_id,
        "dp-ws2",
        params,
        {"step_time_s_p50": 0.5},
        {"strategy": "dp"},
        [artifact, tmp_path / "absent.log"],
        failed=False,
        parent_run_id=parent,
    )
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == params
    assert run.data.metrics == {"step_time_s_p50": 0.5}
    assert run.data.tags["strategy"] == "dp"
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert [a.path for a in client.list_artifacts(run_id)] == ["result.json"]
    failed = log_child_run(
        uri, experiment_id, "x", {}, {}, {"failure_kind": "oom"}, [], failed=True
    )
    assert client.get_run(failed).info.status == "FAILED"


# Signatures computed at 795d34b, before each engine had its own strategy schema: a run recorded
# then must still pair (compare) and be found (resume) by the same config now.
SIGNATURES_BEFORE_THE_ENGINE_SCHEMAS = {
    ("strategy=zero3",): "b85093918eb5d16e",
    ("strategy=fsdp",): "3265548306b91c47",
    ("strategy=tp", "world_size=2"): "7fe069f4ef3bead8",
}


@pytest.mark.parametrize("overrides", sorted(SIGNATURES_BEFORE_THE_ENGINE_SCHEMAS))
def test_a_runs_signature_survives_the_per_engine_strategy_schemas(overrides):
    from distbench.job import resolve_job
    from distbench.tracking.signature import run_signature
    from tests.conftest import CONF_DIR, compose_config

    fixed = ["hardware=h100_sxm", "hardware.time_source=efficiency"]
    job = resolve_job(compose_config([*overrides, *fixed]), CONF_DIR)
    assert run_signature(job.tree()) == SIGNATURES_BEFORE_THE_ENGINE_SCHEMAS[overrides]
