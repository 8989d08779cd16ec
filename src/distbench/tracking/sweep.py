"""MLflow: one parent run per sweep (a Hydra callback), one child run per job.

The orchestrator is MLflow's only writer. The store is created once, before any job starts
(concurrent first use of a fresh sqlite store corrupts it). Params are the flattened resolved
config; tags name the layout and the software versions; a failed job is a FAILED run with
`failure_kind` and `failure_reason`.

    python run.py -m strategy=dp,zero3     # parent + 2 children in ./mlflow.db
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from distbench.compose.schema import TrackingConfig
from distbench.sweep_lock import hold_sweep_dir_or_exit
from distbench.tracking.dashboard import fit_view_axes, log_sweep_view, training_url
from distbench.tracking.mlflow_store import client, ensure_experiment, retry, ui_url
from distbench.tracking.parent import log_summary, varied_params
from distbench.tracking.secrets_mask import mask_override, mask_text
from distbench.tracking.spool import SWEEP_DIR_TAG, sweep_owner_tags

PARENT_RUN_ENV = "DISTBENCH_PARENT_RUN_ID"
TRACKING_URI_ENV = "DISTBENCH_TRACKING_URI"
NUM_JOBS_ENV = "DISTBENCH_NUM_JOBS"
SWEPT_KEYS_ENV = "DISTBENCH_SWEPT_KEYS"  # the keys the sweep varies, comma-separated: run names
VERSIONED_PACKAGES = ("torch", "deepspeed", "transformers", "mlflow", "hydra-core")


def resolve_tracking_uri(tracking: TrackingConfig, launch_dir: Path) -> str | None:
    """Where runs go: None for tracking=none; the configured uri; else $MLFLOW_TRACKING_URI as
    every MLflow tool honours it; else the embedded sqlite:///<launch dir>/mlflow.db."""
    if tracking.backend == "none":
        return None
    if tracking.uri:
        return str(tracking.uri)
    from_env = os.environ.get(TRACKING_URI_ENV) or os.environ.get("MLFLOW_TRACKING_URI")
    return from_env or f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"


def software_tags(project_dir: Path) -> dict[str, str]:
    """git_sha of the checkout (with -dirty when it has changes) and package versions."""
    tags = {}
    for package in VERSIONED_PACKAGES:
        try:
            tags[f"{package.replace('-', '_')}_version"] = metadata.version(package)
        except metadata.PackageNotFoundError:
            tags[f"{package.replace('-', '_')}_version"] = "absent"
    describe = ("describe", "--always", "--dirty", "--abbrev=12")
    tags["git_sha"] = git_output(project_dir, *describe) or "unknown"
    return tags


def git_output(project_dir: Path, *args: str) -> str | None:
    """`git -C project_dir ARGS`'s stdout, stripped; None outside a checkout or without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(project_dir), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    return out or None


def git_commit(project_dir: Path) -> str | None:
    """The checkout's full commit hash, or None outside a git checkout."""
    return git_output(project_dir, "rev-parse", "HEAD")


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def project_root() -> Path:
    """distbench's checkout (run.py sets $DISTBENCH_HOME), else the working directory."""
    return Path(os.environ.get("DISTBENCH_HOME") or Path.cwd())


def reserved_tags(project_dir: Path) -> dict[str, str]:
    """MLflow's own tags, so its UI shows Source, Created by and Git commit: the entry point
    (run.py), LOCAL as the source type, the user, and the commit when in a git checkout."""
    tags = {
        "mlflow.source.name": str((project_dir / "run.py").resolve()),
        "mlflow.source.type": "LOCAL",
        "mlflow.user": current_user(),
    }
    commit = git_commit(project_dir)
    if commit:
        tags["mlflow.source.git.commit"] = commit
    return tags


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


def trial_budget(hydra_cfg: Any) -> int | None:
    """A sampling sweeper's trial budget (Optuna's `n_trials`: its choices and ranges are drawn
    from, not expanded); None for a grid sweep."""
    n_trials = hydra_cfg.sweeper.get("n_trials")
    return None if n_trials is None else int(n_trials)


def sweeper_params(hydra_cfg: Any) -> dict[str, Any]:
    """The sweeper's `params` (a grid or search space set in config, not on the command line)."""
    return dict(hydra_cfg.sweeper.get("params") or {})


def num_sweep_jobs(hydra_cfg: Any, task_overrides: list[str]) -> int | None:
    """How many jobs the sweep will run: a sampling sweeper's trial budget, else the grid's
    size."""
    budget = trial_budget(hydra_cfg)
    if budget is not None:
        return budget
    return count_sweep_jobs(task_overrides, sweeper_params(hydra_cfg))


