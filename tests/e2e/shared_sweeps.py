"""Real sweeps that several test modules assert on: each runs once per pytest session through
`python run.py -m ...` (real torchrun ranks, a real sqlite MLflow store read back with MLflow's
client) and is shared through the session fixtures of tests/conftest.py:

- `readme_sweep`: the README's sweep, `strategy=dp,tp,zero3 world_size=2,4` (6 jobs; system
  metrics every second, the peak FLOP/s measured on this machine into the sweep's cache). The
  README, live-run, step-line, report, calibration, browser, compare and resume tests read it,
  and the strategy tests its dp, tp and zero3 jobs.
- `grid_sweep`: every other training strategy at world_size=2 (10 jobs: `single` runs on one
  rank as the baseline row; the torch engine's ddp, fsdp, torch_tp, torch_pp; DeepSpeed's
  zero1, zero2, both offloads and pp). With the README sweep's rows, each strategy runs once,
  and the engine, strategy and equivalence tests read them.
- `inference_sweep`: workload=inference on dp and tp, 2 ranks (the inference tests of both
  layers, and the rerun tests' earlier attempt).

A test that writes to a store (resume, compare, another sweep) works on `copy_store()`, so what
the others read does not depend on the order tests run in.

    def test_something(readme_sweep):
        outcome = readme_sweep.outcome("zero3", 4)        # the job's outcome.json

While working on the tests, DISTBENCH_TEST_SWEEPS_DIR=<dir> keeps the sweeps there and reuses
them in later sessions (a sweep reruns when its arguments change; delete the dir after changing
the code they run):

    DISTBENCH_TEST_SWEEPS_DIR=/tmp/sweeps pytest tests/e2e/test_report.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

FEW_STEPS = ["model=tiny", "workload.num_warmup_steps=1", "workload.num_steps=2"]
README_ARGS = [
    "strategy=dp,tp,zero3",
    "world_size=2,4",
    *FEW_STEPS,
    "tracking.system_metrics_interval_s=1",
    "hardware.peak_source=measured",
]
GRID_STRATEGIES = [
    "single",
    "ddp",
    "fsdp",
    "torch_tp",
    "torch_pp",
    "zero1",
    "zero2",
    "zero2_offload",
    "zero3_offload",
    "pp",
]
GRID_ARGS = [f"strategy={','.join(GRID_STRATEGIES)}", "world_size=2", *FEW_STEPS]
INFERENCE = {"batch_size": 2, "prompt_len": 16, "num_new_tokens": 6, "num_steps": 2}
INFERENCE_ARGS = [
    "workload=inference",
    "strategy=dp,tp",
    "world_size=2",
    "hardware=cpu",
    "model=tiny",
    f"inference.prompt_len={INFERENCE['prompt_len']}",
    f"inference.batch_size={INFERENCE['batch_size']}",
    f"inference.num_new_tokens={INFERENCE['num_new_tokens']}",
    "workload.num_warmup_steps=1",
    f"workload.num_steps={INFERENCE['num_steps']}",
]


@dataclass(frozen=True)
class Sweep:
    """A finished sweep: its store, its parent run and its jobs' dirs."""

    root: Path
    args: tuple[str, ...]
    stdout: str

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.root}/mlflow.db"

    @property
    def sweep_dir(self) -> Path:
        return self.root / "sweep"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    def env(self, uri: str | None = None) -> dict[str, str]:
        """The environment the sweep ran with (its store and its measured-peak cache)."""
        return dict(
            os.environ,
            MLFLOW_TRACKING_URI=uri or self.tracking_uri,
            DISTBENCH_CACHE_DIR=str(self.cache_dir),
        )

    @cached_property
    def runs(self) -> tuple[list, list]:
        """(parents, children) as MLflow's client reads them back."""
        return parents_and_children(self.tracking_uri)

    @property
    def parent(self):
        (parent,) = self.runs[0]
        return parent

    @property
    def children(self) -> list:
        return self.runs[1]

    @property
    def experiment_id(self) -> str:
        return self.parent.info.experiment_id

    @property
    def parent_run_id(self) -> str:
        return self.parent.info.run_id

    @property
    def parent_run_name(self) -> str:
        return self.parent.info.run_name

    @property
    def child_run_ids(self) -> tuple[str, ...]:
        return tuple(sorted(r.info.run_id for r in self.children))

    @property
    def child_run_names(self) -> tuple[str, ...]:
        return tuple(sorted(r.info.run_name for r in self.children))

    @cached_property
    def job_dirs(self) -> dict[tuple[str, int], Path]:
        """Each job's dir by (strategy, world size it ran at), from its outcome.json."""
        found = {}
        for path in sorted(self.sweep_dir.glob("*/outcome.json")):
            outcome = json.loads(path.read_text())
            found[(outcome["strategy"], int(outcome["world_size"]))] = path.parent
        return found

    def job_dir(self, strategy: str, world_size: int = 2) -> Path:
        return self.job_dirs[(strategy, world_size)]

    def outcome(self, strategy: str, world_size: int = 2) -> dict:
        """The job's outcome.json (status, tags, metrics)."""
        return json.loads((self.job_dir(strategy, world_size) / "outcome.json").read_text())

    def result(self, strategy: str, world_size: int = 2) -> dict:
        """The job's result.json (what its ranks measured)."""
        return json.loads((self.job_dir(strategy, world_size) / "result.json").read_text())

    def child(self, strategy: str, world_size: int = 2):
        """The job's child run, read back with MLflow's client."""
        run_id = self.outcome(strategy, world_size)["run_id"]
        return next(r for r in self.children if r.info.run_id == run_id)

    def copy_store(self, dest: Path) -> str:
        """A copy of this sweep's store in `dest` (its artifacts stay where the runs logged
        them); returns its tracking URI, for a test that writes runs or tags."""
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.root / "mlflow.db", dest / "mlflow.db")
        return f"sqlite:///{dest}/mlflow.db"


