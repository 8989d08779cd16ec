"""The CLI refuses bad input in one line with exit 2, never a traceback: plan's efficiency,
bandwidth and latency, a tracking URI no MLflow store understands, a sweep dir that is not there.

    pytest tests/unit/test_cli_refusals.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def distbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_refusal(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--efficiency", "0", "(0, 1]"),
        ("--efficiency", "-1", "(0, 1]"),
        ("--efficiency", "nan", "(0, 1]"),
        ("--bandwidth-gbps", "-5", "positive"),
        ("--latency-us", "-1", ">= 0"),
    ],
)
def test_plan_refuses_a_figure_out_of_range(option, value, allowed):
    assert_one_line_refusal(distbench("plan", option, value), option, value, allowed)


def test_report_refuses_a_tracking_uri_no_store_understands():
    proc = distbench("report", env={"MLFLOW_TRACKING_URI": "foo://bar"})
    assert_one_line_refusal(proc, "unsupported tracking URI", "foo://bar")


def test_sync_of_a_missing_dir_is_an_error(tmp_path):
    proc = distbench("sync", str(tmp_path / "no-such-sweep"))
    assert_one_line_refusal(proc, "no such directory", "no-such-sweep")


def test_output_piped_into_a_reader_that_leaves_early_is_no_traceback():
    proc = subprocess.run(
        f"{sys.executable} -m distbench.cli resolve strategy=zero3 world_size=4 | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.startswith("# distbench resolve") and "Traceback" not in proc.stderr
