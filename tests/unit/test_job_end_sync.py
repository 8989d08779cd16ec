"""`distbench sync` of a dir with nothing to sync says so in one line, exits 2 and leaves the store
alone (issue 28, defect 18); a JSON write of a job dir that fails leaves no temporary file. (A
job's end killed or failing, with real processes and stores: tests/e2e/test_job_end_edges.py.)

    pytest tests/unit/test_job_end_sync.py
"""

from __future__ import annotations

import pytest

from distbench.cli import main
from distbench.files import write_json_atomic

pytestmark = pytest.mark.unit


def test_sync_of_a_dir_with_nothing_to_sync_says_so_in_one_line_and_exits_2(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    empty, other = tmp_path / "empty", tmp_path / "not_a_sweep"
    empty.mkdir()
    (other / "sub").mkdir(parents=True)
    (other / "notes.txt").write_text("hello")
    for path in (empty, other):
        assert main(["sync", str(path), "--tracking-uri", uri]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1
        assert f"nothing to sync in {path}" in err
    assert not (tmp_path / "store").exists()  # the store was not created for nothing


def test_a_json_write_that_fails_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "outcome.json"
    target.mkdir()  # a directory where the file goes: the rename fails
    (target / "keep").write_text("")
    with pytest.raises(OSError):
        write_json_atomic(target, {"status": "FAILED"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outcome.json"]
