"""The MLflow store at its edges: a sqlite store whose creation fails midway (a full disk, here a
file-size limit on a real process) is removed, not left half-migrated, and the error is one
line without MLflow's SQL; `report` on a mistyped sqlite path refuses in one line and creates
neither the file nor its folder.

    pytest tests/unit/test_edges_store.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from distbench.cli import main as distbench

pytestmark = pytest.mark.unit

# A process whose files may not grow past LIMIT_BYTES (as on a disk that is full) creates a
# store twice: the second attempt is the next job of a sweep on that disk.
CREATE_ON_A_FULL_DISK = r"""
import json, resource, signal, sys
from pathlib import Path
import mlflow.store.tracking.sqlalchemy_store  # imported before the limit: only the store grows
from distbench.tracking.mlflow_store import ensure_experiment
uri, limit = sys.argv[1], int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
seen = []
for attempt in range(2):
    try:
        ensure_experiment(uri, "distbench")
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    seen.append({"error": error, "left": Path(uri.removeprefix("sqlite:///")).exists()})
print(json.dumps(seen))
"""
LIMIT_BYTES = 40_000  # a new MLflow store needs ~1 MB: its migrations stop early


def test_a_store_whose_creation_fails_is_removed_and_said_in_one_line(tmp_path):
    """Left half-migrated, the store was unusable after space was freed ("table
    _alembic_tmp_runs already exists") and each error carried MLflow's SQL."""
    uri = f"sqlite:///{tmp_path}/store.db"
    proc = subprocess.run(
        [sys.executable, "-c", CREATE_ON_A_FULL_DISK, uri, str(LIMIT_BYTES)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for seen in json.loads(proc.stdout.strip().splitlines()[-1]):
        error = seen["error"]
        assert error is not None and error.startswith("StoreNotCreated: could not create"), error
        assert "\n" not in error and "[SQL" not in error and "CREATE TABLE" not in error, error
        assert seen["left"] is False  # nothing half-migrated for the next run to trip on
    assert not (tmp_path / "store.db-journal").exists()


def test_report_on_a_mistyped_sqlite_path_creates_nothing(tmp_path, capsys):
    for db in (tmp_path / "nodir" / "x.db", tmp_path / "x.db"):
        args = ["report", "--tracking-uri", f"sqlite:///{db}", "--out", str(tmp_path / "r")]
        assert distbench(args) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "no MLflow store at" in lines[0], lines
        assert not db.exists() and not (tmp_path / "nodir").exists()
