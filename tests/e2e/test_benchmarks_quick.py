"""The overhead benchmarks run end to end in their --quick mode and print sane figures.

Each script runs in a subprocess (real torchrun ranks, real run.py jobs, a temporary sqlite
store); the last stdout line must be its JSON summary. Only sanity is asserted (positive times
and memory, the bare script computing the same first-step loss as distbench): the targets
(ratio ≤ 1.03, ...) are what the benchmarks report, not what a test on a shared CI machine
can hold.

    pytest tests/e2e/test_benchmarks_quick.py -m e2e      # ~3 min on 2 cores
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

pytestmark = pytest.mark.e2e

TIMEOUT_S = 900
TARGETS = {"step_p50_ratio", "fixed_cost_s", "orchestrator_peak_rss_mb"}  # pass/fail each


def run_quick(script: str, out_dir: Path) -> dict:
    """Run benchmarks/<script> --quick; its last stdout line, parsed."""
    script_path = PROJECT_DIR / "benchmarks" / script
    proc = subprocess.run(
        [sys.executable, str(script_path), "--quick", "--out-dir", str(out_dir)],
        cwd=out_dir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_harness_overhead_quick_compares_distbench_with_the_bare_scripts(tmp_path):
    summary = run_quick("harness_overhead.py", tmp_path)
    assert set(summary["strategies"]) == {"ddp", "dp"}
    assert summary["repeats"] == 1 and summary["load_avg_1m_start"] >= 0
    for name, figures in summary["strategies"].items():
        for key in ("bare_step_time_s_p50", "distbench_step_time_s_p50", "step_p50_ratio"):
            assert figures[key] > 0, (name, key)
        assert figures["bare_wall_s"] > 0 and figures["distbench_wall_s"] > 0
        assert math.isfinite(figures["fixed_cost_s"])
        assert 0 < figures["orchestrator_peak_rss_mb"] < 4000
        phases = figures["distbench_phases_s"]
        assert phases["workers"] > 0 and phases["startup"] > 0
        assert set(figures["pass"]) == {
            "step_p50_ratio",
            "fixed_cost_s",
            "orchestrator_peak_rss_mb",
        }
        # same model, weights and data: the bare script's first-step loss is distbench's
        assert figures["loss_first_bare"] == pytest.approx(figures["loss_first_distbench"], 1e-5)
    assert (tmp_path / "harness_overhead_quick.json").exists()
    assert (tmp_path / "harness_overhead_quick.md").exists()


def test_sweep_throughput_quick_reports_the_overhead_per_job(tmp_path):
    summary = run_quick("sweep_throughput.py", tmp_path)
    assert summary["num_jobs"] == 2 and summary["num_finished"] == 2
    assert summary["jobs_wall_s_sum"] > 0
    # jobs run one after another inside the sweep: its wall time holds all of theirs
    assert summary["sweep_wall_s"] > summary["jobs_wall_s_sum"]
    assert summary["overhead_per_job_s"] > 0
    assert summary["orchestrator_peak_rss_mb"] > 0
    assert {j["strategy"] for j in summary["jobs"]} == {"dp", "ddp"}
    assert all(j["workers"] > 0 for j in summary["jobs"])
    assert (tmp_path / "sweep_throughput_quick.json").exists()
