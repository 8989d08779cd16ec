"""The MLflow UI of a finished sweep, in a real headless browser: Debian's chromium loads the
pages that `distbench ui` serves, the test reads their DOM once MLflow's React app has rendered
it and keeps a screenshot of each:

- the runs page names the sweep's runs. The table nests child runs under their (collapsed)
  parent while it is sorted by start time, so the children are looked for with the sweep's
  search filter (`tags.mlflow.parentRunId = '<id>'`) and a sort by run name, which shows runs
  flat;
- the experiment page's chart view finds the sweep's parent run by its params, metrics and tags
  (the swept keys, num_jobs, best_throughput_tokens_per_s, best_strategy) and charts them; its
  run page lists them;
- a child run page shows the job's real Duration (created RUNNING as the job starts, ended at
  its end), its Source (run.py and commit) and who ran it;
- `distbench report --sweep latest` logs report.html on the parent; the UI serves it
  (/get-artifact), every <img> is a data: URI that the browser decodes, and MLflow's artifact
  viewer shows the page with its plots;
- the URL the sweep printed opens its shared view: the runs table lists the sweep's children
  flat by name with the headline metrics (`headline/<name>`) as columns, and its chart view's
  first section is the headline one, step time and throughput charted per child.

    pytest tests/e2e/test_ui_browser.py -m e2e      # needs /usr/bin/chromium
    DISTBENCH_KEEP_SCREENSHOTS=shots/ pytest tests/e2e/test_ui_browser.py -m e2e   # keep PNGs
"""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image

from distbench.launch.workers import free_port
from distbench.tracking.dashboard import headline_names, sweep_view_key
from tests.e2e.shared_sweeps import Sweep
from tests.e2e.test_report import distbench_report

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} absent (apt-get install -y chromium)"
    ),
]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium(url: str, profile: Path, *extra: str, budget_ms: int = 30_000) -> str:
    """Run headless chromium on url (own profile dir); returns its stdout (the DOM for
    --dump-dom). --virtual-time-budget lets the single-page app fetch and render first."""
    proc = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def dom_with(url: str, names: list[str], tmp_path: Path) -> str:
    """The DOM of url once every name is in it (a slow, shared CPU: retry with more time)."""
    dom = ""
    for attempt, budget_ms in enumerate((30_000, 60_000, 120_000)):
        # A tall window: MLflow renders a chart only once its card is in the viewport.
        profile = tmp_path / f"profile-dom{attempt}"
        dom = chromium(url, profile, "--dump-dom", "--window-size=1600,2400", budget_ms=budget_ms)
        if all(name in dom for name in names):
            break
    return dom


def screenshot(
    url: str,
    tmp_path: Path,
    name: str,
    height: int = 1000,
    ready: Callable[[Image.Image], bool] | None = None,
) -> Image.Image:
    """A 1600-wide screenshot of url, as RGB; kept in $DISTBENCH_KEEP_SCREENSHOTS (a folder).
    `ready`: what the page shows once drawn; until it holds, taken again with more time (a
    slow, shared CPU: the UI's one worker serves the other test's pages too)."""
    for attempt, budget_ms in enumerate((30_000, 60_000, 120_000)):
        shot = tmp_path / f"{name}-{attempt}.png"
        chromium(
            url,
            tmp_path / f"profile-{name}-{attempt}",
            f"--screenshot={shot}",
            f"--window-size=1600,{height}",
            budget_ms=budget_ms,
        )
        image = Image.open(shot)
        image.load()
        assert image.size == (1600, height)
        if os.environ.get("DISTBENCH_KEEP_SCREENSHOTS"):
            keep = Path(os.environ["DISTBENCH_KEEP_SCREENSHOTS"])
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, keep / shot.name)
        image = image.convert("RGB")
        if ready is None or ready(image):
            break
    return image


def num_colours(image: Image.Image) -> int:
    return len(image.getcolors(maxcolors=1 << 24))


def num_colourful_pixels(image: Image.Image) -> int:
    """Pixels far from grey: plots, not MLflow's white and grey page (a few icons aside)."""
    rgb = np.asarray(image).astype(int)
    return int((rgb.max(axis=2) - rgb.min(axis=2) > 80).sum())


