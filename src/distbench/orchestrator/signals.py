"""What ended a job from outside: a SIGTERM (scancel, kill, a CI timeout) or a SIGHUP (its
terminal or ssh session closed) raised as JobCancelled in the orchestrator's main thread,
Ctrl-C, or SLURM itself (cancelled, its time limit, a lost node), each as a (failure_kind,
reason). run.py exits 128 + the signal's number (143, 129; 130 for Ctrl-C).

    python -c "from distbench.orchestrator.signals import sigterm_cause; \\
print(sigterm_cause('signal SIGTERM'))"
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

from distbench.launch.topology import SLURM_JOB_ENV, slurm_job_id

SCHEDULER_STATE_WAIT_S = 5.0
# Set by hydra/launcher=slurm in the job's process: a SIGTERM there comes from SLURM, whose final
# state (CANCELLED, TIMEOUT, PREEMPTED) is known only once the job has exited.
SLURM_LAUNCHER_ENV = "DISTBENCH_SLURM_LAUNCHER"


# Signals that stop the job and the sweep as `cancelled` (Python's default for each would exit
# without running atexit, leaving the sweep's parent RUNNING).
CANCELLING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class JobCancelled(BaseException):
    """SIGTERM or SIGHUP reached the orchestrator (scancel, kill, a CI timeout, a closed
    terminal). A BaseException, like KeyboardInterrupt, so that nothing on the way swallows it:
    the job is recorded as `cancelled`, then the sweep stops and its parent run is closed.
    `returncode`: what run.py exits with (128 + the signal's number)."""

    def __init__(self, message: str, returncode: int = 128 + signal.SIGTERM) -> None:
        super().__init__(message)
        self.returncode = returncode


def raise_on_sigterm(signum: int, frame: Any) -> None:
    if signum == signal.SIGHUP:
        _leave_hung_up_terminal()
    raise JobCancelled(f"signal {signal.Signals(signum).name}", 128 + signum)


def _leave_hung_up_terminal() -> None:
    """After a SIGHUP, stdout and stderr that are a terminal point at /dev/null: writing to a
    terminal that has gone fails (EIO), and the job's record must not die of its own line."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            if os.isatty(fd):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def install_sigterm_handler() -> None:
    """SIGTERM and SIGHUP → JobCancelled in the main thread."""
    if threading.current_thread() is threading.main_thread():
        for signum in CANCELLING_SIGNALS:
            signal.signal(signum, raise_on_sigterm)


def exit_code(exc: BaseException) -> int:
    """What run.py exits with when a job was stopped: 130 for Ctrl-C, 128 + the signal's
    number for a JobCancelled (143 for SIGTERM, 129 for SIGHUP)."""
    if isinstance(exc, JobCancelled):
        return exc.returncode
    return 130


def interruption_cause(exc: BaseException) -> tuple[str, str]:
    """(failure_kind, reason) of a job stopped by Ctrl-C or a SIGTERM (sigterm_cause)."""
    if isinstance(exc, JobCancelled):
        return sigterm_cause(str(exc))
    return "cancelled", "Ctrl-C (SIGINT)"


def sigterm_cause(signal_text: str) -> tuple[str, str]:
    """(failure_kind, reason) of a SIGTERM: inside a SLURM job, what SLURM says ended it (scancel
    → cancelled, its time limit → timeout, preemption → preempted, with the state in the
    reason); anywhere else, or when SLURM does not say, `cancelled`."""
    if SLURM_JOB_ENV not in os.environ:
        return "cancelled", signal_text
    from distbench.launch.slurm_state import slurm_job_state, state_kind, with_slurm_reason

    job_id = slurm_job_id(os.environ)
    try:
        state, slurm_reason = slurm_job_state(job_id)
    except (OSError, subprocess.SubprocessError):  # no scontrol/sacct on this node
        state, slurm_reason = "", ""
    reason = f"{signal_text} from SLURM: job {job_id} {state or 'state unknown'}"
    return state_kind(state, "cancelled"), with_slurm_reason(reason, slurm_reason)


def scheduler_ended(slurm_job: str | None) -> tuple[str, str] | None:
    """(failure_kind, reason) when SLURM itself ended this job (its ranks died because of it),
    else None: a job cancelled or over its time limit is not a crash of a rank."""
    if not slurm_job:
        return None
    from distbench.launch.slurm_state import scheduler_failure, slurm_job_state

    # The scheduler marks the job before it signals the steps, but scontrol may show RUNNING or
    # COMPLETING for a moment: a failed job waits a few seconds for the final state.
    deadline = time.monotonic() + SCHEDULER_STATE_WAIT_S
    state, slurm_reason = slurm_job_state(slurm_job)
    while state.split(" ")[0] in ("RUNNING", "COMPLETING") and time.monotonic() < deadline:
        time.sleep(0.5)
        state, slurm_reason = slurm_job_state(slurm_job)
    if not state or state.split(" ")[0] in ("PENDING", "RUNNING", "COMPLETING", "COMPLETED"):
        return None
    return scheduler_failure(state, slurm_reason)
