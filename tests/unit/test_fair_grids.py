"""Fair grids (figures/fair.py): the layout string, the tokens per step, the rule that a "best"
never compares runs of different tokens per step (nor, for a whole-job figure, of different
world sizes) as the report, the sweep's parent run and the parent's tags apply it, and
`batch.global_batch_tokens`, which runs every layout at one global batch."""

from __future__ import annotations

import pandas as pd
import pytest

from distbench.compose.schema import ConfigError
from distbench.figures.fair import (
    best_per_group,
    comparable_keys,
    grad_accum_for_global_batch,
    layout_label,
    layout_of,
    tokens_per_step_of,
)
from distbench.figures.metrics import tokens_per_step
from distbench.job import resolve_job
from distbench.tools import report
from distbench.tracking.parent import sweep_summary
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

# The README sweep's shape (dp, tp, zero3 at 2 and 4 ranks, batch=small: 2 x 2 x 128 tokens
# per replica): tp has half the replicas, so half the tokens per step.
README_ROWS = [
    # run, strategy, ws, (dp, tp, pp), tokens/step, tokens/s, MFU %
    ("dp-ws2", "dp", 2, (2, 1, 1), 1024, 1146.0, 27.6),
    ("dp-ws4", "dp", 4, (4, 1, 1), 2048, 2154.0, 25.9),
    ("tp-ws2", "tp", 2, (1, 2, 1), 512, 2500.0, 16.4),  # faster, but on half the tokens
    ("tp-ws4", "tp", 4, (2, 2, 1), 1024, 949.0, 11.4),
    ("zero3-ws2", "zero3", 2, (2, 1, 1), 1024, 924.0, 22.2),
    ("zero3-ws4", "zero3", 4, (4, 1, 1), 2048, 1156.0, 13.9),
]


def readme_outcomes() -> list[dict]:
    return [
        {
            "run_name": name,
            "strategy": strategy,
            "world_size": str(ws),
            "status": "FINISHED",
            "layout": dict(zip(("dp", "tp", "pp"), degrees, strict=True)),
            "run_id": name,
            "metrics": {"tokens_per_step": float(tok), "throughput_tokens_per_s": tps},
        }
        for name, strategy, ws, degrees, tok, tps, _ in README_ROWS
    ]


def readme_frame() -> pd.DataFrame:
    rows = [
        {
            "run_name": name,
            "strategy": strategy,
            "world_size": ws,
            "layout": layout_label(*degrees),
            "tokens_per_step": float(tok),
            "status": "FINISHED",
            "throughput_tokens_per_s": tps,
            "mfu_pct": mfu,
            "run_id": name,
        }
        for name, strategy, ws, degrees, tok, tps, mfu in README_ROWS
    ]
    return pd.DataFrame(rows)


def test_the_layout_reads_dp_x_tp_x_pp_from_an_outcome_a_tag_or_params():
    assert layout_label(2, 1, 1) == "2×1×1"
    assert layout_of({"layout": {"world_size": 4, "dp": 2, "tp": 2, "pp": 1}}) == "2×2×1"
    assert layout_of({"layout_tag": "dp2-pp4-tp1"}) == "2×1×4"  # train's tag: dp, pp, tp order
    assert layout_of({"layout": None, "layout_tag": "bad"}) is None  # a refused config
    assert tokens_per_step_of({"tokens_per_step": 512.0}) == 512.0
    # an inference step: its prompt and its generated tokens
    assert tokens_per_step_of({"tokens_prompt_per_step": 32, "tokens_generated_per_step": 12}) == 44
    assert tokens_per_step_of({}) is None


def test_a_best_is_picked_only_among_runs_of_one_world_size_and_tokens_per_step():
    ws = [2, 4, 2, 4, 2, 4]
    tokens = [1024, 2048, 512, 1024, 1024, 2048]
    values = [r[5] for r in README_ROWS]
    keys = comparable_keys(ws, tokens, per_device_figure=False)
    best = best_per_group(values, keys, "max")
    assert best == {(1024, 2): 0, (2048, 4): 1, (512, 2): 2, (1024, 4): 3}  # tp-ws2 beats no one
    # one global batch: a per-device figure compares across world sizes, a whole-job one not
    same = [2048] * 6
    assert len(set(comparable_keys(ws, same, per_device_figure=True))) == 1
    assert len(set(comparable_keys(ws, same, per_device_figure=False))) == 2
    # different tokens per step: a per-device figure too stays within its group
    assert len(set(comparable_keys(ws, tokens, per_device_figure=True))) == 4


