"""Communication inside a step, profiled, against the planner's communication term.

Each job of a sweep run with `workload.profile_steps=N` leaves rank 0's profiler trace; gloo
annotates every collective it runs (`gloo:all_reduce`, `gloo:all_gather`, ...: launch to
completion). Per job this prints the collectives per profiled step and their seconds beside the
planner's bytes, collectives and communication seconds for the same job (its resolved.yaml,
predicted by the code as it stands), and the step time measured and predicted:

    python run.py -m strategy=dp,ddp,fsdp,zero1,zero2,zero3,tp,torch_tp world_size=2 \
        workload.profile_steps=2 tracking=none hydra.sweep.dir=/tmp/prof_small
    python benchmarks/comm_in_step.py /tmp/prof_small --json /tmp/prof_small.json

On CPU ranks a collective is never hidden under compute (figures/step_time.py hidden_comm_s),
so the profiled seconds are what the step pays for its communication.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path
from typing import Any

from distbench.figures.job_terms import device_shard, job_collectives
from distbench.figures.predict import predict
from distbench.job import Job

PROFILED = re.compile(r"(\d+) profiled steps")


def gloo_collectives(trace_path: Path) -> tuple[collections.Counter, collections.Counter]:
    """(count, seconds) per gloo collective in one rank's chrome trace; barriers left out."""
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    count: collections.Counter = collections.Counter()
    seconds: collections.Counter = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if name.startswith("gloo:") and name != "gloo:barrier":
            count[name] += 1
            seconds[name] += event.get("dur", 0) / 1e6
    return count, seconds


def job_row(job_dir: Path) -> dict[str, Any]:
    """One profiled job: what its trace says and what the planner predicts for it."""
    outcome = json.loads((job_dir / "outcome.json").read_text())
    header = (job_dir / "profile.rank0.txt").read_text().splitlines()[0]
    steps = int(PROFILED.match(header).group(1))
    count, seconds = gloo_collectives(job_dir / "trace.rank0.json")
    job = Job.load(job_dir)
    prediction = predict(job)
    return {
        "job": job_dir.name,
        "strategy": outcome["strategy"],
        "world_size": job.layout.world_size,
        "grad_accum_steps": job.batch.grad_accum_steps,
        "collectives_profiled": sum(count.values()) / steps,
        "collectives_predicted": sum(job_collectives(job, device_shard(job)).values()),
        "comm_s_profiled": sum(seconds.values()) / steps,
        "comm_s_predicted": prediction.time_s["comm"],
        "comm_bytes_predicted": prediction.comm_bytes_per_step,
        "by_collective": {k: [count[k] / steps, seconds[k] / steps] for k in count},
        "step_s_measured": outcome["metrics"]["step_time_s_p50"],
        "step_s_predicted": prediction.step_time_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows = [
        job_row(outcome.parent)
        for sweep in args.sweep_dirs
        for outcome in sorted(sweep.glob("*/outcome.json"), key=lambda p: int(p.parent.name))
        if (outcome.parent / "trace.rank0.json").exists()
    ]
    print(
        f"{'strategy':10} {'ws':>2} {'m':>2} {'coll prof':>9} {'pred':>5} {'comm s prof':>11} "
        f"{'pred':>7} {'step s meas':>11} {'pred':>7} {'err %':>6}"
    )
    for r in rows:
        err = (r["step_s_predicted"] - r["step_s_measured"]) / r["step_s_measured"] * 100
        print(
            f"{r['strategy']:10} {r['world_size']:>2} {r['grad_accum_steps']:>2} "
            f"{r['collectives_profiled']:>9.0f} {r['collectives_predicted']:>5.0f} "
            f"{r['comm_s_profiled']:>11.4f} {r['comm_s_predicted']:>7.4f} "
            f"{r['step_s_measured']:>11.3f} {r['step_s_predicted']:>7.3f} {err:>+6.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
