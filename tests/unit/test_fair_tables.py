"""Terminal tables (tools/columns.py, tools/summary.py, tools/sweep_state.py): a sweep's varied
keys as columns, constant columns in the caption, the width respected (100 columns, rendered
with rich), and a sweep in progress with its running and pending jobs (a real live process as
the running job's orchestrator)."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys

import psutil
import pytest
import yaml
from rich.console import Console

from distbench.tools import summary
from distbench.tools.columns import (
    KEEP,
    Col,
    fit_columns,
    short_headers,
    split_constant,
    varied_keys,
)
from distbench.tools.sweep_state import load_outcomes, pending_jobs

pytestmark = pytest.mark.unit


def render(table, width: int = 100) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def train_outcome(name: str, strategy: str, ws: int, dp: int, tp: int, tokens: int) -> dict:
    return {
        "job": name,
        "run_name": name,
        "strategy": strategy,
        "world_size": str(ws),
        "zero_stage": "3" if strategy == "zero3" else "0",
        "model": "tiny",
        "workload": "train",
        "status": "FINISHED",
        "equivalent": "true",
        "layout": {"dp": dp, "tp": tp, "pp": 1},
        "metrics": {
            "step_time_s_p50": 0.894,
            "step_time_s_p90": 1.023,
            "throughput_tokens_per_s": 1146.0,
            "tflops_per_device": 0.0181,
            "mfu_pct": 27.56,
            "peak_mem_gib": 0.73,
            "cost_usd_per_1m_tokens": 0.0433,
            "tokens_per_step": float(tokens),
        },
    }


README = [
    train_outcome("dp-ws2", "dp", 2, 2, 1, 1024),
    train_outcome("dp-ws4", "dp", 4, 4, 1, 2048),
    train_outcome("tp-ws2", "tp", 2, 1, 2, 512),
    train_outcome("tp-ws4", "tp", 4, 2, 2, 1024),
    train_outcome("zero3-ws2", "zero3", 2, 2, 1, 1024),
    train_outcome("zero3-ws4", "zero3", 4, 4, 1, 2048),
]


def test_the_end_table_fits_100_columns_with_layout_and_tokens_per_step():
    text = render(summary.summary_table(README, "distbench sweep multirun/x", width=100))
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100
    header = "\n".join(lines[:6])
    for column in ("strategy", "ws", "dp×tp×pp", "tok/step", "tokens/s"):
        assert column in header, column
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 6
    tp2 = next(line for line in rows if "│ tp " in line and "│  2 │" in line)
    assert "1×2×1" in tp2 and "512" in tp2
    # every row FINISHED and equivalent: one caption line, not two columns
    assert "every row: status FINISHED, = single yes" in text
    assert "tok/step differs" in text and "batch.global_batch_tokens=2048" in text
    assert "hidden to fit 100 columns:" in text  # low-priority metrics: a wider terminal shows
    wide = render(summary.summary_table(README, "t", width=200), width=200)
    assert "hidden" not in wide and "step p90 (s)" in wide and "$/1M tok" in wide


def test_columns_are_dropped_lowest_priority_first_and_constants_leave_for_the_caption():
    cols = [
        Col("name", ["a", "b"], "left", KEEP),
        Col("x", ["1", "1"], priority=4),
        Col("wide metric", ["123456789"] * 2, priority=1),
        Col("y", ["2", "3"], priority=5),
    ]
    kept, dropped = fit_columns(cols, width=20)
    assert [c.header for c in dropped] == ["wide metric"]
    assert [c.header for c in kept] == ["name", "x", "y"]
    moved, constant = split_constant(cols, movable={"x", "y"})
    assert constant == [("x", "1")] and [c.header for c in moved] == ["name", "wide metric", "y"]
    _, alone = split_constant([Col("x", ["1"])], movable={"x"})
    assert alone == []  # one row: nothing to compare, every column stays


def test_the_keys_a_sweep_varies_become_columns_with_short_headers(tmp_path):
    per_job = [
        {"strategy": "zero2", "batch.micro_batch_size": "1", "model": "tiny", "world_size": "2"},
        {"strategy": "zero2", "batch.micro_batch_size": "4", "model": "tiny", "world_size": "2"},
        {"strategy": "zero2", "batch.micro_batch_size": "4", "model": "gpt2", "world_size": "2"},
    ]
    assert varied_keys(per_job, shown={"strategy"}) == ["batch.micro_batch_size", "model"]
    assert short_headers(["batch.micro_batch_size", "a.seq_len", "b.seq_len", "x.y_z"]) == {
        "batch.micro_batch_size": "micro batch",
        "a.seq_len": "a.seq_len",  # two share a last part: the whole key
        "b.seq_len": "b.seq_len",
        "x.y_z": "y z",
    }
    # four Optuna trials of one strategy: each row shows its sampled micro batch (its overrides)
    outcomes = []
    for i, mbs in enumerate((1, 3, 8, 3)):
        job_dir = tmp_path / str(i)
        (job_dir / ".hydra").mkdir(parents=True)
        overrides = ["experiments=optuna_search", "world_size=2", f"batch.micro_batch_size={mbs}"]
        (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        outcome = train_outcome(f"zero2-ws2-trial{i}", "zero2", 2, 2, 1, 512 * mbs)
        outcomes.append({**outcome, "job_dir": str(job_dir)})
    text = render(summary.summary_table(outcomes, "optuna", width=100))
    header_lines = text.splitlines()[1:4]
    assert any("micro" in line for line in header_lines)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [row.split("│")[2].strip() for row in rows] == ["1", "3", "8", "3"]


def test_a_sweep_in_progress_shows_its_running_and_pending_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    task = ["strategy=dp,zero3", "world_size=2,4"]  # as Hydra's multirun.yaml records them
    hydra = {"hydra": {"sweeper": {"params": None}, "overrides": {"task": task}}}
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(hydra))
    ended = sweep / "0"
    (ended / ".hydra").mkdir(parents=True)
    (ended / "outcome.json").write_text(json.dumps(README[0]))
    # job 1 runs: its orchestrator (orchestrator.json) is this live process
    running = sweep / "1"
    (running / ".hydra").mkdir(parents=True)
    (running / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["strategy=zero3"]))
    me = psutil.Process()
    owner = {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}
    (running / "orchestrator.json").write_text(json.dumps(owner))
    tree = {
        "workload": {"name": "train"},
        "world_size": 2,
        "layout": {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "zero_stage": 3},
        "strategy": {"name": "zero3"},
        "model": {"name": "tiny"},
        "batch": {"micro_batch_size": 2, "grad_accum_steps": 2, "seq_len": 128},
    }
    (running / "resolved.yaml").write_text(yaml.safe_dump(tree))
    step = {"phase": "timed", "step": 3, "num_steps": 10}
    (running / "progress.jsonl").write_text(json.dumps(step) + "\n")
    # job 2's orchestrator died: neither ended nor running
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (sweep / "2" / ".hydra").mkdir(parents=True)
    lost = {"host": socket.gethostname(), "pid": dead.pid, "started": 0.0}
    (sweep / "2" / "orchestrator.json").write_text(json.dumps(lost))

    assert [o["status"] for o in load_outcomes(sweep)] == ["FINISHED"]
    outcomes = load_outcomes(sweep, running=True)
    assert [o["status"] for o in outcomes] == ["FINISHED", "RUNNING"]
    assert outcomes[1]["tokens_per_step"] == 1024.0 and outcomes[1]["zero_stage"] == "3"
    assert pending_jobs(sweep) == 1  # 4 jobs, 3 dirs
    text = render(summary.summary_table(outcomes, "sweep", width=100))
    row = next(line for line in text.splitlines() if "RUNNING" in line)
    assert "zero3" in row and "step 3/10" in row and "2×1×1" in row and "1,024" in row
    printed = io.StringIO()
    console = Console(file=printed, width=100)
    console.print(summary.pending_text(outcomes, pending_jobs(sweep)))
    assert "sweep in progress: 1 ended, 1 running, 1 pending" in printed.getvalue()