def run_sweep(root: Path, args: list[str], env: dict[str, str] | None = None) -> Sweep:
    """`python run.py -m <args>` into root's store; fails the fixture unless run.py exits 0."""
    sweep = Sweep(root=root, args=tuple(args), stdout="")
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), "-m", *args, f"hydra.sweep.dir={root}/sweep"],
        cwd=root,
        env={**sweep.env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return Sweep(root=root, args=tuple(args), stdout=proc.stdout)


_SESSION: dict[str, Sweep] = {}
SWEEPS = {"readme": README_ARGS, "grid": GRID_ARGS, "inference": INFERENCE_ARGS}
KEEP_ENV = "DISTBENCH_TEST_SWEEPS_DIR"


def shared_sweep(name: str, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """The session's sweep `name` (a key of SWEEPS), run on first use."""
    if name not in _SESSION:
        kept = os.environ.get(KEEP_ENV)
        if kept:
            _SESSION[name] = kept_sweep(Path(kept) / name, SWEEPS[name])
        else:
            _SESSION[name] = run_sweep(tmp_path_factory.mktemp(f"{name}_sweep"), SWEEPS[name])
    return _SESSION[name]


def kept_sweep(root: Path, args: list[str]) -> Sweep:
    """The sweep kept in root by an earlier session with the same args, or a new one there."""
    marker = root / "shared_sweep.json"
    if marker.exists() and json.loads(marker.read_text())["args"] == args:
        return Sweep(root=root, args=tuple(args), stdout=json.loads(marker.read_text())["stdout"])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sweep = run_sweep(root, args)
    marker.write_text(json.dumps({"args": args, "stdout": sweep.stdout}))
    return sweep


def parents_and_children(uri: str, experiment: str = "distbench") -> tuple[list, list]:
    """The experiment's runs read back with MLflow's own client: (sweep parents, child runs)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]
