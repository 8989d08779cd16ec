"""After the README's sweep (dp, tp, zero3 at 2 and 4 ranks: the shared session sweep, real
runs in a real sqlite store), every table shows each run's layout and tokens per step, and no
"best" compares runs of different tokens per step: `distbench summary` in 100 columns, the
report's grid and verdicts, and the sweep's parent run (best_* tags)."""

from __future__ import annotations

import pytest

from distbench import cli
from distbench.figures.fair import layout_label
from distbench.tools import report

pytestmark = pytest.mark.e2e


def child_layouts(sweep) -> dict[str, tuple[str, float]]:
    """run name -> (dp×tp×pp, tokens per step) from each child's params and metric."""
    out = {}
    for run in sweep.children:
        params = run.data.params
        layout = layout_label(params["layout.dp"], params["layout.tp"], params["layout.pp"])
        out[run.info.run_name] = (layout, run.data.metrics["tokens_per_step"])
    return out


def test_every_table_of_the_readme_sweep_shows_layout_and_tokens_and_fair_bests(
    readme_sweep, capsys, monkeypatch
):
    expected = child_layouts(readme_sweep)
    assert len({tokens for _, tokens in expected.values()}) == 3  # 512, 1,024, 2,048

    monkeypatch.setenv("COLUMNS", "100")  # a 100-column terminal
    assert cli.main(["summary", "latest", "--tracking-uri", readme_sweep.tracking_uri]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "dp×tp×pp" in printed and "tok/step" in printed
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 6
    for layout, tokens in expected.values():
        assert any(layout in row and f"{tokens:,.0f}" in row for row in rows), (layout, tokens)

    df = report.flat_table(readme_sweep.children, list(readme_sweep.parent.data.params))
    shown = df.set_index("run_name")[["layout", "tokens_per_step"]].itertuples(name=None)
    assert {name: (layout, tokens) for name, layout, tokens in shown} == expected
    grid = report.grid_table(df)
    assert {"layout", "tokens_per_step"} <= set(grid.columns)
    best = report.best_per_metric(df)
    assert len(best)
    for row in best.itertuples():  # tokens differ: every figure within (tokens, world size)
        same = (df["tokens_per_step"] == row.tokens_per_step) & (df["world_size"] == row.world_size)
        group = df[same]
        assert len(group) > 1, row  # compared with a run of its own tokens per step
        better = group[row.metric].max() if row.goal == "max" else group[row.metric].min()
        assert row.value == better
    assert report.verdict_lines(best)[0].startswith("runs differ in tokens per step")

    tags = readme_sweep.parent.data.tags
    best_run = readme_sweep.child(*_strategy_ws(tags["best_run_name"]))
    layout, tokens = expected[tags["best_run_name"]]
    assert (tags["best_layout"], tags["best_tokens_per_step"]) == (layout, f"{tokens:,.0f}")
    rivals = [
        r
        for r in readme_sweep.children
        if r.data.metrics["tokens_per_step"] == tokens
        and r.data.tags["world_size"] == best_run.data.tags["world_size"]
    ]
    assert len(rivals) == 2 and tags["best_scope"].endswith(
        "runs of another world size or tokens per step are not compared: best_by_group)"
    )
    top = max(r.data.metrics["throughput_tokens_per_s"] for r in rivals)
    assert best_run.data.metrics["throughput_tokens_per_s"] == top
    assert readme_sweep.parent.data.metrics["best_throughput_tokens_per_s"] == top
    assert "world_size 2, 512 tokens/step: tp-ws2" in tags["best_by_group"]  # alone in its own


def _strategy_ws(run_name: str) -> tuple[str, int]:
    """("dp", 4) of the run name `dp-ws4`."""
    strategy, _, ws = run_name.rpartition("-ws")
    return strategy, int(ws)
