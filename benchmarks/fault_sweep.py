"""A sweep with 2 injected faults out of 6 jobs: does it finish in about the time of its 4 good
jobs plus the faulty jobs' own limits, with every job recorded?

Jobs (one Hydra grid): fault.kind=kill,stall,none × fault.at_step=1,99 — a fault at step 99
never fires (the run has fewer steps), so kill@1 and stall@1 are the 2 faulty jobs.

    .venv/bin/python benchmarks/fault_sweep.py            # stall limit 60 s
    .venv/bin/python benchmarks/fault_sweep.py --quick    # smoke: stall limit 30 s, 2 steps

Prints a table; the last stdout line is one JSON document. Figures are saved under
benchmarks/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    stall_s, steps = (30, 2) if args.quick else (60, 10)
    work = Path(tempfile.mkdtemp(prefix="fault_sweep_"))
    sweep_dir = work / "sweep"
    cmd = [
        sys.executable,
        str(PROJECT_DIR / "run.py"),
        "-m",
        "fault.kind=kill,stall,none",
        "fault.at_step=1,99",
        "fault.rank=1",
        f"limits.stall_timeout_s={stall_s}",
        f"workload.num_steps={steps}",
        "workload.num_warmup_steps=1",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    sweep_wall_s = time.monotonic() - start
    outcomes = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/outcome.json"))]
    good = [o for o in outcomes if o["status"] == "FINISHED"]
    faulty = [o for o in outcomes if o["status"] == "FAILED"]
    jobs_wall_s = sum(o.get("wall_time_s", 0.0) for o in outcomes)
    print(f"{'job':>4} {'status':>9} {'kind':>9} {'wall s':>7}  reason")
    for i, o in enumerate(outcomes):
        print(
            f"{i:>4} {o['status']:>9} {o.get('failure_kind') or '-':>9} "
            f"{o.get('wall_time_s', 0):7.1f}  {(o.get('failure_reason') or '')[:70]}"
        )
    summary = {
        "benchmark": "fault_sweep",
        "exit_code": proc.returncode,
        "num_jobs": len(outcomes),
        "num_finished": len(good),
        "num_failed": len(faulty),
        "failure_kinds": sorted(o["failure_kind"] for o in faulty),
        "stall_timeout_s": stall_s,
        "sweep_wall_s": round(sweep_wall_s, 1),
        "good_jobs_wall_s": round(sum(o["wall_time_s"] for o in good), 1),
        "faulty_jobs_wall_s": round(sum(o["wall_time_s"] for o in faulty), 1),
        "sweep_overhead_s": round(sweep_wall_s - jobs_wall_s, 1),
    }
    print(
        f"sweep {summary['sweep_wall_s']} s = good jobs {summary['good_jobs_wall_s']} s + "
        f"faulty jobs {summary['faulty_jobs_wall_s']} s + sweep overhead "
        f"{summary['sweep_overhead_s']} s"
    )
    results = PROJECT_DIR / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"fault_sweep_{time.strftime('%Y%m%d_%H%M%S')}.json").write_text(
        json.dumps(summary, indent=2)
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
