"""Where a sweep dir stands: the outcome of each job that ended (its outcome.json), the jobs
running now (a job dir without outcome.json whose orchestrator, named by its orchestrator.json,
is alive on this host: orphans.owner_gone), and how many have not started (the sweep's job count
from its multirun.yaml, less the job dirs). `distbench summary` shows a sweep in progress so.

    python -c "from distbench.tools.sweep_state import *; print(pending_jobs(Path('multirun/x')))"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distbench.workloads import counts_batch_tokens

OUTCOME_FILE = "outcome.json"
PROGRESS_FILE = "progress.jsonl"  # the ranks' step lines (workloads/train/workload.py)


def _job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's job dirs (an outcome.json or Hydra's .hydra in them) in job order (Hydra
    names them 0, 1, 2, ...)."""
    dirs = [
        p
        for p in sweep_dir.iterdir()
        if p.is_dir() and ((p / OUTCOME_FILE).is_file() or (p / ".hydra").is_dir())
    ]
    return sorted(dirs, key=lambda p: (len(p.name), p.name))


def load_outcomes(sweep_dir: Path, running: bool = False) -> list[dict[str, Any]]:
    """Every ended job's outcome in job order; with `running`, a RUNNING row (running_row) in
    its place for each job whose orchestrator is alive."""
    from distbench.orphans import OWNER_FILE, owner_gone

    out = []
    for job_dir in _job_dirs(Path(sweep_dir)):
        path = job_dir / OUTCOME_FILE
        if path.is_file():
            out.append(json.loads(path.read_text()))
        elif running and (job_dir / OWNER_FILE).is_file() and owner_gone(job_dir) is None:
            out.append(running_row(job_dir))
    return out


def running_row(job_dir: Path) -> dict[str, Any]:
    """A running job as a table row: what its resolved.yaml says (strategy, world size,
    layout, ZeRO stage, tokens per step; its overrides until it has one) and its last step."""
    import yaml

    from distbench.tools.columns import job_overrides

    number = int(job_dir.name) + 1 if job_dir.name.isdigit() else job_dir.name
    row: dict[str, Any] = {"job": f"job {number}", "status": "RUNNING"}
    row.update(job_dir=str(job_dir), metrics={}, progress=_last_step(job_dir))
    overrides = job_overrides(job_dir)
    row.update(strategy=overrides.get("strategy", "?"), world_size=overrides.get("world_size", "?"))
    row["zero_stage"] = overrides.get("zero_stage", "?")
    try:
        tree = yaml.safe_load((job_dir / "resolved.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return row  # still resolving or probing: what its overrides say
    layout, batch = tree.get("layout") or {}, tree.get("batch") or {}
    workload = (tree.get("workload") or {}).get("name", "?")
    row.update(workload=workload, world_size=str(tree.get("world_size", "?")), layout=layout)
    row["strategy"] = (tree.get("strategy") or {}).get("name", workload)
    row["zero_stage"] = "none" if layout.get("zero_stage") is None else str(layout["zero_stage"])
    row["model"] = (tree.get("model") or {}).get("name", "none")
    keys = ("micro_batch_size", "grad_accum_steps", "seq_len")
    counted = all(isinstance(batch.get(k), int) for k in keys) and isinstance(layout.get("dp"), int)
    if counted and counts_batch_tokens(workload):  # another workload counts its own tokens
        row["tokens_per_step"] = float(
            batch["micro_batch_size"] * batch["grad_accum_steps"] * batch["seq_len"] * layout["dp"]
        )
    return row


def _last_step(job_dir: Path) -> str:
    """`step 3/10` from the job's last progress line, or `starting` before its first step."""
    try:
        lines = (job_dir / PROGRESS_FILE).read_text().splitlines()
        last = json.loads(lines[-1])
        return f"step {last['step']}/{last['num_steps']}"
    except (OSError, IndexError, KeyError, ValueError):
        return "starting"


def sweep_size(sweep_dir: Path) -> int | None:
    """How many jobs the sweep runs, from the multirun.yaml Hydra wrote at its start (a
    sampler's trial budget, else the product of the swept choices); None when unknown."""
    from omegaconf import OmegaConf

    from distbench.tracking.sweep import num_sweep_jobs

    path = Path(sweep_dir) / "multirun.yaml"
    try:
        hydra_cfg = OmegaConf.load(path).hydra
        task = OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)
        return num_sweep_jobs(hydra_cfg, [str(o) for o in task])
    except Exception:  # absent or not Hydra's: the count is unknown
        return None


def pending_jobs(sweep_dir: Path) -> int | None:
    """Jobs of the sweep not started yet (no job dir); None when its size is unknown."""
    total = sweep_size(sweep_dir)
    return None if total is None else max(0, total - len(_job_dirs(Path(sweep_dir))))


def pending_text(outcomes: list[dict[str, Any]], pending: int | None) -> str:
    """`sweep in progress: 4 ended, 1 running, 1 pending`."""
    running = sum(o["status"] == "RUNNING" for o in outcomes)
    ended = len(outcomes) - running
    text = f"sweep in progress: {ended} ended, {running} running"
    return text + (f", {pending} pending" if pending is not None else "")
