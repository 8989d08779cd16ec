"""The MLflow UI of a finished sweep, in a real headless browser: Debian's chromium loads the
runs page that `distbench ui` serves and the DOM names the sweep's runs; a screenshot is kept.

The runs table nests child runs under their (collapsed) parent while it is sorted by start
time, so the children are looked for on the same page with the sweep's search filter
(`tags.mlflow.parentRunId = '<id>'`) and a sort by run name, which shows runs flat.

    pytest tests/e2e/test_ui_browser.py -m e2e      # needs /usr/bin/chromium
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from distbench.launch.workers import free_port
from tests.e2e.tiny_sweep import Sweep, shared_sweep

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
        dom = chromium(url, tmp_path / f"profile-dom{attempt}", "--dump-dom", budget_ms=budget_ms)
        if all(name in dom for name in names):
            break
    return dom


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Sweep:
    return shared_sweep(tmp_path_factory)


@pytest.fixture
def ui(sweep):
    """`distbench ui` on a free loopback port, up (HTTP 200) for the test, stopped after."""
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
    assert sorted(n.split("-ws")[0] for n in children) == ["dp", "zero1"]  # <strategy>-ws2...
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

    shot = tmp_path / "ui.png"
    chromium(
        flat_page, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1600,1000"
    )
    image = Image.open(shot)
    image.load()
    assert image.size == (1600, 1000)
    assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50  # a page, not blank
    if os.environ.get("DISTBENCH_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["DISTBENCH_KEEP_SCREENSHOT"])
