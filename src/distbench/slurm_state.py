"""How a SLURM job ended, as distbench failure kinds (public: users filter runs on them).

A job the scheduler ends (scancel, its time limit, a lost node, the OOM killer of its cgroup)
cannot record itself: the launching process asks SLURM for the job's state and records it.

    python -c "from distbench.slurm_state import scheduler_failure as f; print(f('TIMEOUT', ''))"
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


def scheduler_failure(state: str, slurm_reason: str) -> tuple[str, str]:
    """(failure_kind, failure_reason) of a SLURM job that ended without recording itself."""
    base = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0" → CANCELLED
    kind = STATE_KINDS.get(base, "crash")
    reason = f"SLURM job ended {state or 'UNKNOWN'} before the job recorded an outcome"
    if slurm_reason and slurm_reason != "None":
        reason += f" (reason: {slurm_reason})"
    return kind, reason


def parse_scontrol_job(text: str) -> tuple[str, str]:
    """JobState and Reason from `scontrol show job -o ID` output."""
    state = re.search(r"\bJobState=(\S+)", text)
    reason = re.search(r"\bReason=(\S+)", text)
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def slurm_job_state(job_id: str) -> tuple[str, str]:
    """(state, reason) from scontrol (kept MinJobAge seconds after the end; no accounting
    database needed), then sacct; ("", "") when neither knows the job."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False
    )
    if out.returncode == 0 and "JobState=" in out.stdout:
        return parse_scontrol_job(out.stdout)
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State,Reason", "-j", job_id],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = out.stdout.strip().splitlines()[0].split("|") if out.stdout.strip() else []
    return (fields[0], fields[1] if len(fields) > 1 else "") if fields else ("", "")