def about(dom: str) -> dict[str, str]:
    """A run page's "About this run" box, {label: its text}: Duration, Source, Created by..."""
    out = {}
    parts = re.split(r'<[^>]*\bdata-testid="key-value-([^"]+)"[^>]*>', dom)
    for label, block in zip(parts[1::2], parts[2::2], strict=True):
        words = [html.unescape(w).strip() for w in re.split(r"<[^>]*>", block)]
        out[label] = " ".join(w for w in words if w and w != label)
    return out


def text(dom: str) -> str:
    """The page's text, one '|' between elements."""
    body = re.sub(r"<(style|script)\b.*?</\1>", "", dom, flags=re.S)
    return re.sub(r"\s*(<[^>]*>\s*)+", "|", html.unescape(body))


def seconds(duration: str) -> tuple[float, float]:
    """(seconds, resolution) of a duration as MLflow's UI writes it: 850ms, 23.9s, 2.9min, 1.2h."""
    number, unit = re.fullmatch(r"([\d.]+)\s*(ms|s|min|h|d)", duration).groups()
    scale = {"ms": 0.001, "s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
    return float(number) * scale, (0.001 if unit == "ms" else 0.1 * scale)


def rendered_dom(url: str, names: list[str], tmp_path: Path, window: str) -> str:
    """dom_with for MLflow's lazy chart cards: a card renders once an IntersectionObserver sees
    it in the viewport, which headless chromium under a virtual-time budget reports only when
    every compositor stage runs before each draw (without the flag: 360 px placeholders, about
    one load in two)."""
    dom = ""
    for attempt, budget_ms in enumerate((10_000, 30_000, 60_000)):
        flags = ("--run-all-compositor-stages-before-draw", "--dump-dom", f"--window-size={window}")
        dom = chromium(url, tmp_path / f"profile-lazy{attempt}", *flags, budget_ms=budget_ms)
        if all(name in dom for name in names):
            break
    return dom


def chart_sections(dom: str) -> list[tuple[str, list[str]]]:
    """The chart view's sections in page order: (title, the titles of its chart cards)."""
    header = 'data-testid="experiment-view-compare-runs-section-header"'
    sections = []
    for block in dom.split(header)[1:]:
        title = text(f"<x {block}").split("|")[1]  # the header's first text: the section name
        cards = block.split('data-testid="experiment-view-compare-runs-card"')[1:]
        sections.append((title, [text(f"<x {card}").split("|")[1] for card in cards]))
    return sections


@pytest.fixture(scope="module")
def sweep(readme_sweep) -> Sweep:
    """The README's sweep (dp, tp, zero3 at 2 and 4 ranks), shared by the session."""
    return readme_sweep


@pytest.fixture(scope="module")
def ui(sweep):
    """`distbench ui` on a free loopback port, up (HTTP 200) for this module's tests."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "distbench.cli", "ui", "--port", str(port)],
        env=sweep.env(),
        cwd=sweep.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, status = time.monotonic() + 240, None
        while time.monotonic() < deadline and status != 200:
            assert proc.poll() is None, f"distbench ui exited with {proc.returncode}"
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status
            except OSError:
                time.sleep(1)
        assert status == 200
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_runs_page_shows_the_sweep_and_its_child_runs(sweep, ui, tmp_path):
    runs_page = f"{ui}/#/experiments/{sweep.experiment_id}/runs"
    # Default view: the sweep's parent run, its children nested (collapsed) under it.
    assert sweep.parent_run_name in dom_with(runs_page, [sweep.parent_run_name], tmp_path)

    children = list(sweep.child_run_names)
    assert sorted(n.split("-ws")[0] for n in children) == ["dp", "dp", "tp", "tp", "zero3", "zero3"]
    query = urllib.parse.urlencode(
        {
            "searchFilter": f"tags.mlflow.parentRunId = '{sweep.parent_run_id}'",
            "orderByKey": "attributes.run_name",
            "orderByAsc": "true",
        },
        quote_via=urllib.parse.quote,
    )
    flat_page = f"{runs_page}?{query}"
    dom = dom_with(flat_page, children, tmp_path)
    for name in children:
        assert f">{name}<" in dom, name

    image = screenshot(flat_page, tmp_path, "runs_page")
    assert num_colours(image) > 50  # a page, not blank


def test_the_experiment_page_finds_and_charts_the_sweeps_parent_by_its_params_and_metrics(
    sweep, ui, tmp_path
):
    parent = MlflowClient(sweep.tracking_uri).get_run(sweep.parent_run_id).data
    assert parent.params == {"strategy": "dp,tp,zero3", "world_size": "2,4"}  # the swept keys
    assert parent.metrics["num_jobs"] == parent.metrics["num_finished"] == 6
    best = parent.metrics["best_throughput_tokens_per_s"]
    search = (
        "params.strategy = 'dp,tp,zero3' and metrics.num_jobs = 6 and metrics.num_finished = 6 "
        "and metrics.best_throughput_tokens_per_s > 0 "
        f"and tags.best_strategy = '{parent.tags['best_strategy']}'"
    )
    query = urllib.parse.urlencode(
        {"compareRunsMode": "CHART", "searchFilter": search}, quote_via=urllib.parse.quote
    )
    charts = f"{ui}/#/experiments/{sweep.experiment_id}/runs?{query}"
    # Wait for what is asserted: the chart renders after the table, later on a busy CPU.
    bar_label = f"{best:.2f}"
    dom = dom_with(charts, [sweep.parent_run_name, "Model metrics", bar_label], tmp_path)
    page = text(dom)
    assert f"|{sweep.parent_run_name}|" in page and "|1|matching run|" in page
    assert "|Model metrics|" in page and f"|{bar_label}|" in page  # its bar, labelled
    assert num_colours(screenshot(charts, tmp_path, "experiment_charts")) > 50

    # Its run page lists them: the swept keys as params, the summary as metrics and tags.
    run_page = f"{ui}/#/experiments/{sweep.experiment_id}/runs/{sweep.parent_run_id}"
    page = text(
        dom_with(run_page, ["best_throughput_tokens_per_s", "best_strategy", "Parameter"], tmp_path)
    )
    assert "|Parameter|Value|strategy|dp,tp,zero3|world_size|2,4|" in page
    assert "|num_jobs|6|" in page and f"|best_throughput_tokens_per_s|{best!r}|" in page
    assert f"|best_strategy|: {parent.tags['best_strategy']}|" in page


def test_a_child_run_page_shows_the_jobs_duration_source_and_user(sweep, ui, tmp_path):
    client = MlflowClient(sweep.tracking_uri)
    run = client.get_run(sweep.child_run_ids[0])
    run_page = f"{ui}/#/experiments/{sweep.experiment_id}/runs/{run.info.run_id}"
    dom = dom_with(run_page, ['data-testid="key-value-Duration"', run.info.run_name], tmp_path)
    box = about(dom)
    assert box["Parent run"] == sweep.parent_run_name
    assert box["Status"] == "Finished"
    shown, resolution = seconds(box["Duration"])
    logged = (run.info.end_time - run.info.start_time) / 1000
    assert abs(shown - logged) <= resolution, (box["Duration"], logged)
    # The run spans the job: its ranks' start-up and timed steps (under a second on a fast
    # host: 0.88 s on 2026-11-28) inside the launch of the ranks (seconds on a CPU)
    metrics = run.data.metrics
    ran = metrics["init_time_s"] + metrics["num_timed_steps"] * metrics["step_time_s_p50"]
    assert logged >= ran > 0 and logged > 1.0, (logged, ran)
    tags = run.data.tags
    assert Path(tags["mlflow.source.name"]).name == "run.py" and tags["mlflow.source.type"]
    assert box["Source"].startswith("run.py")
    if "mlflow.source.git.commit" in tags:  # a git checkout: the UI shows the short commit
        assert tags["mlflow.source.git.commit"][:7] in box["Source"]
    assert box["Created by"] == tags["mlflow.user"] != ""
    assert num_colours(screenshot(run_page, tmp_path, "child_run_page")) > 50


def test_the_report_artifact_is_served_with_every_plot_embedded_and_shown(sweep, ui, tmp_path):
    out = tmp_path / "report"
    proc = distbench_report(sweep, "--sweep", "latest", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    query = urllib.parse.urlencode({"path": "report/report.html", "run_uuid": sweep.parent_run_id})
    with urllib.request.urlopen(f"{ui}/get-artifact?{query}", timeout=60) as response:
        served = response.read()
    assert served == (out / "report.html").read_bytes()  # what the artifact viewer fetches
    page = served.decode()
    sources = re.findall(r'<img\b[^>]*\bsrc="([^"]*)"', page)
    assert len(sources) == page.count("<img") == len(list(out.glob("*.png"))) >= 3
    assert all(src.startswith("data:image/png;base64,") for src in sources)

    # The page as a browser loads it: every image decoded (complete, with a width).
    probe = (
        "<script>addEventListener('load', () => document.body.setAttribute('data-images', "
        "[...document.images].map(i => i.complete && i.naturalWidth > 0 ? 'ok' : 'broken')"
        ".join(' ')))</script></body>"
    )
    local = tmp_path / "probe" / "report.html"
    local.parent.mkdir()
    local.write_text(page.replace("</body>", probe))
    dom = dom_with(local.as_uri(), ["data-images="], tmp_path)
    assert re.search(r'data-images="([^"]*)"', dom).group(1) == " ".join(["ok"] * len(sources))

    # MLflow's artifact viewer: the page in its sandboxed frame, the plots drawn (colour).
    viewer = (
        f"{ui}/#/experiments/{sweep.experiment_id}/runs/{sweep.parent_run_id}"
        "/artifacts/report/report.html"
    )
    assert 'class="mlflow-html-iframe"' in dom_with(viewer, ["mlflow-html-iframe"], tmp_path)

    def plots_drawn(image: Image.Image) -> bool:  # the viewer alone has ~3,000
        return num_colourful_pixels(image) > 100_000

    assert plots_drawn(screenshot(viewer, tmp_path, "report_artifact", 4000, plots_drawn))


def test_the_printed_sweep_url_opens_on_the_headline_metrics(sweep, ui, tmp_path):
    printed = re.search(r"the sweep's runs, live in MLflow: (\S+)", sweep.stdout).group(1)
    route, _, query = urllib.parse.urlsplit(printed).fragment.partition("?")
    assert route == f"/experiments/{sweep.experiment_id}/runs"
    assert urllib.parse.parse_qs(query) == {
        "workflowType": ["machine_learning"],  # the training view, not GenAI's
        "viewStateShareKey": [sweep_view_key(sweep.parent_run_id)],
    }
    headline = [f"headline/{name}" for name in headline_names()]
    assert {"headline/step_time_s_p50", "headline/throughput_tokens_per_s"} <= set(headline)
    children = sorted(sweep.children, key=lambda run: run.info.run_name)
    page = f"{ui}/#{route}?{query}"  # the printed URL, on this test's server

    # The runs table: the sweep's children only, flat by name, the headline metrics as columns.
    columns = [f'col-id="metrics.`{name}`"' for name in headline]
    dom = rendered_dom(page, [*columns, "matching runs"], tmp_path, "2400,900")
    headers = re.findall(r'role="columnheader"[^>]*\bcol-id="([^"]+)"', dom)
    assert {f"metrics.`{name}`" for name in headline} <= set(headers), headers
    assert "|6|matching runs|" in text(dom)
    cell = r'role="gridcell"[^>]*col-id="metrics.`headline/step_time_s_p50`"[^>]*>(.*?)</div>'
    shown = {}  # row index -> the value shown (the grid may put its rows in any DOM order)
    for row in dom.split('role="row"')[1:]:
        if (index := re.search(r'\brow-index="(\d+)"', row)) and (value := re.search(cell, row)):
            shown[int(index.group(1))] = float(re.sub(r"<[^>]*>", "", value.group(1)))
    assert [shown[i] for i in sorted(shown)] == [
        r.data.metrics["step_time_s_p50"] for r in children
    ]

    # Its chart view: the headline section first, one bar per child in each chart.
    charts = rendered_dom(f"{page}&compareRunsMode=CHART", headline, tmp_path, "1600,1200")
    sections = chart_sections(charts)
    titles = [title for title, _ in sections]
    assert titles[0] == "headline" and "Model metrics" in titles[1:], titles
    assert sorted(sections[0][1]) == sorted(headline)
    cards = charts.split('data-testid="experiment-view-compare-runs-card"')[1:]
    for metric in ("step_time_s_p50", "throughput_tokens_per_s"):
        card = text(next(c for c in cards if f">headline/{metric}<" in c))
        for run in children:  # its bar, labelled with the value, and its run's name
            assert f"|{run.data.metrics[metric]:.2f}|" in card and f"|{run.info.run_name}|" in card
