"""Hydra's own modes pass through run.py's up-front override check: shell completion (its
`install=bash` and `query=bash` are commands, not config keys), --info and --hydra-help.

    pytest tests/unit/test_hydra_passthrough.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import run
from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.unit


def test_hydras_own_modes_are_told_from_overrides():
    assert run.hydra_own_mode(["-sc", "install=bash"])
    assert run.hydra_own_mode(["--shell-completion", "query=bash"])
    assert run.hydra_own_mode(["--info", "defaults"]) and run.hydra_own_mode(["--info=config"])
    assert run.hydra_own_mode(["--hydra-help"])
    assert not run.hydra_own_mode(["-m", "strategy=dp", "install=bash"])


def test_shell_completion_answers_through_run_py():
    env = dict(os.environ, COMP_LINE="python run.py strategy=zero")
    proc = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "run.py"), "-sc", "query=bash"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "strategy=zero3" in proc.stdout.split() and "invalid config" not in proc.stderr
