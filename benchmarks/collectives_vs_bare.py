"""distbench's all_reduce bus bandwidth next to a bare torch.distributed loop, same sizes, one run.

distbench times each call alone (barrier + device sync around it, the slowest rank, p50); the
bare loop is nccl-tests' way: barrier, then `iters` back-to-back calls, total / iters. The ratio
distbench / bare per size shows what the per-call method costs (near 1 for large messages).

    .venv/bin/python benchmarks/collectives_vs_bare.py              # 2 ranks, 1 KiB..4 MiB
    .venv/bin/python benchmarks/collectives_vs_bare.py --quick      # smoke: 3 sizes, 3 calls
    .venv/bin/python benchmarks/collectives_vs_bare.py --world-size 4 --max-bytes 16777216

Figures and tables go to benchmarks/results/<time>/ (git-ignored); the last stdout line is one
JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR / "src"))

from distbench.workloads.collectives import metrics as cm  # noqa: E402


def bare_loop(out_path: Path, sizes: list[int], num_warmup: int, num_iters: int) -> None:
    """A torchrun rank: per size, warm-up, barrier, num_iters all_reduce calls; the slowest
    rank's mean time per call goes to out_path (rank 0)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    times = {}
    for size in sizes:
        buf = torch.zeros(cm.element_count(size, 4, "all_reduce", dist.get_world_size()))
        for _ in range(num_warmup):
            dist.all_reduce(buf)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(num_iters):
            dist.all_reduce(buf)
        elapsed = torch.tensor([(time.perf_counter() - start) / num_iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times[size] = float(elapsed.item())
    if rank == 0:
        out_path.write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


def run_bare(out_dir: Path, n: int, sizes: list[int], num_warmup: int, num_iters: int) -> dict:
    from distbench.launch.workers import free_port
    from distbench.probes.detect import num_cpu_cores

    out = out_dir / "bare.json"
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, num_cpu_cores() // n)))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}"]
    cmd += ["--master_addr=127.0.0.1", f"--master_port={free_port()}", __file__, "--bare"]
    cmd += [str(out), ",".join(map(str, sizes)), str(num_warmup), str(num_iters)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def run_distbench(out_dir: Path, n: int, args: argparse.Namespace) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from distbench.compose.schema import register_configs
    from distbench.orchestrator import run_job

    os.environ.setdefault("DISTBENCH_HOME", str(PROJECT_DIR))
    register_configs()
    overrides = [
        "workload=collectives",
        "collectives.ops=[all_reduce]",
        f"world_size={n}",
        f"collectives.min_bytes={args.min_bytes}",
        f"collectives.max_bytes={args.max_bytes}",
        f"collectives.factor={args.factor}",
        f"workload.num_warmup_steps={args.warmup}",
        f"workload.num_steps={args.iters}",
        "tracking=none",
    ]
    with initialize_config_dir(config_dir=str(PROJECT_DIR / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    job_dir = out_dir / "distbench"
    outcome = run_job(cfg, job_dir, PROJECT_DIR / "conf", PROJECT_DIR)
    if outcome["status"] != "FINISHED":
        raise SystemExit(f"distbench job failed: {outcome.get('failure_reason')}")
    result = json.loads((job_dir / "result.json").read_text())
    from distbench.figures.metrics import percentile

    return {p["size_bytes"]: percentile(p["times_s"], 50) for p in result["points"]}


def plot(out_dir: Path, n: int, sizes: list[int], ours: list[float], bare: list[float]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, ours, "o-", label="distbench (per call, barrier, p50)")
    ax.plot(sizes, bare, "s--", label="bare loop (back-to-back, mean)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all_reduce busbw (GB/s)")
    ax.set_title(f"all_reduce, {n} gloo ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out_dir / "collectives_vs_bare.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--bare":  # a torchrun rank of run_bare()
        out, sizes, warm, iters = sys.argv[2:6]
        bare_loop(Path(out), [int(s) for s in sizes.split(",")], int(warm), int(iters))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke: 3 sizes, 3 timed calls")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=4 * 2**20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if args.quick:
        args.max_bytes, args.factor, args.warmup, args.iters = 65536, 8, 1, 3
    n = args.world_size
    sizes = cm.message_sizes(args.min_bytes, args.max_bytes, args.factor)
    out_dir = PROJECT_DIR / "benchmarks" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    ours = run_distbench(out_dir, n, args)
    bare = run_bare(out_dir, n, sizes, args.warmup, args.iters)
    busbw_ours = [cm.busbw_gbps(s, ours[s], "all_reduce", n) for s in sizes]
    busbw_bare = [cm.busbw_gbps(s, bare[s], "all_reduce", n) for s in sizes]
    ratios = [a / b for a, b in zip(busbw_ours, busbw_bare, strict=True)]
    print(f"{'bytes':>10} {'distbench GB/s':>15} {'bare GB/s':>10} {'ratio':>6}")
    for s, a, b, r in zip(sizes, busbw_ours, busbw_bare, ratios, strict=True):
        print(f"{s:>10} {a:>15.4f} {b:>10.4f} {r:>6.2f}")
    figure = plot(out_dir, n, sizes, busbw_ours, busbw_bare)
    summary = {
        "world_size": n,
        "sizes_bytes": sizes,
        "busbw_gbps_distbench": busbw_ours,
        "busbw_gbps_bare": busbw_bare,
        "ratio": ratios,
        "ratio_largest": ratios[-1],
        "ratio_median": sorted(ratios)[len(ratios) // 2],
        "figure": str(figure),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
