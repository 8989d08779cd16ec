"""The overhead benchmarks: harness_overhead.py runs end to end in its --quick mode on
DeepSpeed's dp and prints sane figures; sweep_throughput.py's accounting is run on the shared
grid sweep's real job dirs (the sweep is not run again for it).

harness_overhead.py runs in a subprocess (real torchrun ranks, real run.py jobs, a temporary sqlite
store); the last stdout line must be its JSON summary. Only sanity is asserted (positive times
and memory, the bare script computing the same first-step loss as distbench): the targets
(ratio ≤ 1.03, ...) are what the benchmarks report, not what a test on a shared CI machine
can hold.

    pytest tests/e2e/test_benchmarks_quick.py -m e2e      # ~1 min on 2 cores (+ the grid sweep)
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


def run_quick(script: str, out_dir: Path, *args: str) -> dict:
    """Run benchmarks/<script> --quick; its last stdout line, parsed."""
    script_path = PROJECT_DIR / "benchmarks" / script
    proc = subprocess.run(
        [sys.executable, str(script_path), "--quick", "--out-dir", str(out_dir), *args],
        cwd=out_dir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_harness_overhead_quick_compares_distbench_with_the_bare_scripts(tmp_path):
    summary = run_quick("harness_overhead.py", tmp_path, "--strategies", "dp")
    assert set(summary["strategies"]) == {"dp"}  # DeepSpeed's path; ddp's bare script is alike
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


def test_sweep_throughput_splits_a_real_sweeps_time_into_its_jobs_phases(grid_sweep):
    """The benchmark's accounting (job_times → summarize → markdown) on the shared grid sweep's
    real job dirs: the sweep is not run a second time for it."""
    sys.path.insert(0, str(PROJECT_DIR / "benchmarks"))
    import sweep_throughput as st

    dirs = st.job_dirs(grid_sweep.sweep_dir)
    began = min((d / ".hydra" / "config.yaml").stat().st_mtime for d in dirs)
    ended = max((d / "outcome.json").stat().st_mtime for d in dirs)
    start_time = began - 1.0  # run.py's own start-up before its first job
    jobs = [st.job_times(d, start_time) for d in dirs]
    sweep = {"wall_s": ended - start_time + 0.5, "orchestrator_peak_rss_mb": 300.0}
    summary = st.summarize(jobs, sweep)
    assert summary["num_jobs"] == len(grid_sweep.job_dirs) == summary["num_finished"]
    assert {j["strategy"] for j in summary["jobs"]} == {s for s, _ in grid_sweep.job_dirs}
    assert all(j["workers"] > 0 and j["pre_launch"] >= 0 for j in summary["jobs"])
    # jobs run one after another inside the sweep: its wall time holds all of theirs
    assert summary["sweep_wall_s"] > summary["jobs_wall_s_sum"] > 0
    assert summary["overhead_per_job_s"] > 0
    phases = summary["overhead_per_job_by_phase_s"]
    assert phases["startup"] == pytest.approx(1.0 / len(dirs), abs=0.5)
    assert sum(phases.values()) == pytest.approx(summary["overhead_per_job_s"], rel=1e-6)
    assert "overhead" in st.markdown_overhead(summary)
