"""One Hydra job, as the README's path draws it (spine.run_job):

    resolve   refused.py   the composed config → a typed Job, or a Refused stand-in with its
                           one-line reason (recorded as failure_kind=invalid_config, never raised)
    resume    resume.py    skip a job whose signature already has a run (resume=true)
    prepare   distbench.prepare.prepare_job: what this machine measures (link fits, the
                           workload's prepare hook: train's step parts and engine probe)
    launch    launching.py resolved.yaml, the launch plan, the ranks under the watchdog
    measure   measuring.py result.json → the workload's metrics and tags, or the failure's kind
    record    recording.py the spooled MLflow run, outcome.json (outcome.py), then MLflow

naming.py names the job (tags, run name); signals.py turns SIGTERM, SIGHUP, Ctrl-C and SLURM's
end of a job into failure kinds. The orchestrator never joins a process group and takes nothing
of the composed config after resolve.

    python run.py strategy=zero3 world_size=2     # calls run_job() once
"""

from distbench.orchestrator.launching import MAX_RANKS_PER_CPU_CORE, device_shortfall
from distbench.orchestrator.naming import (
    NAME_TAGS,
    describe,
    job_position,
    run_name,
    strategy_name,
    sweep_naming,
    swept_values,
)
from distbench.orchestrator.outcome import JobContext, Outcome, new_outcome
from distbench.orchestrator.recording import (
    ARTIFACTS,
    TAGGED_OUTCOME_KEYS,
    logged_params,
    record,
    run_tags,
)
from distbench.orchestrator.refused import (
    Refused,
    config_error_line,
    refused_job,
    resolve,
    resolve_or_refuse,
)
from distbench.orchestrator.resume import adopt_previous_run, previous_run, resume_decision
from distbench.orchestrator.signals import (
    SLURM_LAUNCHER_ENV,
    JobCancelled,
    install_sigterm_handler,
    raise_on_sigterm,
    scheduler_ended,
    sigterm_cause,
)
from distbench.orchestrator.spine import precheck, record_failure, run_job

__all__ = [
    "ARTIFACTS",
    "MAX_RANKS_PER_CPU_CORE",
    "NAME_TAGS",
    "SLURM_LAUNCHER_ENV",
    "TAGGED_OUTCOME_KEYS",
    "JobCancelled",
    "JobContext",
    "Outcome",
    "Refused",
    "adopt_previous_run",
    "config_error_line",
    "describe",
    "device_shortfall",
    "install_sigterm_handler",
    "job_position",
    "logged_params",
    "new_outcome",
    "precheck",
    "previous_run",
    "raise_on_sigterm",
    "record",
    "record_failure",
    "refused_job",
    "resolve",
    "resolve_or_refuse",
    "resume_decision",
    "run_job",
    "run_name",
    "run_tags",
    "scheduler_ended",
    "sigterm_cause",
    "strategy_name",
    "sweep_naming",
    "swept_values",
]
