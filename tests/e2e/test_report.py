"""`distbench report` on a real sweep in a real sqlite store (the README's, dp/tp/zero3 at 2 and
4 ranks, shared by the session: tests/e2e/shared_sweeps.py): the report folder, its plots
(embedded in report.html; the scaling plot, since configurations ran at two world sizes), the
grid with each run linked, the artifacts and description it leaves on the sweep's parent run,
and the csv export; a sweep at one world size (the shared grid) has no scaling section."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys

import pandas as pd
import pytest
from PIL import Image

from tests.e2e.shared_sweeps import Sweep

pytestmark = pytest.mark.e2e

PLOTS = (  # in the order report.html embeds them
    "throughput_tflops.png",
    "peak_mem_per_rank.png",
    "pareto_throughput_vs_memory.png",
    "cost_per_1m_tokens.png",
    "scaling_efficiency.png",  # dp, tp and zero3 each ran on 2 and 4 ranks
    "pred_error_over_time.png",  # the sweep's runs logged their prediction errors
)


@pytest.fixture(scope="module")
def sweep(readme_sweep) -> Sweep:
    return readme_sweep


def distbench_report(sweep: Sweep, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distbench.cli", "report", *args],
        cwd=sweep.root,
        env=sweep.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_report_of_the_latest_sweep_writes_tables_plots_and_logs_them_on_the_parent(
    sweep, tmp_path
):
    out = tmp_path / "report"
    proc = distbench_report(sweep, "--sweep", "latest", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sweep.parent_run_id in proc.stdout
    assert "best throughput (tokens/s) (max):" in proc.stdout
    assert "best peak memory (GiB) (min):" in proc.stdout

    md = (out / "report.md").read_text()
    assert "| run | strategy | world_size | dp×tp×pp | tokens/step | zero_stage |" in md  # one grid
    for run_id in sweep.child_run_ids:  # each run name links its run
        assert f"](#/experiments/{sweep.experiment_id}/runs/{run_id})" in md
    for name in sweep.child_run_names:
        assert f"| [{name}](" in md
    assert "## Predicted vs measured" in md and "pred_peak_mem_gib" in md
    scaling = md.split("## Scaling efficiency")[1].split("## ")[0]
    assert "no configuration ran at two or more world sizes" not in scaling and "|" in scaling
    html = (out / "report.html").read_text()
    assert "<table" in html
    for run_id in sweep.child_run_ids:  # no server known (sqlite): relative to the UI's root
        assert f'href="#/experiments/{sweep.experiment_id}/runs/{run_id}"' in html
    sources = re.findall(r'<img src="data:image/png;base64,([^"]+)"', html)
    assert len(sources) == html.count("<img ") == len(PLOTS)  # all embedded, none by path
    for name, source in zip(PLOTS, sources, strict=True):
        assert base64.b64decode(source) == (out / name).read_bytes(), name
        image = Image.open(io.BytesIO(base64.b64decode(source)))
        image.load()
        assert image.format == "PNG" and image.width >= 500 and image.height >= 300, name
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 20, name  # not blank
        assert (out / name).stat().st_size > 10_000, name

    from mlflow.tracking import MlflowClient

    client = MlflowClient(sweep.tracking_uri)
    logged = {a.path for a in client.list_artifacts(sweep.parent_run_id, "report")}
    assert {f"report/{n}" for n in ("report.md", "report.html", "runs.csv", *PLOTS)} <= logged
    note = client.get_run(sweep.parent_run_id).data.tags["mlflow.note.content"]
    assert f"runs/{sweep.parent_run_id}/artifacts/report/report.html" in note
    assert "best throughput" in note

    # how well the sweep's runs were predicted, from the children's own metrics as MLflow has them
    children = [client.get_run(run_id).data.metrics for run_id in sweep.child_run_ids]
    within = sum(abs(m["pred_step_time_s"] / m["step_time_s_p50"] - 1) <= 0.30 for m in children)
    line = f"predicted step time: {within} of {len(children)} runs within 30 %"
    assert f"- {line}" in md and f"<li>{line}" in html
    parent = client.get_run(sweep.parent_run_id).data.metrics
    assert parent["pred_step_time_num_runs"] == len(children)
    assert parent["pred_step_time_within_target_frac"] == pytest.approx(within / len(children))


def test_report_links_runs_against_a_given_ui(sweep, tmp_path):
    out = tmp_path / "report"
    args = ("--out", str(out), "--no-log", "--ui-url", "http://127.0.0.1:5000/")
    proc = distbench_report(sweep, "--sweep", sweep.parent_run_id, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (out / "report.html").read_text()
    for run_id in sweep.child_run_ids:
        link = f"http://127.0.0.1:5000/#/experiments/{sweep.experiment_id}/runs/{run_id}"
        assert f'href="{link}"' in html


def test_report_csv_of_a_sweep_by_id_is_the_flat_table_of_its_children(sweep, tmp_path):
    proc = distbench_report(
        sweep, "--sweep", sweep.parent_run_id, "--format", "csv", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(tmp_path / "runs.csv")
    assert tuple(sorted(table["run_id"])) == sweep.child_run_ids
    assert set(table["strategy"]) == {"dp", "tp", "zero3"}
    assert sorted(table["world_size"]) == [2, 2, 2, 4, 4, 4]
    assert (table["throughput_tokens_per_s"] > 0).all()
    assert table["peak_mem_gib_rank1"].notna().all()
    assert not (tmp_path / "report.md").exists()  # csv only


def test_report_of_an_unknown_run_fails_in_one_line(sweep, tmp_path):
    proc = distbench_report(sweep, "--sweep", "0" * 32, "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"distbench: report: no run '{'0' * 32}' in {sweep.tracking_uri}"
    ]


def test_a_sweep_at_one_world_size_has_no_scaling_section_or_plot(grid_sweep, tmp_path):
    out = tmp_path / "report"
    proc = distbench_report(
        grid_sweep, "--sweep", grid_sweep.parent_run_id, "--out", str(out), "--no-log"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no configuration ran at two or more world sizes" in (out / "report.md").read_text()
    assert not (out / "scaling_efficiency.png").exists()
    assert (out / "throughput_tflops.png").exists()
