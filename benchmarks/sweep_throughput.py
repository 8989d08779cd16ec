"""What a sweep costs beyond its jobs: the README's main command, timed whole and per job.

Runs `python run.py -m strategy=dp,tp,zero3 world_size=2,4` (6 jobs, 3 + 10 steps each) with
hydra.sweep.dir in a temporary dir and MLFLOW_TRACKING_URI=sqlite:///<temp>/mlflow.db (a store
created once before timing, as ./mlflow.db exists after a user's first run). Each job's own
time is its worker group's wall time, `wall_time_s` in its outcome.json (launch of torchrun to
the last rank's exit). Then

    overhead_per_job_s = (the sweep's wall time − Σ jobs' wall_time_s) / number of jobs

is everything distbench adds per job: interpreter start, Hydra, config resolution, equivalence
check, MLflow logging, the summary table. Target: ≤ 2 s per job. Where it goes is split by the
times each job dir's files were written (harness_overhead.phases): the sweep's start-up (to the
first job's .hydra/config.yaml), each job's pre-launch, post (metrics → mlflow_run.json) and
tracking (→ outcome.json), the gaps between jobs (Hydra's next job set-up) and the sweep's end
(parent run closed, table printed, exit). The run.py process's own peak RSS is read as in
harness_overhead.py (VmHWM at exit, ranks not included).

    .venv/bin/python benchmarks/sweep_throughput.py            # the 6-job sweep (~4 min on CPU)
    .venv/bin/python benchmarks/sweep_throughput.py --quick    # strategy=dp,ddp, 1 + 2 steps

Figures go to benchmarks/results/sweep_throughput.{json,md} (`--quick`: sweep_throughput_quick.*;
`--out-dir` elsewhere); the last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness_overhead import (
    MB,
    PROJECT_DIR,
    RSS_WRAPPER,
    create_store,
    load_avg_1m,
    machine,
    timed_run,
    work_dir,
)

MAIN_SWEEP = ["strategy=dp,tp,zero3", "world_size=2,4"]
QUICK_SWEEP = ["strategy=dp,ddp", "world_size=2", "workload.num_warmup_steps=1"]
QUICK_SWEEP += ["workload.num_steps=2"]
TARGET_OVERHEAD_PER_JOB_S = 2.0
JOB_PHASES = ("pre_launch", "workers", "post", "tracking")


def run_sweep(overrides: list[str], work: Path) -> dict[str, Any]:
    """`python run.py -m OVERRIDES` under the RSS wrapper: wall, start time, sweep dir, RSS."""
    sweep_dir = work / "sweep"
    rss_file = work / "rss.txt"
    cmd = [sys.executable, "-c", RSS_WRAPPER, str(rss_file), str(PROJECT_DIR / "run.py"), "-m"]
    cmd += [*overrides, f"hydra.sweep.dir={sweep_dir}"]
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
    wall_s, _, start_time, load = timed_run(cmd, work, env)
    return {
        "wall_s": wall_s,
        "start_time": start_time,
        "sweep_dir": sweep_dir,
        "orchestrator_peak_rss_mb": int(rss_file.read_text()) / MB,
        "load_avg_1m": load,
    }


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's job dirs in job order (Hydra names them 0, 1, 2, ...)."""
    dirs = [p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(dirs, key=lambda p: int(p.name))


def job_times(job_dir: Path, start_time: float) -> dict[str, Any]:
    """One job: its outcome and where its time went (s since the sweep started). A job refused
    before launch has no resolved.yaml and no workers: its time is all pre-launch."""
    outcome = json.loads((job_dir / "outcome.json").read_text())

    def at(name: str, fallback: str = "outcome.json") -> float:
        path = job_dir / name if (job_dir / name).exists() else job_dir / fallback
        return path.stat().st_mtime - start_time

    began, launched = at(".hydra/config.yaml"), at("resolved.yaml")
    workers_end = launched + outcome.get("wall_time_s", 0.0)
    return {
        "job": job_dir.name,
        "strategy": outcome["strategy"],
        "world_size": outcome["world_size"],
        "status": outcome["status"],
        "began_s": began,
        "ended_s": at("outcome.json"),
        "pre_launch": launched - began,
        "workers": outcome.get("wall_time_s", 0.0),
        "post": at("mlflow_run.json") - workers_end,
        "tracking": at("outcome.json") - at("mlflow_run.json"),
        "orchestrator_time_s": outcome["orchestrator_time_s"],
    }


def breakdown(jobs: list[dict[str, Any]], sweep: dict[str, Any]) -> dict[str, float]:
    """The sweep's wall time split into start-up, the jobs' phases, gaps between jobs, end."""
    gaps = [b["began_s"] - a["ended_s"] for a, b in itertools.pairwise(jobs)]
    parts = {"startup": jobs[0]["began_s"]}
    parts.update({phase: sum(j[phase] for j in jobs) for phase in JOB_PHASES})
    parts["between_jobs"] = sum(gaps)
    parts["end"] = sweep["wall_s"] - jobs[-1]["ended_s"]
    return parts


def summarize(jobs: list[dict[str, Any]], sweep: dict[str, Any]) -> dict[str, Any]:
    num_jobs = len(jobs)
    jobs_wall_s = sum(j["workers"] for j in jobs)
    overhead_per_job_s = (sweep["wall_s"] - jobs_wall_s) / num_jobs
    parts = breakdown(jobs, sweep)
    return {
        "num_jobs": num_jobs,
        "num_finished": sum(j["status"] == "FINISHED" for j in jobs),
        "sweep_wall_s": sweep["wall_s"],
        "jobs_wall_s_sum": jobs_wall_s,
        "overhead_per_job_s": overhead_per_job_s,
        "overhead_per_job_by_phase_s": {
            k: v / num_jobs for k, v in parts.items() if k != "workers"
        },
        "orchestrator_peak_rss_mb": sweep["orchestrator_peak_rss_mb"],
        "pass": {"overhead_per_job_s": overhead_per_job_s <= TARGET_OVERHEAD_PER_JOB_S},
        "jobs": jobs,
    }


def print_tables(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    table = Table(title="jobs of the sweep (s)")
    for header in ("job", "strategy", "world", "status", *JOB_PHASES):
        table.add_column(header, justify="right")
    for j in summary["jobs"]:
        cells = [f"{j[p]:.2f}" for p in JOB_PHASES]
        table.add_row(j["job"], j["strategy"], j["world_size"], j["status"], *cells)
    console.print(table)
    console.print(markdown_overhead(summary), highlight=False)


def markdown_overhead(summary: dict[str, Any]) -> str:
    ok = "pass" if summary["pass"]["overhead_per_job_s"] else "FAIL"
    parts = ", ".join(f"{k} {v:.2f}" for k, v in summary["overhead_per_job_by_phase_s"].items())
    return (
        f"sweep wall {summary['sweep_wall_s']:.1f} s, jobs' own wall Σ "
        f"{summary['jobs_wall_s_sum']:.1f} s over {summary['num_jobs']} jobs → overhead "
        f"{summary['overhead_per_job_s']:.2f} s per job (target ≤ "
        f"{TARGET_OVERHEAD_PER_JOB_S:g} s: {ok}); per job by phase (s): {parts}; "
        f"orchestrator peak RSS {summary['orchestrator_peak_rss_mb']:.0f} MB"
    )


def markdown(summary: dict[str, Any]) -> str:
    m = summary["machine"]
    lines = [f"# distbench sweep throughput ({m['date']})", ""]
    lines += [f"Command: `{summary['command']}` (sweep: `{summary['sweep_command']}`)", ""]
    lines += [
        f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores; 1-min load average "
        f"{summary['load_avg_1m_start']:.2f} at start, {summary['load_avg_1m_end']:.2f} at end; "
        f"store created in {summary['store_create_s']:.1f} s (not in the sweep's time).",
        "",
        markdown_overhead(summary),
        "",
        "| job | strategy | world | status | " + " | ".join(JOB_PHASES) + " |",
        "|" + "---|" * (4 + len(JOB_PHASES)),
    ]
    for j in summary["jobs"]:
        cells = [j["job"], j["strategy"], j["world_size"], j["status"]]
        cells += [f"{j[p]:.2f}" for p in JOB_PHASES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 jobs (dp, ddp), 1 + 2 steps")
    parser.add_argument("--out-dir", type=Path, default=PROJECT_DIR / "benchmarks" / "results")
    parser.add_argument("--work-dir", type=Path, help="an empty dir to keep runs in")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    overrides = QUICK_SWEEP if args.quick else MAIN_SWEEP
    load_start, started = load_avg_1m(), machine()
    with work_dir(args.work_dir, "sweep_throughput_") as work:
        store_create_s = create_store(work)
        sweep = run_sweep(overrides, work)
        jobs = [job_times(d, sweep["start_time"]) for d in job_dirs(sweep["sweep_dir"])]
    summary = summarize(jobs, sweep)
    summary.update(
        command=" ".join(["python benchmarks/sweep_throughput.py", *sys.argv[1:]]),
        sweep_command=" ".join(["python run.py -m", *overrides]),
        quick=args.quick,
        machine=started,
        store_create_s=store_create_s,
        load_avg_1m_start=load_start,
        load_avg_1m_end=load_avg_1m(),
        target_overhead_per_job_s=TARGET_OVERHEAD_PER_JOB_S,
    )
    print_tables(summary)
    stem = "sweep_throughput_quick" if args.quick else "sweep_throughput"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    (args.out_dir / f"{stem}.md").write_text(markdown(summary))
    summary["results_path"] = str(args.out_dir / f"{stem}.json")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
