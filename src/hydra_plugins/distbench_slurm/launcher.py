"""`hydra/launcher=slurm`: Hydra's submitit SLURM launcher with distbench's guarantees.

Every job of the sweep becomes a task of one SLURM job array (conf/hydra/launcher/slurm.yaml
sets partition, nodes, GPUs, CPUs and memory per task, time limit, account/qos and the array's
parallelism). Differences from `submitit_slurm`:
- one orchestrator per job: with `nodes > 1` submitit runs the job on every node; only the task
  with SLURM_PROCID 0 orchestrates (its srun starts one torchrun agent per node), so only one
  process per job writes to MLflow;
- a job the scheduler ends (scancel, time limit, node failure) is recorded as a FAILED child run
  with its failure kind (launch/slurm_state.py) and the sweep goes on; the stock launcher raises
  on the first such job and the sweep's parent run is never closed;
- a sweep SLURM does not take (no reachable controller, sbatch missing, a partition it refuses)
  is one line and exit 1, not a traceback; no job ran, and the sweep's parent run is ended
  FAILED with the reason (`failure_reason`), not left to read as a sweep killed midway;
- the jobs of a sweep never share a node (`exclusive: true`, sbatch --exclusive): two timings
  on one node's cores or devices would each be the other's noise. `hydra.launcher.exclusive=
  false` lets SLURM pack them (array_parallelism still bounds how many run at once);
- the console shows each job's state changes, one line each (squeue, then how it ended), and
  not submitit's "Bypassing sacct error" warnings (without SLURM accounting, one per poll).

    python run.py -m hydra/launcher=slurm hydra.launcher.partition=gpu strategy=dp,zero3
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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

if BaseQueueConf is not None:  # hydra/launcher=slurm's schema: the stock one, and `exclusive`
    from hydra.core.config_store import ConfigStore
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    # Built with real types, not a class statement: Hydra's plugin scan runs this module outside
    # sys.modules, where @dataclass cannot resolve this file's postponed (string) annotations.
    DistbenchSlurmQueueConf = dataclasses.make_dataclass(
        "DistbenchSlurmQueueConf",
        [
            ("_target_", str, "hydra_plugins.distbench_slurm.launcher.DistbenchSlurmLauncher"),
            ("exclusive", bool, True),  # sbatch --exclusive: no two jobs of the sweep on one node
        ],
        bases=(SlurmQueueConf,),
    )
    ConfigStore.instance().store(
        group="hydra/launcher",
        name="distbench_slurm_schema",
        node=DistbenchSlurmQueueConf,
        provider="distbench",
    )
    from submitit.slurm.slurm import SlurmInfoWatcher

    class QuietSacctWatcher(SlurmInfoWatcher):
        """submitit's sacct poll with sacct's stderr discarded: a cluster without accounting
        answers every poll with "Slurm accounting storage is disabled" on the console."""

        def _make_command(self) -> list[str] | None:
            return quiet_command(super()._make_command())


SACCT_NOISE = "Bypassing sacct error"


class QuietSacct(logging.Filter):
    """Drops submitit's "Bypassing sacct error" warning: without SLURM accounting it comes on
    every poll (three times, through Hydra's handlers too); wait_for asks squeue and scontrol."""

    def filter(self, record: logging.LogRecord) -> bool:
        return SACCT_NOISE not in record.getMessage()


def quiet_sacct() -> None:
    """Install QuietSacct on submitit's logger and QuietSacctWatcher as its jobs' watcher (once,
    before the jobs are submitted: they register with it)."""
    logger = logging.getLogger("submitit")
    if not any(isinstance(f, QuietSacct) for f in logger.filters):
        logger.addFilter(QuietSacct())
    from submitit.slurm.slurm import SlurmJob

    if not isinstance(SlurmJob.watcher, QuietSacctWatcher):
        SlurmJob.watcher = QuietSacctWatcher(delay_s=600)  # submitit's own delay


def quiet_command(command: list[str] | None) -> list[str] | None:
    """A command run through sh with its stderr discarded and its exit status kept."""
    return None if command is None else ["sh", "-c", 'exec "$0" "$@" 2>/dev/null', *command]


def parse_squeue_states(text: str) -> dict[str, str]:
    """`squeue -h -r -o "%i %T"` output → {job id (array task: 12_0): state}."""
    states = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            states[fields[0]] = fields[1]
    return states


def change_lines(
    labels: Mapping[str, str], before: Mapping[str, str], now: Mapping[str, str]
) -> list[str]:
    """One line per job whose state changed: `distbench: job 2/4 (SLURM 12_1): PENDING ->
    RUNNING` (its first state alone)."""
    lines = []
    for job_id, label in labels.items():
        state = now.get(job_id)
        if state and state != before.get(job_id):
            was = before.get(job_id)
            change = f"{was} -> {state}" if was else state
            lines.append(f"distbench: {label} (SLURM {job_id}): {change}")
    return lines


class JobStates:
    """The sweep's jobs' states as last printed; poll() prints what changed: squeue's state while
    a job is queued, then how it ended (scontrol's state) once it has left the queue. (A plain
    class: Hydra's plugin scan runs this module where @dataclass cannot read its annotations.)"""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels  # SLURM job id -> `job 2/4`
        self.states: dict[str, str] = {}
        self.ended: set[str] = set()

    @classmethod
    def of(cls, jobs: Sequence[Any], first_idx: int) -> JobStates:
        n = len(jobs)  # as the launcher's "job k/n is SLURM job ..." lines count them
        return cls({str(j.job_id): f"job {first_idx + i + 1}/{n}" for i, j in enumerate(jobs)})

    def poll(self) -> None:
        """Print the changes since the last poll; never raises (a line missed, not a job)."""
        with contextlib.suppress(Exception):
            self._poll()

    def _poll(self) -> None:
        from distbench.launch.slurm_state import slurm_job_state

        now = dict(self.states)
        queued = queued_states(self.labels)
        for job_id in self.labels:
            if job_id in queued:
                now[job_id] = queued[job_id]
            elif job_id in self.states and job_id not in self.ended:  # it left the queue
                self.ended.add(job_id)
                state = slurm_job_state(job_id)[0]  # "CANCELLED by 0" -> CANCELLED
                now[job_id] = state.split()[0] if state else "ENDED"
        for line in change_lines(self.labels, self.states, now):
            print(line, flush=True)
        self.states = now


def queued_states(job_ids: Iterable[str]) -> dict[str, str]:
    """squeue's state of each job still queued (one call for the sweep's arrays)."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", ",".join(arrays), "-o", "%i %T"],
        capture_output=True,
        text=True,
        check=False,
    )
    return parse_squeue_states(out.stdout) if out.returncode == 0 else {}


POLL_S = 2.0
# A job that left the queue but whose result file has not appeared yet: how long to wait for
# the file (shared filesystems lag) before calling the job ended without one.
RESULT_GRACE_S = 30.0


def wait_for(job: Any, on_poll: Callable[[], None] | None = None) -> tuple[str, str] | None:
    """Wait until the job has a result (None) or SLURM says it ended without one: then its
    (state, reason). submitit alone cannot tell: without SLURM accounting (sacct) it never
    sees a cancelled or killed job end and waits forever, so squeue and scontrol are asked.
    `on_poll` is called at each poll (the sweep's state lines)."""
    from distbench.launch.slurm_state import queued_state, slurm_job_state

    job_id, last_queued, left_at = str(job.job_id), "", None
    while not job.done():
        if on_poll is not None:
            on_poll()
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


def exclusive_parameters(exclusive: Any) -> dict[str, Any]:
    """submitit's parameter for `exclusive`: sbatch --exclusive when true, nothing when false
    (submitit would write `--exclusive=False`)."""
    return {"slurm_exclusive": True} if exclusive else {}


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
        """submitit's SLURM executor with this launcher's parameters (as the stock launcher),
        whole nodes per job unless `exclusive: false`."""
        import submitit

        init_keys = {"submitit_folder", "max_num_timeout", "exclusive"}
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
            },
            **exclusive_parameters(self.params.get("exclusive", True)),
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
        quiet_sacct()
        jobs = self._submit(job_params)
        for idx, job in enumerate(jobs, start=initial_job_idx):
            print(f"distbench: job {idx + 1}/{len(jobs)} is SLURM job {job.job_id}", flush=True)
        states = JobStates.of(jobs, initial_job_idx)
        returns = []
        for idx, (overrides, job) in enumerate(zip(job_overrides, jobs, strict=True)):
            try:
                ended = wait_for(job, on_poll=states.poll)
                returns.append(job.results()[0] if ended is None else None)
            except Exception as exc:  # submitit's UncompletedJobError / FailedJobError
                ended = ("", f"submitit: {str(exc).splitlines()[0][:200]}")
            if ended is not None:
                returns.append(
                    self._record_ended_job(list(overrides), initial_job_idx + idx, job, ended)
                )
        states.poll()  # the last jobs' ends: a line each
        return [ret for ret in returns if ret is not None]

    def _submit(self, job_params: list[tuple]) -> list[Any]:
        """The sweep's jobs as one SLURM job array; when sbatch refuses it, one line on stderr,
        the parent run ended FAILED with the reason, and exit 1 (nothing was submitted)."""
        said = io.StringIO()  # submitit prints sbatch's stderr before it raises: said once, below
        try:
            with contextlib.redirect_stderr(said):
                jobs = self._executor().map_array(self, *zip(*job_params, strict=True))
        except Exception as exc:  # submitit's FailedJobError (sbatch's stderr), no sbatch at all
            lines = [ln.strip() for ln in (str(exc) or said.getvalue()).splitlines() if ln.strip()]
            why = next((ln for ln in lines if "fatal" in ln), None)  # sbatch's own verdict
            why = (why or (lines[-1] if lines else type(exc).__name__))[:300]
            reason = f"SLURM did not take the sweep ({why}); no job was submitted"
            self._end_parent_failed(reason)
            print(
                f"distbench: {reason}: is slurmctld up and reachable (scontrol ping, $SLURM_CONF)?",
                file=sys.stderr,
            )
            sys.exit(1)
        sys.stderr.write(said.getvalue())
        return jobs

    def _end_parent_failed(self, reason: str) -> None:
        """End the sweep's parent run (opened by tracking.sweep.SweepCallback) FAILED, tagged
        with the reason and the summary of a sweep that ran nothing; its exit hook, which would
        end it KILLED, is told the run is closed."""
        from mlflow.entities import RunTag

        from distbench.tracking.mlflow_store import client, retry
        from distbench.tracking.parent import log_summary
        from distbench.tracking.sweep import SweepCallback

        callbacks = self.hydra_context.callbacks.callbacks if self.hydra_context else []
        sweep = next((c for c in callbacks if isinstance(c, SweepCallback)), None)
        if sweep is None or sweep.parent_run_id is None or sweep.tracking_uri is None:
            return
        run_id, uri = sweep.parent_run_id, sweep.tracking_uri
        sweep.parent_run_id = None  # closed here: not KILLED at exit
        with contextlib.suppress(Exception):  # the one line is said regardless
            mlflow = client(uri)
            log_summary(uri, run_id, [], sweep.num_jobs)
            tags = [RunTag("failure_reason", reason)]
            retry(lambda: mlflow.log_batch(run_id, tags=tags), tracking_uri=uri)
            retry(lambda: mlflow.set_terminated(run_id, "FAILED"), tracking_uri=uri)

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
        from distbench.tracking.job_outcomes import restore_spooled_outcomes
        from distbench.tracking.sweep import project_root

        cfg, job_dir = self._job_config(overrides, job_num)
        restore_spooled_outcomes(job_dir)  # ended between spooling its run and its outcome.json
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
