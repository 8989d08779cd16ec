"""distbench's own cost: the same training job run bare under torchrun and through `run.py`.

For each strategy (`ddp`: torch engine, `dp`: DeepSpeed ZeRO-0), 2 ranks on CPU, the tiny Llama,
batch `small`, seed 1234, the same warm-up and timed steps, it alternates A B A B ...:

  A  a plain torchrun script, benchmarks/bare/bare_train_{ddp,deepspeed}.py (no distbench
     imports; same model config, init seed, data, optimizer, barrier around each step), run
     with the environment distbench gives its ranks (launch.worker_env: OMP threads = cores /
     ranks, DS_ACCELERATOR, LOCAL_SIZE, the same compiled-op cache), so only the code differs;
  B  `python run.py strategy=S world_size=2 workload.num_warmup_steps=W workload.num_steps=N
     hydra.run.dir=<temp>` with MLFLOW_TRACKING_URI=sqlite:///<temp>/mlflow.db (a store created
     once before timing, as ./mlflow.db exists after a user's first run; its creation is timed
     separately as `store_create_s`).

Reported per strategy (medians over the repeats):
  - step_p50_ratio: distbench's step_time_s_p50 (outcome.json) ÷ the bare script's p50 of the
    same timed steps (slowest rank per step, numpy's percentile, as distbench computes it);
  - fixed_cost_s: distbench's whole-job wall time − the bare script's (both from the driver's
    clock, process start to exit): orchestration, launch and tracking;
  - orchestrator_peak_rss_mb: the peak resident set (VmHWM, MB = 10^6 bytes) of the `run.py`
    process itself, not its children: run.py runs in-process under a 10-line wrapper
    (`python -c RSS_WRAPPER`, runpy) whose atexit handler, registered before run.py's own so it
    runs last, reads /proc/self/status VmHWM. Rank processes have their own VmHWM, so they are
    not counted (getrusage(RUSAGE_CHILDREN) would count them);
  - the phases of distbench's wall time, from its job dir's file times (see `phases()`), and
    the first-step loss of both (they must be equal: the same model on the same data).
Targets (printed with pass/fail): ratio ≤ 1.03, fixed cost ≤ 5 s, orchestrator RSS ≤ 400 MB.
Timing is as noisy as the machine: the 1-minute load average is recorded before every run, and
each pair's own ratio is kept to show the spread. `--quick`: both strategies, 1 repeat of 1 + 3
steps, no unkept round (~1.5 min).

    .venv/bin/python benchmarks/harness_overhead.py                  # 3 repeats, 3 + 10 steps
    .venv/bin/python benchmarks/harness_overhead.py --repeats 5 --strategies ddp
    .venv/bin/python benchmarks/harness_overhead.py --quick          # 1 repeat of 1 + 3 steps
    # on one GPU, a real model: both sides build it on the device (random weights), bf16-mixed
    python benchmarks/harness_overhead.py --quick --world-size 1 --device cuda \
        --model llama_1b --batch medium --dtype bf16

Figures go to benchmarks/results/harness_overhead.{json,md} (`--quick`: harness_overhead_quick.*;
`--out-dir` elsewhere); the last stdout line is one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR / "src"))

from distbench.figures.metrics import percentile  # noqa: E402
from distbench.launch.workers import free_port, remove_shm_leftovers, worker_env  # noqa: E402
from distbench.probes.detect import gpu_names, num_cpu_cores  # noqa: E402

BARE_SCRIPTS = {
    "ddp": PROJECT_DIR / "benchmarks" / "bare" / "bare_train_ddp.py",
    "dp": PROJECT_DIR / "benchmarks" / "bare" / "bare_train_deepspeed.py",
}
DEFAULT_WORLD_SIZE = 2
MB = 1e6
TARGET_STEP_P50_RATIO = 1.03
TARGET_FIXED_COST_S = 5.0
TARGET_ORCHESTRATOR_RSS_MB = 400.0
RUN_TIMEOUT_S = 600  # one run; a hung rank group is killed
# Files of a run.py job dir whose write times split its wall time into phases (phases()).
FILE_MARKS = (".hydra/config.yaml", "resolved.yaml", "mlflow_run.json", "outcome.json")
# Runs run.py in this process and, at exit, writes this process's own peak RSS (bytes) to argv[1].
RSS_WRAPPER = r"""
import atexit, os, re, runpy, sys
out, run_py = sys.argv[1], sys.argv[2]
def _write_peak():
    status = open("/proc/self/status").read()
    kib = int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1))
    open(out, "w").write(str(kib * 1024))
