"""collectives.measure() on a result.json of known times: the table, the series stepped by
message size, the per-collective summaries (peak busbw, α-β fit) and the CSV/PNG artifacts.
Pure: no ranks are started (tests/distributed runs the real thing)."""

from __future__ import annotations

import csv

import pytest

from distbench.job import resolve_job
from distbench.workloads.collectives import workload as collectives
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

ALPHA, BETA = 50e-6, 2e9  # s, B/s
SIZES = [1024, 16384, 262144, 4194304]


def result_of(tmp_path, ops=("all_reduce", "all_gather", "send_recv")):
    points = [
        {
            "op": op,
            "size_bytes": s,
            "count": s // 4,
            "times_s": [ALPHA + s / BETA] * 3,
            "check_max_rel_err": 0.0,
        }
        for op in ops
        for s in SIZES
    ]
    return {
        "points": points,
        "emulated": {"all_gather": "all_gather (tensor list)"},
        "skipped": {},
        "dtype": "fp32",
        "run_dir": str(tmp_path),
    }


def test_measure_logs_series_by_size_summaries_and_artifacts(tmp_path):
    job = resolve_job(compose_config(["workload=collectives", "world_size=4"]), CONF_DIR)
    measured = collectives.measure(job, result_of(tmp_path))
    series = {}
    for name, value, step in measured.series:
        series.setdefault(name, {})[step] = value
    assert sorted(series["busbw_gbps.all_reduce"]) == SIZES
    for s in SIZES:
        algbw = s / (ALPHA + s / BETA) / 1e9
        assert series["algbw_gbps.all_reduce"][s] == pytest.approx(algbw, rel=1e-12)
        assert series["busbw_gbps.all_reduce"][s] == pytest.approx(1.5 * algbw, rel=1e-12)
        assert series["busbw_gbps.all_gather"][s] == pytest.approx(0.75 * algbw, rel=1e-12)
        assert series["busbw_gbps.send_recv"][s] == pytest.approx(algbw, rel=1e-12)
    m = measured.metrics
    assert m["alpha_s.all_reduce"] == pytest.approx(ALPHA, rel=1e-9)
    assert m["beta_algbw_gbps.all_reduce"] == pytest.approx(BETA / 1e9, rel=1e-9)
    assert m["beta_busbw_gbps.all_reduce"] == pytest.approx(1.5 * BETA / 1e9, rel=1e-9)
    assert m["latency_s_min_bytes.all_reduce"] == pytest.approx(ALPHA + 1024 / BETA)
    assert m["busbw_gbps_peak.all_reduce"] == max(series["busbw_gbps.all_reduce"].values())
    assert (m["emulated.all_gather"], m["emulated.all_reduce"]) == (1.0, 0.0)
    assert m["num_sizes"] == 4
    names = sorted(p.name for p in measured.artifacts)
    assert names == ["collectives.csv", "collectives.txt", "collectives_busbw.png"]
    rows = list(csv.DictReader((tmp_path / "collectives.csv").open()))
    assert len(rows) == 12
    gather = [r for r in rows if r["collective"] == "all_gather"]
    assert {r["implementation"] for r in gather} == {"all_gather (tensor list)"}
    assert (tmp_path / "collectives_busbw.png").read_bytes()[:4] == b"\x89PNG"
