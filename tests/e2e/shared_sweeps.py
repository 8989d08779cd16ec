"""Real sweeps that several test modules assert on: each runs once per pytest session through
`python run.py -m ...` (real torchrun ranks, a real sqlite MLflow store read back with MLflow's
client) and is shared through the session fixtures of tests/conftest.py:

- `readme_sweep`: the README's sweep, `strategy=dp,tp,zero3 world_size=2,4` (6 jobs; system
  metrics every second, the peak FLOP/s measured on this machine into the sweep's cache). The
  README, live-run, step-line, report, calibration, browser, compare and resume tests read it,
  and the strategy tests its dp, tp and zero3 jobs.
- `grid_sweep`: the other training strategies at world_size=2 (8 jobs: `single` runs on one
  rank as the baseline row; the torch engine's ddp, fsdp, torch_tp, torch_pp; DeepSpeed's
  both offloads and pp). With the README sweep's rows, each strategy runs once, and the
  engine, strategy and equivalence tests read them; zero1 and zero2 run in sweeps that other
  tests pay for anyway (tests/e2e/test_hydra_conventions_sweeper.py's trained job is zero1,
  tests/e2e/test_optuna_search.py's trials zero2), where their equivalence is checked.
- `inference_sweep`: workload=inference on dp and tp, 2 ranks (the inference tests of both
  layers, and the rerun tests' earlier attempt).

A test that writes to a store (resume, compare, another sweep) works on `copy_store()`, so what
the others read does not depend on the order tests run in. The three sweeps share one probes'
cache (DISTBENCH_CACHE_DIR: the README sweep's measured peak, and the single-device reference
losses of the equivalence check, ~10 s per model shape: computed once for all three), and it
exchanges its reference losses with the cache the session's other jobs read, both ways (a
shape any job of the session ran is not computed again). The grid and inference sweeps log
into a copy of an empty store (tests/conftest.py's `store_template`); the README sweep's run.py
creates its store, as a user's first sweep does.

    def test_something(readme_sweep):
        outcome = readme_sweep.outcome("zero3", 4)        # the job's outcome.json

While working on the tests, DISTBENCH_TEST_SWEEPS_DIR=<dir> keeps the sweeps there and reuses
them in later sessions (a sweep reruns when its arguments change; delete the dir after changing
the code they run):

    DISTBENCH_TEST_SWEEPS_DIR=/tmp/sweeps pytest tests/e2e/test_report.py
"""

from __future__ import annotations

import dataclasses
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
    cache_dir: Path  # the probes' cache it ran with, shared by the session's sweeps

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.root}/mlflow.db"

    @property
    def sweep_dir(self) -> Path:
        return self.root / "sweep"

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


def run_sweep(
    root: Path, args: list[str], cache_dir: Path, store_template: Path | None = None
) -> Sweep:
    """`python run.py -m <args>` into root's store with the probes' cache `cache_dir`; fails the
    fixture unless run.py exits 0. With `store_template` (an empty store), the store is a copy
    of it; without, run.py creates it, as a user's first sweep does."""
    sweep = Sweep(root=root, args=tuple(args), stdout="", cache_dir=cache_dir)
    if store_template is not None:
        shutil.copy(store_template, root / "mlflow.db")
    share_reference_losses(cache_dir)  # what the session's earlier jobs computed
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), "-m", *args, f"hydra.sweep.dir={root}/sweep"],
        cwd=root,
        env=sweep.env(),
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    share_reference_losses(cache_dir)
    return dataclasses.replace(sweep, stdout=proc.stdout)


def share_reference_losses(cache_dir: Path) -> None:
    """The single-device reference losses of the equivalence check, shared both ways between
    the sweeps' cache `cache_dir` and the probes' cache of this process's environment (the one
    the session's other jobs read): a job of a model shape that an earlier job ran reads its
    reference instead of computing it again (one forward pass of the unsplit model in a
    subprocess, ~10 s here). The losses are the same wherever they were computed: one per
    model, batch, dtype, seed and device type."""
    from distbench.probes import cache
    from distbench.workloads.train.equivalence import CACHE_FILE

    if cache.cache_dir().resolve() == cache_dir.resolve():
        return
    path = cache_dir / CACHE_FILE
    sweeps = json.loads(path.read_text()) if path.exists() else {}
    session = cache.read_cache(CACHE_FILE)
    for key, loss in sweeps.items():
        if key not in session:
            cache.store(CACHE_FILE, key, loss)
    if set(session) - set(sweeps):
        cache_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(sorted({**session, **sweeps}.items())), indent=2))


_SESSION: dict[str, Sweep] = {}
SWEEPS = {"readme": README_ARGS, "grid": GRID_ARGS, "inference": INFERENCE_ARGS}
KEEP_ENV = "DISTBENCH_TEST_SWEEPS_DIR"


def shared_sweep(
    name: str, tmp_path_factory: pytest.TempPathFactory, store_template: Path | None = None
) -> Sweep:
    """The session's sweep `name` (a key of SWEEPS), run on first use (into a copy of
    `store_template` when given)."""
    if name not in _SESSION:
        kept = os.environ.get(KEEP_ENV)
        if kept:
            _SESSION[name] = kept_sweep(Path(kept) / name, SWEEPS[name], Path(kept) / "cache")
        else:
            cache_dir = tmp_path_factory.getbasetemp() / "shared_sweeps_cache"
            root = tmp_path_factory.mktemp(f"{name}_sweep")
            _SESSION[name] = run_sweep(root, SWEEPS[name], cache_dir, store_template)
    return _SESSION[name]


def kept_sweep(root: Path, args: list[str], cache_dir: Path) -> Sweep:
    """The sweep kept in root by an earlier session with the same args, or a new one there."""
    marker = root / "shared_sweep.json"
    if marker.exists() and json.loads(marker.read_text())["args"] == args:
        stdout = json.loads(marker.read_text())["stdout"]
        share_reference_losses(cache_dir)
        return Sweep(root=root, args=tuple(args), stdout=stdout, cache_dir=cache_dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sweep = run_sweep(root, args, cache_dir)
    marker.write_text(json.dumps({"args": args, "stdout": sweep.stdout}))
    return sweep


def parents_and_children(uri: str, experiment: str = "distbench") -> tuple[list, list]:
    """The experiment's runs read back with MLflow's own client: (sweep parents, child runs)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]