atexit.register(_write_peak)
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(run_py)
runpy.run_path(run_py, run_name="__main__")
"""


def load_avg_1m() -> float:
    """The 1-minute load average (/proc/loadavg): how busy the machine was."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    return {
        "cpu_model": model.group(1).strip() if model else "unknown",
        "cpu_cores": num_cpu_cores(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def last_json_line(text: str) -> dict[str, Any]:
    """The last line of `text` that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in: {text[-2000:]}")


def timed_run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str, float, float]:
    """Run `cmd` to its end in its own process group (killed whole on timeout or interrupt):
    (wall s, stdout, start time.time(), 1-min load average before)."""
    load_before = load_avg_1m()
    start_time = time.time()
    start = time.monotonic()
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # ranks left behind, if any
    wall_s = time.monotonic() - start
    if proc.returncode != 0:
        failed = f"{' '.join(cmd[:6])} ... exited with {proc.returncode}"
        raise SystemExit(f"{failed}:\n{stderr[-3000:]}")
    return wall_s, stdout, start_time, load_before


def run_bare(strategy: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """A: the plain torchrun script, with the environment distbench gives its ranks."""
    num_warmup, num_steps, device = args.num_warmup_steps, args.num_steps, args.device
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.world_size}"]
    cmd += ["--nnodes=1", "--master_addr=127.0.0.1", f"--master_port={port}"]
    cmd += [str(BARE_SCRIPTS[strategy]), "--num-warmup-steps", str(num_warmup)]
    cmd += ["--num-steps", str(num_steps), "--device", device, "--dtype", args.dtype]
    cmd += ["--batch", ",".join(str(n) for n in conf_batch_shape(args.batch))]
    if args.model == "tiny":  # the same start weights: equal first losses
        cmd += ["--weights", str(work / "weights")]
    else:  # built on the device from the same config (random init: losses differ)
        cmd += ["--model-config", str(work / "model_config")]
    env = worker_env(device, args.world_size, num_cpu_cores())
    try:
        wall_s, stdout, _, load = timed_run(cmd, work, env)
    finally:
        remove_shm_leftovers(port)  # DeepSpeed's CPU all-reduce leaves 66 MB per rank
    result = last_json_line(stdout)
    timed = result["step_times_s"][result["num_warmup_steps"] :]
    return {
        "wall_s": wall_s,
        "step_time_s_p50": percentile(timed, 50),
        "loss_first": result["losses"][0],
        "load_avg_1m": load,
    }


def run_distbench(strategy: str, args: argparse.Namespace, work: Path, i: int) -> dict[str, Any]:
    """B: `python run.py ...` under the RSS wrapper, into the temporary store."""
    num_warmup, num_steps = args.num_warmup_steps, args.num_steps
    job_dir = work / f"distbench-{strategy}-{i}"
    rss_file = work / f"rss-{strategy}-{i}.txt"
    cmd = [sys.executable, "-c", RSS_WRAPPER, str(rss_file), str(PROJECT_DIR / "run.py")]
    cmd += [f"strategy={strategy}", f"world_size={args.world_size}", "tracking=sqlite"]
    cmd += [f"model={args.model}", f"batch={args.batch}", f"workload.dtype={args.dtype}"]
    cmd += ["hardware=auto" if args.device == "cuda" else "hardware=cpu"]
    cmd += [f"workload.num_warmup_steps={num_warmup}", f"workload.num_steps={num_steps}"]
    cmd += [f"hydra.run.dir={job_dir}"]
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{work}/mlflow.db")
    wall_s, _, start_time, load = timed_run(cmd, work, env)
    outcome = json.loads((job_dir / "outcome.json").read_text())
    if outcome["status"] != "FINISHED" or "run_id" not in outcome:
        raise SystemExit(f"distbench job not FINISHED and logged: {json.dumps(outcome)[:2000]}")
    return {
        "wall_s": wall_s,
        "step_time_s_p50": outcome["metrics"]["step_time_s_p50"],
        "loss_first": outcome["metrics"]["loss_first"],
        "orchestrator_peak_rss_mb": int(rss_file.read_text()) / MB,
        "phases_s": phases(job_dir, outcome, start_time, wall_s),
        "load_avg_1m": load,
    }


def phases(job_dir: Path, outcome: dict[str, Any], start_time: float, wall_s: float) -> dict:
    """Where a run.py job's wall time goes, from the times its files were written:
    startup (interpreter, imports, Hydra compose) → .hydra/config.yaml; pre-launch (validate,
    resolve) → resolved.yaml; workers (torchrun and ranks: outcome's wall_time_s); post
    (metrics, equivalence check, outcome, spool) → mlflow_run.json; tracking (MLflow logging)
    → outcome.json's last write; exit (summary table, interpreter shutdown) → process end."""
    mtime = {name: (job_dir / name).stat().st_mtime - start_time for name in FILE_MARKS}
    workers_end = mtime["resolved.yaml"] + outcome["wall_time_s"]
    return {
        "startup": mtime[".hydra/config.yaml"],
        "pre_launch": mtime["resolved.yaml"] - mtime[".hydra/config.yaml"],
        "workers": outcome["wall_time_s"],
        "post": mtime["mlflow_run.json"] - workers_end,
        "tracking": mtime["outcome.json"] - mtime["mlflow_run.json"],
        "exit": wall_s - mtime["outcome.json"],
    }


@contextlib.contextmanager
def work_dir(keep: Path | None, prefix: str) -> Iterator[Path]:
    """Where job dirs and the store go: `keep` (an empty dir, kept afterwards for inspection)
    or a temporary dir removed at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def composed(overrides: list[str]) -> Any:
    """distbench's config for `overrides` (what run.py would compose)."""
    from hydra import compose, initialize_config_dir

    from distbench.compose.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_DIR / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def conf_batch_shape(batch: str) -> tuple[int, int, int]:
    """(micro_batch_size, grad_accum_steps, seq_len) of conf/batch/<batch>.yaml."""
    cfg = composed([f"batch={batch}"]).batch
    return cfg.micro_batch_size, cfg.grad_accum_steps, cfg.seq_len


def save_start_model(model: str, work: Path) -> None:
    """What the bare scripts start from. `model=tiny`: the weights distbench starts from (seed
    1234), saved for `from_pretrained`: both sides train the same model (equal first losses).
    Larger models: their transformers config only (saving and loading GBs of weights would time
    the disk, not the harness); both sides build on the device with random weights."""
    from distbench.ranks.models import build_model, hf_config

    cfg = composed([f"model={model}"])
    if model == "tiny":
        build_model(cfg.model, "fp32", cfg.workload.seed).save_pretrained(work / "weights")
    else:
        hf_config(cfg.model).save_pretrained(work / "model_config")


def create_store(work: Path) -> float:
    """Create the temporary sqlite store and experiment (as a user's first run does); its time."""
    code = "import sys; from distbench.tracking.mlflow_store import ensure_experiment as e; "
    code += "e(sys.argv[1], 'distbench')"
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{work}/mlflow.db"],
        check=True,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
    )
    return time.monotonic() - start


def summarize(bare: list[dict], ours: list[dict]) -> dict[str, Any]:
    """One strategy's figures: medians over the repeats, and each repeat's pair."""
    bare_p50 = median(r["step_time_s_p50"] for r in bare)
    ours_p50 = median(r["step_time_s_p50"] for r in ours)
    bare_wall = median(r["wall_s"] for r in bare)
    ours_wall = median(r["wall_s"] for r in ours)
    phase_names = ours[0]["phases_s"]
    pairs = zip(bare, ours, strict=True)
    pair_ratios = [b["step_time_s_p50"] / a["step_time_s_p50"] for a, b in pairs]
    return {
        "bare_step_time_s_p50": bare_p50,
        "distbench_step_time_s_p50": ours_p50,
        "step_p50_ratio": ours_p50 / bare_p50,
        # each A B pair's ratio: how far noise alone moves it
        "step_p50_ratio_pairs_min": min(pair_ratios),
        "step_p50_ratio_pairs_max": max(pair_ratios),
        "bare_wall_s": bare_wall,
        "distbench_wall_s": ours_wall,
        "fixed_cost_s": ours_wall - bare_wall,
        "workers_minus_bare_s": median(r["phases_s"]["workers"] for r in ours) - bare_wall,
        "orchestrator_peak_rss_mb": max(r["orchestrator_peak_rss_mb"] for r in ours),
        "distbench_phases_s": {k: median(r["phases_s"][k] for r in ours) for k in phase_names},
        "loss_first_bare": bare[0]["loss_first"],
        "loss_first_distbench": ours[0]["loss_first"],
        "pairs": [{"bare": a, "distbench": b} for a, b in zip(bare, ours, strict=True)],
    }


def verdicts(figures: dict[str, Any]) -> dict[str, bool]:
    """Pass/fail of each target for one strategy."""
    return {
        "step_p50_ratio": figures["step_p50_ratio"] <= TARGET_STEP_P50_RATIO,
        "fixed_cost_s": figures["fixed_cost_s"] <= TARGET_FIXED_COST_S,
        "orchestrator_peak_rss_mb": figures["orchestrator_peak_rss_mb"]
        <= TARGET_ORCHESTRATOR_RSS_MB,
    }


def measure(strategy: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Warm-up rounds (not kept), then A B alternated `repeats` times."""
    for i in range(args.warmup_rounds):
        run_bare(strategy, args, work)
        run_distbench(strategy, args, work, -1 - i)
    bare, ours = [], []
    for i in range(args.repeats):
        bare.append(run_bare(strategy, args, work))
        ours.append(run_distbench(strategy, args, work, i))
        print(
            f"  {strategy} repeat {i + 1}/{args.repeats}: bare {bare[-1]['wall_s']:.1f} s "
            f"(p50 {bare[-1]['step_time_s_p50']:.3f}), distbench {ours[-1]['wall_s']:.1f} s "
            f"(p50 {ours[-1]['step_time_s_p50']:.3f}), load {ours[-1]['load_avg_1m']:.2f}",
            flush=True,
        )
    figures = summarize(bare, ours)
    figures["pass"] = verdicts(figures)
    return figures


def mark(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def table_rows(per_strategy: dict[str, dict]) -> list[list[str]]:
    """The main table's rows: one per strategy."""
    rows = []
    for name, f in per_strategy.items():
        ok = f["pass"]
        rows.append(
            [
                name,
                f"{f['bare_step_time_s_p50']:.3f}",
                f"{f['distbench_step_time_s_p50']:.3f}",
                f"{f['step_p50_ratio']:.3f} {mark(ok['step_p50_ratio'])}",
                f"{f['step_p50_ratio_pairs_min']:.2f}..{f['step_p50_ratio_pairs_max']:.2f}",
                f"{f['bare_wall_s']:.1f}",
                f"{f['distbench_wall_s']:.1f}",
                f"{f['fixed_cost_s']:.1f} {mark(ok['fixed_cost_s'])}",
                f"{f['orchestrator_peak_rss_mb']:.0f} {mark(ok['orchestrator_peak_rss_mb'])}",
            ]
        )
    return rows


HEADERS = [
    "strategy",
    "bare p50 (s)",
    "distbench p50 (s)",
    "ratio (≤1.03)",
    "pairs' ratios",
    "bare wall (s)",
    "distbench wall (s)",
    "fixed cost (s, ≤5)",
    "orch. RSS (MB, ≤400)",
]
PHASE_HEADERS = ["strategy", "startup", "pre_launch", "workers", "post", "tracking", "exit"]


def phase_rows(per_strategy: dict[str, dict]) -> list[list[str]]:
    """Where distbench's wall time goes (s, medians), with the bare script's wall to compare."""
    rows = []
    for name, f in per_strategy.items():
        p = f["distbench_phases_s"]
        cells = [f"{p[k]:.2f}" for k in PHASE_HEADERS[1:]]
        cells[2] += f" (bare {f['bare_wall_s']:.2f})"
        rows.append([name, *cells])
    return rows


def print_tables(per_strategy: dict[str, dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    for title, headers, rows in (
        ("distbench vs a bare torchrun script (medians)", HEADERS, table_rows(per_strategy)),
        ("distbench's wall time by phase (s)", PHASE_HEADERS, phase_rows(per_strategy)),
    ):
        table = Table(title=title)
        for header in headers:
            table.add_column(header, justify="left" if header == "strategy" else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def markdown(summary: dict[str, Any]) -> str:
    """The results as markdown tables with the conditions they were measured under."""
    per = summary["strategies"]
    lines = [f"# distbench harness overhead ({summary['machine']['date']})", ""]
    lines += [f"Command: `{summary['command']}`", ""]
    lines += [
        f"Machine: {summary['machine']['cpu_model']}, {summary['machine']['cpu_cores']} cores; "
        f"1-min load average {summary['load_avg_1m_start']:.2f} at start, "
        f"{summary['load_avg_1m_end']:.2f} at end, max {summary['load_avg_1m_max']:.2f} "
        f"before a run; {summary['repeats']} repeats of {summary['num_warmup_steps']} + "
        f"{summary['num_steps']} steps; store created in {summary['store_create_s']:.1f} s.",
        "",
    ]
    for headers, rows in ((HEADERS, table_rows(per)), (PHASE_HEADERS, phase_rows(per))):
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "---|" * len(headers))
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat of 1 + 3 steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strategies", default="ddp,dp")
    parser.add_argument("--world-size", type=int, default=DEFAULT_WORLD_SIZE)
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="default: cuda where --world-size GPUs are visible (distbench's hardware=auto "
        "picks the same), else cpu",
    )
    parser.add_argument("--model", default="tiny", help="conf/model/<name>")
    parser.add_argument("--batch", default="small", help="conf/batch/<name>")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--num-warmup-steps", type=int, default=3)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--warmup-rounds", type=int, default=1, help="A B rounds not kept")
    parser.add_argument("--out-dir", type=Path, default=PROJECT_DIR / "benchmarks" / "results")
    parser.add_argument("--work-dir", type=Path, help="an empty dir to keep runs in")
    args = parser.parse_args()
    if args.device is None:
        args.device = "cuda" if len(gpu_names()) >= args.world_size else "cpu"
    if args.quick:
        args.repeats, args.num_warmup_steps, args.num_steps, args.warmup_rounds = 1, 1, 3, 0
    return args


def main() -> None:
    args = parse_args()
    load_start, started = load_avg_1m(), machine()
    per_strategy = {}
    with work_dir(args.work_dir, "harness_overhead_") as work:
        store_create_s = create_store(work)
        save_start_model(args.model, work)
        for strategy in args.strategies.split(","):
            per_strategy[strategy] = measure(strategy, args, work)
    print_tables(per_strategy)
    loads = [r[s]["load_avg_1m"] for f in per_strategy.values() for r in f["pairs"] for s in r]
    summary = {
        "command": " ".join(["python benchmarks/harness_overhead.py", *sys.argv[1:]]),
        "quick": args.quick,
        "machine": started,
        "world_size": args.world_size,
        "device": args.device,
        "model": args.model,
        "batch": args.batch,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "num_warmup_steps": args.num_warmup_steps,
        "num_steps": args.num_steps,
        "store_create_s": store_create_s,
        "load_avg_1m_start": load_start,
        "load_avg_1m_end": load_avg_1m(),
        "load_avg_1m_max": max(loads),
        "targets": {
            "step_p50_ratio_max": TARGET_STEP_P50_RATIO,
            "fixed_cost_s_max": TARGET_FIXED_COST_S,
            "orchestrator_peak_rss_mb_max": TARGET_ORCHESTRATOR_RSS_MB,
        },
        "strategies": per_strategy,
        "all_pass": all(all(f["pass"].values()) for f in per_strategy.values()),
    }
    stem = "harness_overhead_quick" if args.quick else "harness_overhead"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    (args.out_dir / f"{stem}.md").write_text(markdown(summary))
    summary["results_path"] = str(args.out_dir / f"{stem}.json")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
