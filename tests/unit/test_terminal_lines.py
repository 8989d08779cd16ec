"""What the terminal and the job log show, as pure functions: the torchtitan-style step line and
its figures, the file-only logging of the job's lines, the end table's step-time spread and the
columns that apply, and nccl-tests' table for the collectives workload.

pytest tests/unit/test_terminal_lines.py -m unit
"""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from distbench.figures.metrics import GIB, step_figures, step_spread_pct
from distbench.job import resolve_job
from distbench.launch import progress
from distbench.tools import summary
from distbench.workloads.collectives import metrics as cm
from distbench.workloads.collectives import report
from distbench.workloads.collectives import workload as collectives
from distbench.workloads.train.workload import step_summary
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit


def test_step_figures_are_the_run_metrics_formulas_on_one_step():
    figures = step_figures(
        step_time_s=0.5,
        num_tokens_per_step=4096,
        flops_per_token=1e9,
        world_size=4,
        peak_tflops_per_device=10.0,
        peak_mem_bytes=8 * GIB,
        device_mem_gib=80.0,
    )
    assert figures == pytest.approx(
        {
            "throughput_tokens_per_s": 8192.0,
            "throughput_tokens_per_s_per_device": 2048.0,
            "tflops_per_device": 8192.0 * 1e9 / 1e12 / 4,
            "mfu_pct": 100 * (8192.0 * 1e9 / 1e12 / 4) / 10.0,
            "peak_mem_gib": 8.0,
            "peak_mem_pct": 10.0,
        }
    )
    unknown = step_figures(
        step_time_s=0.5,
        num_tokens_per_step=4096,
        flops_per_token=1e9,
        world_size=4,
        peak_tflops_per_device=None,
        peak_mem_bytes=GIB,
        device_mem_gib=None,
    )
    assert "mfu_pct" not in unknown and "peak_mem_pct" not in unknown


def test_a_step_is_the_mean_loss_the_slowest_time_and_the_largest_memory():
    assert step_summary([[2.0, 0.1, 100.0], [3.0, 0.3, 50.0]]) == (2.5, 0.3, 100)


def test_the_train_step_line_reads_like_torchtitans():
    line = {
        "phase": "timed",
        "step": 5,
        "num_steps": 13,
        "step_time_s": 0.3125,
        "loss": 10.37421,
        "throughput_tokens_per_s": 3274.4,
        "throughput_tokens_per_s_per_device": 1637.2,
        "tflops_per_device": 0.01234,
        "mfu_pct": 31.2,
        "peak_mem_gib": 0.734,
        "peak_mem_pct": 0.92,
        "time_unix_s": 1.0,
    }
    assert progress.format_step_line(line) == (
        "   timed step 5/13  312.50 ms  loss 10.3742  tok/s 3,274 (1,637/dev)  "
        "TFLOP/s/dev 0.01234  MFU 31.20%  mem 0.73 GiB (0.9%)"
    )