def require_writable(output_dir: Path) -> None:
    """Exit with one line (no traceback) when the output dir cannot be created or written."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".distbench_write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        print(
            f"distbench: cannot write the output dir {output_dir}: {exc.strerror}; "
            "set hydra.run.dir= / hydra.sweep.dir= to a writable path",
            file=sys.stderr,
        )
        sys.exit(2)


class SweepCallback(Callback):
    """Opens the sweep's parent run before any job and closes it after the last one (FINISHED,
    tagged with how many jobs failed; KILLED if the sweep itself died), then prints the
    comparison table with the URL of the sweep's runs in the MLflow UI."""

    def __init__(self) -> None:
        self.parent_run_id: str | None = None
        self.tracking_uri: str | None = None
        self.experiment_id: str | None = None
        self.num_jobs: int | None = None
        self.view_key: str | None = None  # the sweep's shared view (tracking/dashboard.py)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        require_writable(Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        require_writable(Path(config.hydra.sweep.dir))
        hold_sweep_dir_or_exit(Path(config.hydra.sweep.dir))  # one sweep per dir
        hydra_cfg = config.hydra  # HydraConfig.get() is not set yet in the launching process
        # As typed: an override may hold ${...} that only a job resolves (or fails to).
        overrides = OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)
        num_jobs = num_sweep_jobs(hydra_cfg, overrides)
        if num_jobs:
            os.environ[NUM_JOBS_ENV] = str(num_jobs)
        swept: dict[str, str] = {}  # the swept keys and their values as typed, secrets masked
        with contextlib.suppress(Exception):  # unparseable: run names show no swept values
            masked = [mask_override(str(o)) for o in overrides]
            swept = varied_params(masked, sweeper_params(hydra_cfg))
        os.environ[SWEPT_KEYS_ENV] = ",".join(swept)
        uri = resolve_tracking_uri(config.tracking, Path.cwd())
        if uri is None:
            return
        sweep_dir = str(Path(hydra_cfg.sweep.dir).resolve())
        try:
            experiment_id = ensure_experiment(uri, config.tracking.experiment_name)
            tags = {
                SWEEP_DIR_TAG: sweep_dir,
                **sweep_owner_tags(),  # `sync` ends the parent KILLED once this process is gone
                "num_jobs": str(num_jobs),
                "overrides": " ".join(mask_override(str(o)) for o in overrides),
            }
            tags.update(software_tags(project_root()))
            tags.update(reserved_tags(project_root()))
            mlflow = client(uri)
            run = retry(
                lambda: mlflow.create_run(
                    experiment_id, run_name=f"sweep-{Path(sweep_dir).name}", tags=tags
                ),
                tracking_uri=uri,
            )
            self._log_swept(uri, run.info.run_id, swept)
            self.view_key = self._log_view(uri, experiment_id, run, swept, config)
        except Exception as exc:  # tracking must never take the sweep down
            why = mask_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            print(
                f"distbench: MLflow unavailable at {mask_text(uri)}: {why[:500]}; runs are "
                f"spooled in the sweep dir (upload later with: distbench sync {sweep_dir})"
            )
            return
        self.tracking_uri, self.parent_run_id = uri, run.info.run_id
        self.experiment_id, self.num_jobs = experiment_id, num_jobs
        os.environ[PARENT_RUN_ENV] = self.parent_run_id
        os.environ[TRACKING_URI_ENV] = uri
        atexit.register(self._close_parent_at_exit)
        url = training_url(ui_url(uri, experiment_id, config.tracking.ui_port), self.view_key)
        print(f"distbench: the sweep's runs, live in MLflow: {url}", flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from distbench.tools.summary import load_outcomes, print_summary
        from distbench.tracking.job_outcomes import with_unwritten

        sweep_dir = Path(config.hydra.sweep.dir)
        outcomes = with_unwritten(load_outcomes(sweep_dir), sweep_dir)  # + unwritable dirs'
        spooled = sum("tracking_error" in o for o in outcomes)
        url = None
        if self.parent_run_id is not None:
            with contextlib.suppress(Exception):  # its chart's axes: those the runs have
                fit_view_axes(self.tracking_uri, self.experiment_id, self.parent_run_id)
            with contextlib.suppress(Exception):  # the table below must print regardless
                runs_url = ui_url(self.tracking_uri, self.experiment_id, config.tracking.ui_port)
                url = training_url(runs_url, self.view_key)  # the training view, its children
                log_summary(self.tracking_uri, self.parent_run_id, outcomes, self.num_jobs)
                self._close_parent("FINISHED")
        print_summary(outcomes, title=f"distbench sweep {sweep_dir}", mlflow_url=url)
        if spooled:
            print(
                f"distbench: {spooled} run(s) could not be logged to MLflow; they are spooled "
                f"in their job dirs: distbench sync {sweep_dir.resolve()}"
            )
        os.environ.pop(PARENT_RUN_ENV, None)
        os.environ.pop(SWEPT_KEYS_ENV, None)

    @staticmethod
    def _log_swept(uri: str, run_id: str, swept: dict[str, str]) -> None:
        """The swept keys as the parent's params (a failure leaves the parent without them)."""
        from mlflow.entities import Param

        with contextlib.suppress(Exception):
            batch = [Param(k, mask_text(v)[:6000]) for k, v in sorted(swept.items())][:100]
            retry(lambda: client(uri).log_batch(run_id, params=batch), tracking_uri=uri)

    @staticmethod
    def _log_view(
        uri: str, experiment_id: str, run: Any, swept: dict[str, str], config: DictConfig
    ) -> str | None:
        """The sweep's shared view on its experiment (None when it cannot be stored)."""
        with contextlib.suppress(Exception):
            name = run.info.run_name
            return log_sweep_view(uri, experiment_id, run.info.run_id, name, swept, config)
        return None

    def _close_parent_at_exit(self) -> None:
        """The sweep died before on_multirun_end: mark its parent KILLED, quietly."""
        with contextlib.suppress(Exception):
            self._close_parent("KILLED")

    def _close_parent(self, status: str) -> None:
        if self.parent_run_id is None:
            return
        parent_run_id, self.parent_run_id = self.parent_run_id, None
        mlflow = client(self.tracking_uri)
        retry(lambda: mlflow.set_terminated(parent_run_id, status), tracking_uri=self.tracking_uri)
