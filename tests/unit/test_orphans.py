"""Which job dirs have an orchestrator known dead: this host only, a reused pid is not alive.

pytest tests/unit/test_orphans.py
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distbench.orphans import OWNER_FILE, mark_owner, orphaned_job_dirs, owner_gone

pytestmark = pytest.mark.unit


def owner(job_dir, **changes) -> None:
    path = job_dir / OWNER_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_running_orchestrator_is_not_gone(tmp_path):
    mark_owner(tmp_path)
    assert owner_gone(tmp_path) is None


def test_an_exited_orchestrator_is_gone_and_its_job_without_outcome_is_an_orphan(tmp_path):
    job_dir = tmp_path / "0"
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "config.yaml").write_text("{}")
    mark_owner(job_dir)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owner(job_dir, pid=dead.pid)
    assert (
        owner_gone(job_dir)
        == f"pid {dead.pid} on {json.loads((job_dir / OWNER_FILE).read_text())['host']}"
    )
    assert orphaned_job_dirs(tmp_path) == [(job_dir, owner_gone(job_dir))]
    (job_dir / "outcome.json").write_text("{}")  # it did record itself
    assert orphaned_job_dirs(tmp_path) == []


def test_a_reused_pid_or_another_host_is_not_taken_for_the_orchestrator(tmp_path):
    mark_owner(tmp_path)
    owner(tmp_path, started=1.0)  # this pid, but a process started at another time
    assert owner_gone(tmp_path) is not None
    mark_owner(tmp_path)
    owner(tmp_path, host="another-node", pid=1)  # cannot be checked from here
    assert owner_gone(tmp_path) is None
    (tmp_path / OWNER_FILE).write_text("not json")
    assert owner_gone(tmp_path) is None
