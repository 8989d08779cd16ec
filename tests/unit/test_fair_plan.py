"""`distbench plan` figures a user compares (tools/plan/): each row's layout and tokens per step
in a table that fits 100 columns, the memory against the device with its margin, host RAM per
node for a multi-node offload, the fp32-on-a-GPU warning, and `--search`'s refusals counted by
reason with the best row's run.py command."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from distbench.figures.model_states import deepspeed_host_bytes_per_node
from distbench.figures.predict import predict
from distbench.job import resolve_job
from distbench.tools.plan import (
    dtype_warnings,
    make_plan,
    plan_table,
    plan_warnings,
    refusal_counts,
    run_command,
)
from distbench.tools.plan.advice import memory_cells, tokens_note
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

H100_8B = ["model=llama3_8b", "world_size=8", "hardware=h100_sxm"]


def test_a_multi_node_offload_needs_the_per_node_share_of_deepspeeds_job_figure():
    num_params = 70e9
    one_node = deepspeed_host_bytes_per_node(num_params, 8, 1, zero_stage=2, offload_param=False)
    eight = deepspeed_host_bytes_per_node(num_params, 8, 8, zero_stage=2, offload_param=False)
    # DeepSpeed's ZeRO-2 estimator, Ψ·max(4·all devices, 16)·1.5, is the whole job's: each node
    # holds its own 8 ranks' share, as on one node (not 8 times it: 25,000 GiB for 70B)
    assert one_node == pytest.approx(num_params * 32 * 1.5)
    assert eight == pytest.approx(one_node)
    assert eight / 2**30 < 3200


def test_fp32_on_a_gpu_is_warned_about_unless_chosen():
    job = resolve_job(compose_config(H100_8B), CONF_DIR)
    (warning,) = dtype_warnings(job, H100_8B)
    assert "fp32 on hardware=h100_sxm" in warning and "workload.dtype=bf16" in warning
    assert dtype_warnings(job, [*H100_8B, "workload.dtype=fp32"]) == []  # asked for
    cpu = resolve_job(compose_config(["hardware=cpu"]), CONF_DIR)
    assert dtype_warnings(cpu, []) == []
    assert warning in plan_warnings(job, H100_8B)


def test_the_plan_table_fits_100_columns_with_layout_tokens_and_memory_margin():
    plan = make_plan([*H100_8B, "workload.dtype=bf16", "batch=medium"], ["dp", "tp"])
    table = plan_table(plan, width=100)
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(table)
    text = console.export_text()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
    headers = [column.header.plain for column in table.columns]  # a header may wrap: not text
    for column in ("dp×tp×pp", "tok/step", "need / dev GiB", "free GiB", "step s", "tokens/s"):
        assert column in headers, column
    tp = next(p for p in plan.predictions if p.strategy == "tp")
    row = next(line for line in text.splitlines() if line.startswith("│ tp"))
    assert "4×2×1" in row and f"{tp.num_tokens_per_step:,}" in row
    needed, free = memory_cells(tp)
    device = tp.device_mem_bytes / 2**30
    assert needed.endswith(f"/ {device:,.1f}") and f"{device:,.1f}" == "79.6"
    margin = device - tp.mem_needed_bytes / 2**30
    colour = "green" if margin >= 0 else "red"
    assert free == f"[{colour}]{margin:,.1f}[/{colour}]"  # the margin, red when short
    note = tokens_note(plan.predictions)
    assert note and "batch.global_batch_tokens=" in note  # tp has half dp's replicas


def test_one_global_batch_gives_every_row_the_same_tokens_per_step():
    plan = make_plan(
        [*H100_8B, "workload.dtype=bf16", "batch.global_batch_tokens=65536"], ["dp", "tp"]
    )
    assert {p.num_tokens_per_step for p in plan.predictions} == {65536}
    assert tokens_note(plan.predictions) is None


def test_search_refusals_are_counted_by_reason_and_the_best_row_has_its_command():
    refused = {
        "deepspeed dp1 tp8 pp1 z0 mb1": "does not fit: 81.2 of 79.6 GiB per device",
        "deepspeed dp1 tp8 pp1 z0 mb2": "does not fit: 95.0 of 79.6 GiB per device",
        "deepspeed dp1 tp16 pp1 z0 mb1": "model.num_kv_heads(8) is not divisible by tp(16)",
        "deepspeed dp1 tp32 pp1 z0 mb1": "model.num_kv_heads(8) is not divisible by tp(32)",
        "fsdp dp2 tp1 pp4 mb1": "strategy=fsdp runs no pipeline",
    }
    counts = refusal_counts(refused)
    assert counts[0] == (2, "does not fit in device memory (needs 81.2-95.0 of 79.6 GiB)")
    assert (2, "model.num_kv_heads(8) is not divisible by tp(16) (and alike)") in counts
    assert (1, "strategy=fsdp runs no pipeline") in counts
    job = resolve_job(compose_config(["strategy=dp", "strategy.tp=2", "zero_stage=1"]), CONF_DIR)
    p = predict(job, efficiency=0.5)
    overrides = ["model=tiny", "strategy=zero3", "batch.micro_batch_size=8"]
    command = run_command(overrides, p, "deepspeed dp1 tp2 pp1 z1 ckpt=full mb4")
    assert command == (
        "python run.py model=tiny strategy=dp strategy.tp=2 zero_stage=1 "
        "activation_checkpointing=full batch.micro_batch_size=4"
    )
    # a plan's row: its strategy file's own degrees and stage
    plain = "python run.py model=tiny batch.micro_batch_size=8 strategy=dp"
    assert run_command(overrides, p) == plain
