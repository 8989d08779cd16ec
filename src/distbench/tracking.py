"""MLflow: one parent run per sweep (a Hydra callback), one child run per job.

The orchestrator is MLflow's only writer. The store is created once, before any job starts
(concurrent first use of a fresh sqlite store corrupts it). Params are the flattened resolved
config; tags name the layout and the software versions; a failed job is a FAILED run with
`failure_kind` and `failure_reason`.

    python run.py -m strategy=dp,zero3     # parent + 2 children in ./mlflow.db
"""

from __future__ import annotations

import atexit
import os
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

PARENT_RUN_ENV = "DISTBENCH_PARENT_RUN_ID"
TRACKING_URI_ENV = "DISTBENCH_TRACKING_URI"
NUM_JOBS_ENV = "DISTBENCH_NUM_JOBS"
VERSIONED_PACKAGES = ("torch", "deepspeed", "transformers", "mlflow", "hydra-core")
MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
MAX_METRICS_PER_BATCH = 1000


def resolve_tracking_uri(tracking: Any, launch_dir: Path) -> str | None:
    """Where runs go: None for tracking=none; the configured uri; else $MLFLOW_TRACKING_URI as
    every MLflow tool honours it; else the embedded sqlite:///<launch dir>/mlflow.db."""
    if tracking.backend == "none":
        return None
    if tracking.uri:
        return str(tracking.uri)
    from_env = os.environ.get(TRACKING_URI_ENV) or os.environ.get("MLFLOW_TRACKING_URI")
    return from_env or f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"


def ui_url(tracking_uri: str, experiment_id: str, ui_port: int) -> str:
    """The MLflow UI page listing an experiment's runs (the bare experiment URL opens traces)."""
    base = (
        tracking_uri.rstrip("/")
        if tracking_uri.startswith(("http://", "https://"))
        else f"http://127.0.0.1:{ui_port}"
    )
    return f"{base}/#/experiments/{experiment_id}/runs"


def _artifact_location(tracking_uri: str) -> str | None:
    """Keep an embedded store's artifacts next to its database, whatever the cwd of later runs."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return None


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """The experiment's id, creating the store and the experiment on first use."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=_artifact_location(tracking_uri))


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts → {"a.b.c": "value"}; lists and None as their string form."""
    out: dict[str, str] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    out[prefix.rstrip(".")] = str(tree)
    return out


def software_tags(project_dir: Path) -> dict[str, str]:
    """git_sha of the checkout (with -dirty when it has changes) and package versions."""
    tags = {}
    for package in VERSIONED_PACKAGES:
        try:
            tags[f"{package.replace('-', '_')}_version"] = metadata.version(package)
        except metadata.PackageNotFoundError:
            tags[f"{package.replace('-', '_')}_version"] = "absent"
    try:
        sha = subprocess.run(
            ["git", "-C", str(project_dir), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        sha = "unknown"
    tags["git_sha"] = sha or "unknown"
    return tags


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def log_child_run(
    tracking_uri: str,
    experiment_id: str,
    run_name: str,
    params: dict[str, str],
    metrics: dict[str, float],
    tags: dict[str, str],
    artifacts: list[Path],
    failed: bool,
    parent_run_id: str | None = None,
) -> str:
    """Create one finished (or FAILED) run with everything in it; returns its id."""
    import time

    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    run_tags = dict(tags)
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, run_name=run_name, tags=run_tags)
    run_id = run.info.run_id
    try:
        now_ms = int(time.time() * 1000)
        param_list = [Param(k, v[:6000]) for k, v in sorted(params.items())]
        for chunk in _chunks(param_list, MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=chunk)
        metric_list = [Metric(k, float(v), now_ms, 0) for k, v in sorted(metrics.items())]
        for chunk in _chunks(metric_list, MAX_METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=chunk)
        for path in artifacts:
            if path.exists():
                client.log_artifact(run_id, str(path))
    except Exception:
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    status = RunStatus.FAILED if failed else RunStatus.FINISHED
    client.set_terminated(run_id, RunStatus.to_string(status))
    return run_id


def count_sweep_jobs(task_overrides: list[str], sweeper_params: dict[str, Any]) -> int | None:
    """How many jobs a basic sweep will run: the product of each swept key's choices."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    merged = {f"{k}={v}".split("=", 1)[0]: f"{k}={v}" for k, v in sweeper_params.items()}
    for override in task_overrides:
        merged[override.split("=", 1)[0]] = override
    try:
        parsed = OverridesParser.create().parse_overrides(list(merged.values()))
        num_jobs = 1
        for override in parsed:
            if override.is_sweep_override():
                num_jobs *= len(list(override.sweep_string_iterator()))
        return num_jobs
    except Exception:  # a sweep kind we cannot expand (glob, ...): progress shows no total
        return None


class SweepCallback(Callback):
    """Opens the sweep's parent run before any job and closes it after the last one (FINISHED,
    tagged with how many jobs failed; KILLED if the sweep itself died), then prints the
    comparison table with the URL of the sweep's runs in the MLflow UI."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.tracking_uri: str | None = None
        self.experiment_id: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra_cfg = config.hydra  # HydraConfig.get() is not set yet in the launching process
        num_jobs = count_sweep_jobs(
            list(hydra_cfg.overrides.task), dict(hydra_cfg.sweeper.get("params") or {})
        )
        if num_jobs:
            os.environ[NUM_JOBS_ENV] = str(num_jobs)
        uri = resolve_tracking_uri(config.tracking, Path.cwd())
        if uri is None:
            return
        try:
            from mlflow.tracking import MlflowClient

            experiment_id = ensure_experiment(uri, config.tracking.experiment_name)
            tags = {
                "distbench.sweep_dir": str(Path(hydra_cfg.sweep.dir).resolve()),
                "num_jobs": str(num_jobs),
                "overrides": " ".join(hydra_cfg.overrides.task),
            }
            tags.update(software_tags(Path.cwd()))
            run = MlflowClient(uri).create_run(
                experiment_id, run_name=f"sweep-{Path(hydra_cfg.sweep.dir).name}", tags=tags
            )
        except Exception as exc:  # tracking must never take the sweep down
            print(f"distbench: MLflow unavailable at {uri}: {exc}; results stay in the sweep dir")
            return
        self.tracking_uri, self.parent_run_id = uri, run.info.run_id
        self.experiment_id = experiment_id
        os.environ[PARENT_RUN_ENV] = self.parent_run_id
        os.environ[TRACKING_URI_ENV] = uri
        atexit.register(self._close_parent, "KILLED")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from distbench.summary import load_outcomes, print_summary

        sweep_dir = Path(config.hydra.sweep.dir)
        outcomes = load_outcomes(sweep_dir)
        num_failed = sum(o["status"] != "FINISHED" for o in outcomes)
        url = None
        if self.parent_run_id is not None:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(self.tracking_uri)
            client.set_tag(self.parent_run_id, "num_failed", str(num_failed))
            client.set_tag(self.parent_run_id, "num_finished", str(len(outcomes) - num_failed))
            url = ui_url(self.tracking_uri, self.experiment_id, config.tracking.ui_port)
            self._close_parent("FINISHED")
        print_summary(outcomes, title=f"distbench sweep {sweep_dir}", mlflow_url=url)
        os.environ.pop(PARENT_RUN_ENV, None)

    def _close_parent(self, status: str) -> None:
        if self.parent_run_id is None:
            return
        from mlflow.tracking import MlflowClient

        MlflowClient(self.tracking_uri).set_terminated(self.parent_run_id, status)
        self.parent_run_id = None