def test_the_report_never_names_a_best_across_tokens_per_step_and_says_why():
    df = readme_frame()
    best = report.best_per_metric(df)
    tokens_of = dict(zip(df["run_name"], df["tokens_per_step"], strict=True))
    for row in best.itertuples():
        same_group = df[(df["tokens_per_step"] == row.tokens_per_step)]
        if row.metric == "throughput_tokens_per_s":  # a whole-job figure: one world size too
            same_group = same_group[same_group["world_size"] == row.world_size]
        assert len(same_group) > 1, row  # a run alone in its group is nobody's best
        assert tokens_of[row.run_name] == row.tokens_per_step
        values = same_group[row.metric]
        assert row.value == (values.max() if row.goal == "max" else values.min())
    throughput = best[best["metric"] == "throughput_tokens_per_s"]
    assert set(throughput["run_name"]) == {"dp-ws2", "dp-ws4"}  # never tp-ws2's 512 tokens
    lines = report.verdict_lines(best)
    assert lines[0].startswith("runs differ in tokens per step (512 to 2,048)")
    assert "batch.global_batch_tokens=2048" in lines[0] and "tp-ws2, tp-ws4" in lines[0]
    assert any(
        line.startswith("best throughput (tokens/s) (max): 2154  dp-ws4")
        and "layout=4×1×1 tokens/step=2,048" in line
        and line.endswith("among world_size 4, 2,048 tokens/step")
        for line in lines
    )
    grid = report.grid_table(df)
    assert list(grid.columns[:5]) == [
        "run_name",
        "strategy",
        "world_size",
        "layout",
        "tokens_per_step",
    ]
    assert grid.attrs["constant"] == {"status": "FINISHED"}  # left the table for one line
    marked = report.best_rows(grid)["throughput_tokens_per_s"]
    assert sorted(grid.loc[marked, "run_name"]) == ["dp-ws2", "dp-ws4"]


def test_the_parents_best_is_the_best_of_one_world_size_and_tokens_per_step():
    metrics, tags = sweep_summary(readme_outcomes(), num_jobs=6)
    # the largest group (2 runs each: ws2 1,024 and ws4 2,048; the larger world size): tp-ws2's
    # 2,500 tokens/s on 512 tokens per step is not compared with it
    assert tags["best_run_name"] == "dp-ws4" and tags["best_strategy"] == "dp"
    assert metrics["best_throughput_tokens_per_s"] == 2154.0
    assert tags["best_layout"] == "4×1×1" and tags["best_tokens_per_step"] == "2,048"
    assert tags["best_scope"].startswith("world_size 4, 2,048 tokens/step (2 of 6 runs")
    assert (
        "world_size 2, 512 tokens/step: tp-ws2 (2,500 tokens/s, 1×2×1, 1 run)"
        in (tags["best_by_group"])
    )


def test_global_batch_tokens_derives_each_layouts_accumulation_at_one_global_batch():
    assert grad_accum_for_global_batch(2048, 2, 4, 128) == 2
    assert grad_accum_for_global_batch(2048, 2, 1, 128) == 8
    jobs = {
        (strategy, ws): resolve_job(
            compose_config(
                [
                    f"strategy={strategy}",
                    f"world_size={ws}",
                    "model=tiny",
                    "batch.global_batch_tokens=2048",
                ]
            ),
            CONF_DIR,
        )
        for strategy, ws in (("tp", 2), ("dp", 4))  # dp 1 and dp 4
    }
    for job in jobs.values():  # batch=small keeps its micro batch 2 and seq_len 128
        batch = job.batch
        assert batch.micro_batch_size == 2
        tokens = tokens_per_step(batch.micro_batch_size, batch.grad_accum_steps, 128, job.layout.dp)
        assert tokens == 2048
    assert jobs[("tp", 2)].batch.grad_accum_steps == 8  # dp 1
    assert jobs[("dp", 4)].batch.grad_accum_steps == 2  # dp 4
    assert jobs[("dp", 4)].tree()["batch"]["global_batch_tokens"] == 2048  # asked for: recorded


def test_global_batch_tokens_refuses_in_one_line_what_no_accumulation_reaches():
    cfg = compose_config(["strategy=dp", "world_size=4", "batch.global_batch_tokens=3000"])
    with pytest.raises(ConfigError) as refused:
        resolve_job(cfg, CONF_DIR)
    message = str(refused.value)
    assert "\n" not in message
    assert "batch.global_batch_tokens=3000 is not a multiple of" in message
    assert "micro_batch_size(2) x dp(4) x seq_len(128) = 1024" in message
    assert "use 2048 or 3072, or another batch.micro_batch_size" in message
    with pytest.raises(ValueError, match="must be a positive integer"):
        grad_accum_for_global_batch(0, 2, 2, 128)


def test_an_unset_global_batch_keeps_the_runs_signature():
    job = resolve_job(compose_config(["strategy=dp"]), CONF_DIR)
    tree = job.tree()
    assert "global_batch_tokens" not in tree["batch"]  # runs recorded before it still pair
    assert job.batch.grad_accum_steps == 2  # batch=small's own
    explicit = resolve_job(
        compose_config(["strategy=dp", "batch.global_batch_tokens=1024"]), CONF_DIR
    )
    assert explicit.batch.grad_accum_steps == 2  # 2 x 2 x 128 x dp 2
    assert run_signature(explicit.tree()) != run_signature(tree)  # asked for: recorded
