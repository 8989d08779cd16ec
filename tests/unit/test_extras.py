"""Without the optional extras (pyproject.toml: `server`, `slurm`): the SLURM launcher's plugin
module still imports, since Hydra imports every plugin module on every run and warns about one
that fails; a PostgreSQL backend says which extra to install, in one line.

    pytest tests/unit/test_extras.py
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from distbench.tools import server

pytestmark = pytest.mark.unit

WITHOUT_SUBMITIT = """
import sys
for name in ("submitit", "hydra_plugins.hydra_submitit_launcher"):
    sys.modules[name] = None  # as if the `slurm` extra were not installed
from hydra.plugins.plugin import Plugin
from hydra_plugins.distbench_slurm import launcher
assert not issubclass(launcher.DistbenchSlurmLauncher, Plugin)  # Hydra registers nothing
print("imported")
"""


def test_the_slurm_plugin_module_imports_without_the_slurm_extra():
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_SUBMITIT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "imported", proc.stderr[-2000:]


def test_a_postgres_backend_without_the_server_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # as if psycopg2-binary were absent
    uri = "postgresql+psycopg2://mlflow:secret@db:5432/mlflow"
    with pytest.raises(server.ServerError) as error:
        server.check_postgres(uri, None)
    message = str(error.value)
    assert "pip install -e '.[server]' (psycopg2-binary)" in message
    assert "secret" not in message and "\n" not in message
