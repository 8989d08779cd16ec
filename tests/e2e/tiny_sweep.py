"""One finished tiny sweep (dp and zero1 on 2 ranks, 1 warm-up + 2 timed steps, the peak FLOP/s
measured on this machine into a temporary cache) in a temporary sqlite store, run once per test
session and shared by the report, calibration and browser tests.

    @pytest.fixture(scope="module")
    def sweep(tmp_path_factory):
        return shared_sweep(tmp_path_factory)    # the sweep runs once per pytest session
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

SWEEP_ARGS = [
    "-m",
    "strategy=dp,zero1",
    "world_size=2",
    "model=tiny",
    "workload.num_warmup_steps=1",
    "workload.num_steps=2",
    "hardware.peak_source=measured",
]


@dataclass(frozen=True)
class Sweep:
    root: Path
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    parent_run_name: str
    child_run_ids: tuple[str, ...]
    child_run_names: tuple[str, ...]

    def env(self) -> dict[str, str]:
        return dict(os.environ, MLFLOW_TRACKING_URI=self.tracking_uri)


_CACHE: dict[str, Sweep] = {}


def run_tiny_sweep(root: Path) -> Sweep:
    uri = f"sqlite:///{root}/mlflow.db"
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), *SWEEP_ARGS, f"hydra.sweep.dir={root}/sweep"],
        cwd=root,
        env=dict(os.environ, MLFLOW_TRACKING_URI=uri, DISTBENCH_CACHE_DIR=str(root / "cache")),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parents, children = parents_and_children(uri)
    assert len(parents) == 1 and len(children) == 2, [r.info.run_name for r in parents + children]
    assert {r.info.status for r in children} == {"FINISHED"}
    return Sweep(
        root=root,
        tracking_uri=uri,
        experiment_id=parents[0].info.experiment_id,
        parent_run_id=parents[0].info.run_id,
        parent_run_name=parents[0].info.run_name,
        child_run_ids=tuple(sorted(r.info.run_id for r in children)),
        child_run_names=tuple(sorted(r.info.run_name for r in children)),
    )


def shared_sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """The session's tiny sweep, run on first use and cached (modules' fixtures call this)."""
    if "sweep" not in _CACHE:
        _CACHE["sweep"] = run_tiny_sweep(tmp_path_factory.mktemp("tiny_sweep"))
    return _CACHE["sweep"]


def parents_and_children(uri: str, experiment: str = "distbench") -> tuple[list, list]:
    """The experiment's runs read back with MLflow's own client: (sweep parents, child runs)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]
