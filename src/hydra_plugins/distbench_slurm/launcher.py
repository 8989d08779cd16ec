"""`hydra/launcher=slurm`: Hydra's submitit SLURM launcher with distbench's guarantees.

Every job of the sweep becomes a task of one SLURM job array (conf/hydra/launcher/slurm.yaml
sets partition, nodes, GPUs, CPUs and memory per task, time limit, account/qos and the array's
parallelism). Differences from `submitit_slurm`:
- one orchestrator per job: with `nodes > 1` submitit runs the job on every node; only the task
  with SLURM_PROCID 0 orchestrates (its srun starts one torchrun agent per node), so only one
  process per job writes to MLflow;
- a job the scheduler ends (scancel, time limit, node failure) is recorded as a FAILED child run
  with its failure kind (launch/slurm_state.py) and the sweep goes on; the stock launcher raises
  on the first such job and the sweep's parent run is never closed.

    python run.py -m hydra/launcher=slurm hydra.launcher.partition=gpu strategy=dp,zero3
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

try:  # the `slurm` extra (pip install -e '.[slurm]')
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:  # without it hydra/launcher=slurm does not compose (no submitit_slurm); this
    # module must import all the same: Hydra imports every plugin module on every run, and warns
    BaseQueueConf, SlurmLauncher = None, object

log = logging.getLogger(__name__)


POLL_S = 2.0
# A job that left the queue but whose result file has not appeared yet: how long to wait for
# the file (shared filesystems lag) before calling the job ended without one.
RESULT_GRACE_S = 30.0


def wait_for(job: Any) -> tuple[str, str] | None:
    """Wait until the job has a result (None) or SLURM says it ended without one: then its
    (state, reason). submitit alone cannot tell: without SLURM accounting (sacct) it never
    sees a cancelled or killed job end and waits forever, so squeue and scontrol are asked."""
    from distbench.launch.slurm_state import queued_state, slurm_job_state

    job_id, last_queued, left_at = str(job.job_id), "", None
    while not job.done():
        queued = queued_state(job_id)
        if queued:
            last_queued, left_at = queued, None
        else:
            left_at = left_at or time.monotonic()
            state, reason = slurm_job_state(job_id)
            never_started = last_queued == "PENDING" or not job.paths.stdout.exists()
            if not state and never_started:  # taken out of the queue before it started
                state, reason = "CANCELLED", "removed from the queue while pending"
            ended = state and not state.startswith("COMPLETED")
            if ended or time.monotonic() - left_at > RESULT_GRACE_S:
                return None if job.done(force_check=True) else (state, reason)
        time.sleep(POLL_S)
    return None


class DistbenchSlurmLauncher(SlurmLauncher):
    """Submit the sweep as a job array; record scheduler-ended jobs instead of raising."""

    def __call__(
        self,
        sweep_overrides: list[str],
        job_dir_key: str,
        job_num: int,
        job_id: str,
        singleton_state: dict[type, Singleton],
    ) -> JobReturn | None:
        if int(os.environ.get("SLURM_PROCID", "0")) != 0:
            return None  # another node of the job: task 0's srun starts the ranks here
        from distbench.orchestrator import SLURM_LAUNCHER_ENV

        os.environ[SLURM_LAUNCHER_ENV] = "1"  # a SIGTERM is SLURM's: recorded by launch()
        return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)

    def _executor(self) -> Any:
        """submitit's SLURM executor with this launcher's parameters (as the stock launcher)."""
        import submitit

        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR,
            folder=self.params["submitit_folder"],
            slurm_max_num_timeout=self.params.get("max_num_timeout", 0),
        )
        base_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                key if key in base_keys else f"{self._EXECUTOR}_{key}": value
                for key, value in self.params.items()
                if key not in init_keys
            }
        )
        return executor

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"distbench SLURM sweep: {len(job_overrides)} job(s), output dir {sweep_dir}")
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            state = Singleton.get_state()
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", state))
        jobs = self._executor().map_array(self, *zip(*job_params, strict=True))
        for idx, job in enumerate(jobs, start=initial_job_idx):
            print(f"distbench: job {idx + 1}/{len(jobs)} is SLURM job {job.job_id}", flush=True)
        returns = []
        for idx, (overrides, job) in enumerate(zip(job_overrides, jobs, strict=True)):
            try:
                ended = wait_for(job)
                returns.append(job.results()[0] if ended is None else None)
            except Exception as exc:  # submitit's UncompletedJobError / FailedJobError
                ended = ("", f"submitit: {str(exc).splitlines()[0][:200]}")
            if ended is not None:
                returns.append(
                    self._record_ended_job(list(overrides), initial_job_idx + idx, job, ended)
                )
        return [ret for ret in returns if ret is not None]

    def _job_config(self, overrides: list[str], job_num: int) -> tuple[DictConfig, Path]:
        """The job's composed config (without `hydra`) and its output directory."""
        assert self.hydra_context is not None and self.config is not None
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.num = job_num
        job_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
        with read_write(sweep_config), open_dict(sweep_config):
            del sweep_config["hydra"]
        return sweep_config, job_dir

    @staticmethod
    def _upload_spooled(job_dir: Path) -> None:
        """Log the job's spooled run unless the store has it (exactly once, as distbench sync)."""
        from distbench.tracking.spool import PAYLOAD, sync_sweep
        from distbench.tracking.sweep import TRACKING_URI_ENV

        uri = os.environ.get(TRACKING_URI_ENV)
        if uri and (job_dir / PAYLOAD).exists():
            try:
                sync_sweep(job_dir, uri)
            except Exception as exc:  # the run stays spooled for `distbench sync`
                print(f"distbench: {job_dir}: upload failed ({type(exc).__name__}): {exc}")

    def _record_ended_job(
        self, overrides: list[str], job_num: int, job: Any, ended: tuple[str, str]
    ) -> JobReturn:
        """A job that ended without an outcome (cancelled, timed out, node lost): record it as
        a FAILED run unless the job recorded itself before it ended."""
        from distbench.launch.slurm_state import scheduler_failure, slurm_job_state
        from distbench.orchestrator import record_failure
        from distbench.tracking.sweep import project_root

        cfg, job_dir = self._job_config(overrides, job_num)
        done = job_dir / "outcome.json"
        if done.exists():  # it recorded itself; its MLflow run may not have landed before the end
            outcome = json.loads(done.read_text())
            self._upload_spooled(job_dir)
        else:
            state, slurm_reason = ended
            if not state:
                state, slurm_reason = slurm_job_state(str(job.job_id))
            kind, reason = scheduler_failure(state, slurm_reason or ended[1])
            failure = {
                "failure_kind": kind,
                "failure_reason": reason,
                "slurm_job_id": str(job.job_id),
            }
            project_dir = project_root()
            outcome = record_failure(cfg, job_dir, project_dir, failure, f"job {job_num + 1}")
        return JobReturn(
            overrides=overrides, status=JobStatus.COMPLETED, _return_value=outcome, cfg=cfg
        )
