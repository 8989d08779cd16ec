"""The MLflow client freezes the garbage collector at interpreter exit (skipping a ~1 s final
collection over MLflow's modules), while the atexit handlers around it still run."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

SCRIPT = """
import atexit, gc, sys
atexit.register(lambda: print("before client: frozen", gc.get_freeze_count() > 0))
from distbench.tracking.mlflow_store import client
client(sys.argv[1]); client(sys.argv[1])
atexit.register(lambda: print("after client: frozen", gc.get_freeze_count() > 0))
"""


def test_client_freezes_the_collector_at_exit_after_later_handlers(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path}/mlflow.db"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    # atexit runs last-registered first: the later handler before the freeze, the earlier after
    assert out[-2:] == ["after client: frozen False", "before client: frozen True"]
