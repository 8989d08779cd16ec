"""Shared fixtures: compose configs exactly as run.py does (Hydra compose API), GPU skips, and
the real runs several tests share (one of each per pytest session): DeepSpeed's compiled CPU op
and the sweeps of tests/e2e/shared_sweeps.py.

pytest -m unit          # fast layer only
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import psutil
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from distbench.compose.schema import register_configs
from distbench.launch.build_locks import with_environment_ninja

PROJECT_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_DIR / "conf"
os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))  # as run.py: experiments/ on the path
# The product's default, hardware.time_source=auto, times each new model shape on this machine
# (~10-20 s here) and makes predictions depend on this host's speed: the suite predicts with
# the efficiency model unless a test asks for measured parts (tests/unit/test_time_source.py
# runs the default itself).
os.environ["DISTBENCH_TIME_SOURCE"] = "efficiency"
register_configs()


# The layers whose tests start real ranks (tests/<layer>/)
RANK_LAYERS = ("distributed", "e2e", "gpu")
SHARED_SWEEPS = ("readme_sweep", "grid_sweep", "inference_sweep")


def xdist_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group a test runs in under `make test` (pytest -n 2 --dist loadgroup):
    one worker runs a group's tests one after another. The unit layer's tests are in none (each
    goes to whichever worker is free). The rank layers' are grouped by what they share: the
    session's shared sweeps (built once, on one worker), the SLURM cluster (one per session),
    the GPUs (one test at a time on them), else their module (its module-scoped fixtures, a
    real sweep some of them, built once). Two workers on 2 cores run two tests at once: the one
    rank-layer job's single-threaded phases (start-up, imports, logging: ~30 % of its time
    here) leave a core to the other test."""
    layer = item.path.parent.name
    if layer not in RANK_LAYERS:
        return None
    if layer == "gpu":
        return "gpu"
    if any(name in item.fixturenames for name in SHARED_SWEEPS):
        return "shared_sweeps"
    if "slurm_cluster" in item.fixturenames:
        return "slurm"
    return item.module.__name__


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist names each test's group in its node id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config: pytest.Config) -> None:
    """pytest 9.2's structured node ids undo pytest-xdist's `--dist loadgroup` in silence (its
    groups are lost: pytest-dev/pytest-xdist#1386; each worker would build the shared sweeps
    again): one line before anything runs."""
    version = tuple(int(part) for part in pytest.__version__.split(".")[:2])
    if getattr(config.option, "dist", "no") == "loadgroup" and version >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} drops pytest-xdist's --dist loadgroup groups "
            "(pytest-dev/pytest-xdist#1386): install pytest<9.2 (pyproject.toml's dev extra)"
        )


def _rank_extensions_dir() -> str:
    """Where the ranks keep DeepSpeed's compiled ops (launch.workers.worker_env's choice)."""
    from distbench.launch.workers import worker_env

    return worker_env("cpu", 1, 1)["TORCH_EXTENSIONS_DIR"]


# One compiled-op cache for the whole session: the ranks' and any DeepSpeed code a test runs in
# this process (torch's own default would be a second dir, and a second ~1 min build).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", _rank_extensions_dir())
# ...built with the ninja the ranks use (launch.build_locks.with_environment_ninja)
os.environ["PATH"] = with_environment_ninja(os.environ)["PATH"]
BUILD_DEEPSPEED_OPS = (
    "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
)


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """The job config that `python run.py <overrides>` would get (hydra node removed)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides or [], return_hydra_config=False)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def config_options(group: str) -> list[str]:
    """The options of a config group: its YAML files under conf/, or for `workload` the names
    in the workload registry (each workload registers its option from its own folder)."""
    if group == "workload":
        from distbench import workloads

        return sorted(workloads.registry())
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def has_cuda_devices(count: int = 1) -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= count


def requires_gpus(count: int = 1):
    """Skip with a reason where fewer than `count` CUDA devices are present."""
    return pytest.mark.skipif(
        not has_cuda_devices(count), reason=f"needs {count} CUDA device(s); none found here"
    )


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line names `text` (a zombie has exited: only its parent's
    wait is missing)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(text in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def with_measured_parts(job, gemm_s: float, other_s: float, host_s: float, **more):
    """The job under time_source=measured with these parts (measured_parts) and `more`
    Measurements fields."""
    parts = measured_parts(gemm_s, other_s, host_s)
    return job.with_hardware(time_source="measured").with_measured(**parts, **more)


def measured_parts(gemm_s: float, other_s: float, host_s: float) -> dict:
    """Measurements fields (Job.measured) of a micro-batch's measured parts, as
    probes/step_parts.py measures them: 2000 kernels, an H100-like floor and bandwidth."""
    return dict(
        micro_batch_gemm_s=gemm_s,
        micro_batch_attention_s=0.01,
        micro_batch_other_s=other_s,
        micro_batch_host_s=host_s,
        kernels_per_micro_batch=2000,
        host_us_per_kernel=host_s / 2000 * 1e6,
        kernel_floor_us=2.0,
        measured_mem_bandwidth_gbps=3000.0,
    )


@pytest.fixture(scope="session")
def deepspeed_ops() -> None:
    """DeepSpeed's CPU communication op, compiled once per session (~1 min on 2 cores, then
    cached in TORCH_EXTENSIONS_DIR) before the first test that starts ranks: no test pays the
    build in its own time, and no test kills a rank mid-build (a memory cap, a fault), which
    would leave the build's lock behind and stall every later DeepSpeed rank. A failed build
    is a warning here; the DeepSpeed tests then fail with its error."""
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_DEEPSPEED_OPS],
        env=dict(os.environ, DS_ACCELERATOR="cpu"),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        warnings.warn(f"DeepSpeed's CPU op did not build: {proc.stderr[-2000:]}", stacklevel=1)


@pytest.fixture(scope="session")
def store_template(tmp_path_factory) -> Path:
    """An empty MLflow sqlite store (MLflow's schema and its Default experiment, no distbench
    experiment: run.py creates that with its artifact dir next to the copy), made once."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("store_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()  # MLflow's migrations
    return db


@pytest.fixture
def sqlite_store(store_template, tmp_path) -> str:
    """tmp_path/mlflow.db (the store of tests/e2e/test_sweep.py's run_py and runs_of) as a copy
    of the session's empty store; its URI. MLflow's migrations of a new sqlite store cost each
    test seconds (~4 s here); run.py creating one itself is the README sweep's and
    test_survive's two sweeps at once against one fresh store."""
    shutil.copy(store_template, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db"


def _shared(name: str, tmp_path_factory: pytest.TempPathFactory, store: Path | None = None):
    from tests.e2e.shared_sweeps import shared_sweep

    return shared_sweep(name, tmp_path_factory, store)


@pytest.fixture(scope="session")
def readme_sweep(deepspeed_ops, tmp_path_factory):
    """The README's sweep (dp, tp, zero3 at world sizes 2 and 4), run once per session."""
    return _shared("readme", tmp_path_factory)


@pytest.fixture(scope="session")
def grid_sweep(deepspeed_ops, tmp_path_factory, store_template):
    """The other training strategies at world_size=2 (tests/e2e/shared_sweeps.py), once, into
    a copy of the empty store (run.py creating the store: the README sweep's)."""
    return _shared("grid", tmp_path_factory, store_template)


@pytest.fixture(scope="session")
def inference_sweep(deepspeed_ops, tmp_path_factory, store_template):
    """workload=inference on dp and tp, 2 ranks, run once per session (a copy of the empty
    store, as the grid's)."""
    return _shared("inference", tmp_path_factory, store_template)
