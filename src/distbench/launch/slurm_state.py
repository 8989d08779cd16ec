"""How a SLURM job ended, as distbench failure kinds (public: users filter runs on them).

A job the scheduler ends (scancel, its time limit, a lost node, the OOM killer of its cgroup)
cannot record itself: the launching process asks SLURM for the job's state and records it.

    python -c "import distbench.launch.slurm_state as s; print(s.scheduler_failure('TIMEOUT', ''))"
"""

from __future__ import annotations

import re
import subprocess

# SLURM job state → failure kind. TIMEOUT is the job's time limit (hydra.launcher.timeout_min).
STATE_KINDS = {
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "OUT_OF_MEMORY": "oom",
    "PREEMPTED": "preempted",
}


def state_kind(state: str, default: str) -> str:
    """The failure kind of a SLURM job state ("CANCELLED by 0" → cancelled), else `default`."""
    return STATE_KINDS.get(state.split()[0] if state else "", default)


def with_slurm_reason(text: str, slurm_reason: str) -> str:
    """`text`, and SLURM's Reason field where it says something."""
    return f"{text} (reason: {slurm_reason})" if slurm_reason and slurm_reason != "None" else text


def scheduler_failure(state: str, slurm_reason: str) -> tuple[str, str]:
    """(failure_kind, failure_reason) of a SLURM job that ended without recording itself."""
    reason = f"SLURM job ended {state or 'UNKNOWN'} before the job recorded an outcome"
    return state_kind(state, "crash"), with_slurm_reason(reason, slurm_reason)


def parse_scontrol_job(text: str) -> tuple[str, str]:
    """JobState and Reason from `scontrol show job -o ID` output."""
    state = re.search(r"\bJobState=(\S+)", text)
    reason = re.search(r"\bReason=(\S+)", text)
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def task_line(scontrol_output: str, task_id: str) -> str | None:
    """The line of `scontrol show job -o` output for array task `task_id` (any line with a
    JobState when the job is not an array task)."""
    for line in scontrol_output.splitlines():
        if "JobState=" in line and (not task_id or re.search(rf"\bArrayTaskId={task_id}\b", line)):
            return line
    return None


def slurm_job_state(job_id: str) -> tuple[str, str]:
    """(state, reason) from scontrol (kept MinJobAge seconds after the end; no accounting
    database needed), then sacct; ("", "") when neither knows the job."""
    array_id, _, task_id = job_id.partition("_")
    # An array task's own id is not always found (the array's first record stands for it):
    # list the whole array and pick the task's line.
    for query in dict.fromkeys([job_id, array_id]):
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", query], capture_output=True, text=True, check=False
        )
        line = task_line(out.stdout, task_id) if out.returncode == 0 else None
        if line:
            return parse_scontrol_job(line)
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State,Reason", "-j", job_id],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = out.stdout.strip().splitlines()[0].split("|") if out.stdout.strip() else []
    return (fields[0], fields[1] if len(fields) > 1 else "") if fields else ("", "")


def queued_state(job_id: str) -> str:
    """The job's state while SLURM still queues it (PENDING, RUNNING, ...), else "". squeue
    also knows an array task still pending inside its array's record."""
    out = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, check=False
    )
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else ""
