"""The collectives workload for real: gloo ranks through torchrun and the worker.

Every call's result was checked in place by the ranks (a wrong one fails the job); here the
table must cover every collective and size, report zero error in fp32, and busbw / algbw must
be nccl-tests' bus factor for n ranks, written out by hand. 2 ranks with the standard
equivalents of three collectives forced; every collective natively on 4 ranks is
tests/e2e/test_raw_workloads.py's run through run.py. The job runs under the device audit
(tests/distributed/test_device_audit.py): a tensor made without naming its device fails it.

    pytest tests/distributed/test_collectives.py -m distributed
"""

from __future__ import annotations

import csv
import json

import pytest

from distbench.orchestrator import run_job
from distbench.ranks.worker import DEVICE_AUDIT_ENV
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed

FAST = [
    "tracking=none",
    "workload=collectives",
    "workload.num_warmup_steps=1",
    "workload.num_steps=2",
    "collectives.min_bytes=1024",
    "collectives.max_bytes=65536",
    "collectives.factor=4",
]
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"]
EMULATED = {
    "all_gather": "all_gather (tensor list)",
    "reduce_scatter": "all_reduce + slice",
    "all_to_all": "isend/irecv to each peer",
}
BUS_FACTOR = {  # nccl-tests doc/PERFORMANCE.md
    2: {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5},
    4: {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "all_to_all": 0.75},
}


def run(tmp_path, overrides):
    outcome = run_job(compose_config([*FAST, *overrides]), tmp_path, CONF_DIR, PROJECT_DIR)
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    rows = list(csv.DictReader((tmp_path / "collectives.csv").open()))
    return outcome, json.loads((tmp_path / "result.json").read_text()), rows


def test_every_collective_is_checked_and_busbw_uses_the_bus_factor(tmp_path, monkeypatch):
    monkeypatch.setenv(DEVICE_AUDIT_ENV, "1")
    world_size, emulate = 2, sorted(EMULATED)
    outcome, result, rows = run(
        tmp_path, [f"world_size={world_size}", f"collectives.emulate=[{','.join(emulate)}]"]
    )
    assert result["backend"] == "gloo"
    # torch 2.13's gloo has every collective: only the forced ones are emulated
    assert result["emulated"] == {op: EMULATED[op] for op in emulate}
    assert [(r["collective"], int(r["size_bytes"])) for r in rows] == [
        (op, size) for op in OPS for size in (1024, 4096, 16384, 65536)
    ]
    for row in rows:
        assert float(row["check_max_rel_err"]) == 0.0, row  # fp32 sums of small integers: exact
        op = row["collective"]
        assert row["implementation"] == (EMULATED[op] if op in emulate else "native")
        algbw, busbw = float(row["algbw_gbps"]), float(row["busbw_gbps"])
        want = BUS_FACTOR[world_size].get(op, 1.0)
        assert busbw / algbw == pytest.approx(want, rel=1e-12), op
        assert algbw > 0
    for point in result["points"]:
        assert len(point["times_s"]) == 2 and min(point["times_s"]) > 0
    metrics = outcome["metrics"]
    for op in OPS:
        assert metrics[f"busbw_gbps_peak.{op}"] > 0
        assert metrics[f"latency_s_min_bytes.{op}"] > 0
        assert f"alpha_s.{op}" in metrics
        assert metrics[f"emulated.{op}"] == float(op in emulate)
    lines = [json.loads(x) for x in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert len(lines) == len(rows) and lines[-1]["step"] == lines[-1]["num_steps"] == len(rows)