def test_a_collective_call_line_shows_its_size_time_and_busbw_not_zero_seconds():
    line = {
        "phase": "all_reduce",
        "step": 3,
        "num_steps": 24,
        "step_time_s": 4.567e-5,
        "size_bytes": 65536.0,
        "busbw_gbps": 1.43503,
    }
    assert progress.format_step_fields(line) == "64 KiB  45.67 us  busbw 1.435 GB/s"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.500 s"), (0.0123, "12.30 ms"), (4.5e-6, "4.50 us")],
)
def test_durations_read_in_their_unit(seconds, text):
    assert progress.format_duration(seconds) == text


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [(512, "512 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (256 * 2**20, "256 MiB")],
)
def test_sizes_read_in_binary_units(num_bytes, text):
    assert progress.format_bytes(num_bytes) == text


def test_job_lines_go_to_the_log_files_and_not_twice_to_the_console(tmp_path):
    """Hydra's job_logging: a console handler and a FileHandler (run.log) on the root logger.
    The line is printed already, so only the file gets it."""
    root = logging.getLogger()
    console_stream = io.StringIO()
    console = logging.StreamHandler(console_stream)
    log_file = logging.FileHandler(tmp_path / "run.log")
    old_level = root.level
    root.addHandler(console)
    root.addHandler(log_file)
    root.setLevel(logging.INFO)
    try:
        assert progress.log_to_files("   timed step 2/3  0.300 s") >= 1  # (+ pytest's own)
    finally:
        root.removeHandler(console)
        root.removeHandler(log_file)
        root.setLevel(old_level)
        log_file.close()
    assert (tmp_path / "run.log").read_text() == "   timed step 2/3  0.300 s\n"
    assert console_stream.getvalue() == ""


def test_the_orchestrators_own_lines_reach_run_log_once_and_the_terminal_unchanged(tmp_path):
    """run.py wraps stdout while the job runs: its "distbench: ..." lines (failures, fallbacks)
    also go to run.log; other output (step lines, logged where made) is only printed."""
    root = logging.getLogger()
    log_file = logging.FileHandler(tmp_path / "run.log")
    old_level = root.level
    root.addHandler(log_file)
    root.setLevel(logging.INFO)
    terminal = io.StringIO()
    try:
        tee = progress.OwnLinesToLog(terminal)
        tee.write("distbench: job 1 failed (rank_crash): ")
        tee.write("rank 1 exited 1\n   timed step 2/3  0.300 s\n  distbench: spooled\npartial")
    finally:
        root.removeHandler(log_file)
        root.setLevel(old_level)
        log_file.close()
    assert terminal.getvalue() == (
        "distbench: job 1 failed (rank_crash): rank 1 exited 1\n"
        "   timed step 2/3  0.300 s\n  distbench: spooled\npartial"
    )
    logged = (tmp_path / "run.log").read_text().splitlines()
    assert logged == [
        "distbench: job 1 failed (rank_crash): rank 1 exited 1",
        "  distbench: spooled",
    ]


def test_the_starting_line_has_a_timestamp():
    import datetime

    when = datetime.datetime(2026, 11, 22, 10, 0, 5)
    assert progress.starting_line(when) == "  starting ranks at 2026-11-22 10:00:05"


def _render(table) -> str:
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def _outcome(**over):
    base = {
        "job": "job 1/2",
        "strategy": "dp",
        "world_size": "2",
        "zero_stage": "0",
        "model": "tiny",
        "workload": "train",
        "status": "FINISHED",
        "equivalent": "true",
        "metrics": {"step_time_s_p50": 0.300, "step_time_s_p90": 0.369},
    }
    return {**base, **over}


def test_the_end_table_shows_the_step_time_spread():
    text = _render(summary.summary_table([_outcome()], "t", width=250))
    assert "step p50 (s)" in text and "step p90 (s)" in text and "spread %" in text
    row = next(ln for ln in text.splitlines() if "FINISHED" in ln)
    assert "0.300" in row and "0.369" in row and " 23 " in row  # (0.369 - 0.3) / 0.3
    spread = step_spread_pct({"step_time_s_p50": 0.3, "step_time_s_p90": 0.369})
    assert spread == pytest.approx(23.0)


def test_a_collectives_table_has_no_zero_stage_equivalence_or_step_columns():
    outcome = _outcome(
        strategy="collectives",
        workload="collectives",
        zero_stage="none",
        model="none",
        equivalent=None,
        metrics={"busbw_gbps_peak.all_reduce": 1.5, "busbw_gbps_avg": 0.75},
    )
    text = _render(summary.summary_table([outcome], "t"))
    header = text.splitlines()[1:5]
    assert "avg busbw" in text and "AR busbw" in text
    for absent in ("zero", "= single", "step p50", "spread"):
        assert not any(absent in ln for ln in header), absent


def test_the_end_table_names_a_job_by_what_its_workload_declares():
    assert summary.row_name(_outcome()) == "dp"  # train: named_by_strategy
    assert summary.row_name(_outcome(workload="inference")) == "inference/dp"
    assert summary.row_name(_outcome(strategy="gemm", workload="gemm")) == "gemm"  # raw
    assert summary.row_name(_outcome(workload=None)) == "dp"  # an outcome without the key


def test_nccl_time_is_printed_with_nccl_tests_precision():
    assert report.nccl_time_us(45.678e-6) == "  45.68"
    assert report.nccl_time_us(456.78e-6) == "  456.8"
    assert report.nccl_time_us(45678e-6) == "  45678"


def test_nccl_tests_count_is_per_rank_for_split_collectives():
    assert cm.nccl_tests_count("all_reduce", 1024, 4) == 1024
    assert cm.nccl_tests_count("all_gather", 1024, 4) == 256
    assert cm.busbw_avg_gbps([1.0, 2.0, 6.0]) == 3.0
    with pytest.raises(ValueError):
        cm.busbw_avg_gbps([])


def test_measure_writes_nccl_tests_table_and_logs_the_average_bus_bandwidth(tmp_path):
    job = resolve_job(compose_config(["workload=collectives", "world_size=2"]), CONF_DIR)
    times = {1024: 50e-6, 4096: 100e-6, 16384: 2e-3}
    result = {
        "points": [
            {
                "op": op,
                "size_bytes": s,
                "count": s // 4,
                "times_s": [t, t, t],
                "check_max_rel_err": 0.0,
                "num_wrong": 0,
            }
            for op in ("all_reduce", "all_gather")
            for s, t in times.items()
        ],
        "emulated": {},
        "skipped": {},
        "dtype": "fp32",
        "backend": "gloo",
        "run_dir": str(tmp_path),
    }
    measured = collectives.measure(job, result)
    rows = collectives.table_rows(result, 2)
    ar = [r["busbw_gbps"] for r in rows if r["collective"] == "all_reduce"]
    assert measured.metrics["busbw_gbps_avg.all_reduce"] == pytest.approx(sum(ar) / 3)
    everything = [r["busbw_gbps"] for r in rows]
    assert measured.metrics["busbw_gbps_avg"] == pytest.approx(sum(everything) / 6)
    table = (tmp_path / collectives.TABLE_NAME).read_text()
    assert tmp_path / collectives.TABLE_NAME in measured.artifacts
    lines = table.splitlines()
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    assert lines.count(header) == 2
    assert (
        "        1024           256     float     sum      -1    50.00    0.02    0.02      0"
        in (lines)
    )
    assert (
        "        1024           128     float    none      -1    50.00    0.02    0.01      0"
        in (lines)
    )
    assert f"# Avg bus bandwidth    : {sum(ar) / 3:g} " in lines
    assert "# Out of bounds values : 0 OK" in lines
    for row in (ln for ln in lines if not ln.startswith("#")):  # nccl-tests' columns line up
        assert len(row) == len(header)
    outcome = _outcome(job_dir=str(tmp_path), workload="collectives", model="none")
    assert summary.nccl_tables([outcome])[0][1] == table
