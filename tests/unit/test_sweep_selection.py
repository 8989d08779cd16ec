"""One way to name a sweep for `report`, `compare` and `summary` (report.load_runs): `latest`,
`previous`, a parent run id or run name, a sweep dir (its parent's distbench.sweep_dir tag, else
the parent run id its spooled runs name); anything else is refused in one line naming the value
and the forms allowed. Sweeps are logged with MLflow's own client into a real sqlite store.

    pytest tests/unit/test_sweep_selection.py
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from distbench import cli
from distbench.tools import report
from distbench.tracking.mlflow_store import ensure_experiment
from distbench.tracking.signature import RESUMED_INTO_TAG_PREFIX
from distbench.tracking.spool import PAYLOAD, SWEEP_DIR_TAG

pytestmark = pytest.mark.unit

T0_MS = 1_790_000_000_000
METRICS = {"throughput_tokens_per_s": 3200.0, "peak_mem_gib": 0.73, "step_time_s_p50": 0.3}


@dataclass(frozen=True)
class Store:
    uri: str
    root: Path
    first: str  # sweep-10-00-00, oldest
    tagged: str  # sweep-11-00-00, tagged with its dir
    spooled: str  # sweep-12-00-00, newest; its dir names it only in its spooled runs
    tagged_dir: Path
    spooled_dir: Path
    other_twins: tuple[str, str]  # two sweeps of experiment "other" with one name


def log_sweep(client, experiment_id, name, start_ms, tags=None) -> str:
    """A FINISHED parent with one FINISHED child (dp-ws2), as a sweep logs them."""
    parent = client.create_run(experiment_id, start_time=start_ms, run_name=name, tags=tags or {})
    child = client.create_run(
        experiment_id,
        start_time=start_ms + 1,
        run_name="dp-ws2",
        tags={
            "mlflow.parentRunId": parent.info.run_id,
            "distbench.signature": "sig-dp-ws2",
            "strategy": "dp",
            "world_size": "2",
            "zero_stage": "0",
        },
    )
    for key, value in METRICS.items():
        client.log_metric(child.info.run_id, key, value)
    client.log_param(child.info.run_id, "batch.micro_batch_size", "4")
    for run_id in (child.info.run_id, parent.info.run_id):
        client.set_terminated(run_id, "FINISHED")
    return parent.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("sweeps")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    experiment_id = ensure_experiment(uri, "distbench")
    tagged_dir = root / "multirun" / "2026-11-22" / "11-00-00"
    spooled_dir = root / "multirun" / "2026-11-22" / "12-00-00"
    first = log_sweep(client, experiment_id, "sweep-10-00-00", T0_MS)
    tags = {SWEEP_DIR_TAG: str(tagged_dir.resolve())}
    tagged = log_sweep(client, experiment_id, "sweep-11-00-00", T0_MS + 60_000, tags)
    spooled = log_sweep(client, experiment_id, "sweep-12-00-00", T0_MS + 120_000)
    compare_run = client.create_run(  # a comparison: a top-level run without children
        experiment_id, start_time=T0_MS + 180_000, tags={"distbench.kind": "compare"}
    )
    client.set_terminated(compare_run.info.run_id, "FINISHED")
    tagged_dir.mkdir(parents=True)
    job_dir = spooled_dir / "0"
    job_dir.mkdir(parents=True)
    payload = {"experiment_name": "distbench", "parent_run_id": spooled, "run_name": "dp-ws2"}
    (job_dir / PAYLOAD).write_text(json.dumps(payload))
    other_id = ensure_experiment(uri, "other")
    twins = (
        log_sweep(client, other_id, "sweep-02-00-00", T0_MS),
        log_sweep(client, other_id, "sweep-02-00-00", T0_MS + 86_400_000),
    )
    return Store(uri, root, first, tagged, spooled, tagged_dir, spooled_dir, twins)


def picked(store: Store, sweep: str, experiment: str = "distbench", anchor=None) -> str:
    return report.load_runs(store.uri, sweep, experiment, anchor).parent_run_id


# --------------------------------------------------------------------------- the forms


def test_latest_is_the_newest_sweep_not_a_comparison_run(store):
    assert picked(store, "latest") == store.spooled


def test_previous_is_the_sweep_started_just_before_the_anchor(store):
    assert picked(store, "previous") == store.tagged  # anchor: the newest sweep
    assert picked(store, "previous", anchor=store.tagged) == store.first
    with pytest.raises(LookupError, match=f"no sweep started before sweep {store.first}"):
        picked(store, "previous", anchor=store.first)


def test_previous_is_looked_up_in_the_anchors_experiment(store):
    assert picked(store, "previous", "distbench", store.other_twins[1]) == store.other_twins[0]


def test_a_parent_run_id_in_any_experiment(store):
    assert picked(store, store.first) == store.first
    assert picked(store, store.other_twins[0]) == store.other_twins[0]  # not in "distbench"


def test_a_parent_run_name(store):
    selection = report.load_runs(store.uri, "sweep-11-00-00")
    assert selection.parent_run_id == store.tagged
    assert selection.title == f"sweep sweep-11-00-00 ({store.tagged})"
    assert selection.sweep_dir == str(store.tagged_dir.resolve())
    assert [r.info.run_name for r in selection.runs] == ["dp-ws2"]


def test_a_sweep_dir_by_its_parents_tag_or_by_its_spooled_runs(store, monkeypatch):
    assert picked(store, str(store.tagged_dir)) == store.tagged
    assert picked(store, str(store.spooled_dir)) == store.spooled
    monkeypatch.chdir(store.root)  # relative, as typed after a sweep
    assert picked(store, "multirun/2026-11-22/11-00-00") == store.tagged
    assert picked(store, "multirun/2026-11-22/12-00-00/") == store.spooled


@pytest.mark.parametrize(
    ("sweep", "experiment", "message"),
    [
        (
            "sweep-09-00-00",
            "distbench",
            "no sweep 'sweep-09-00-00' in experiment 'distbench'; give",
        ),
        ("nope", "distbench", "'latest', 'previous' (the sweep started just before"),
        ("multirun/2026-11-22/13-00-00", "distbench", "no such sweep dir 'multirun/2026-11-22/"),
        ("0" * 32, "distbench", f"no run '{'0' * 32}' in sqlite:///"),
        ("sweep-02-00-00", "other", "2 sweeps in experiment 'other' are named 'sweep-02-00-00'"),
        ("latest", "nope", "no experiment 'nope' in"),
    ],
)
def test_anything_else_is_refused_in_one_line_naming_the_value(store, sweep, experiment, message):
    with pytest.raises(LookupError) as error:
        report.load_runs(store.uri, sweep, experiment)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_dir_no_run_knows_is_refused_with_the_way_to_upload_it(store, tmp_path):
    with pytest.raises(LookupError, match=r"no sweep of .* upload it with: distbench sync DIR"):
        report.load_runs(store.uri, str(tmp_path))


def test_pick_sweep_is_pure_over_parent_runs():
    def run(run_id, name, tags=None):
        return SimpleNamespace(
            info=SimpleNamespace(run_id=run_id, run_name=name),
            data=SimpleNamespace(tags=tags or {}),
        )

    parents = [run("a", "s1"), run("b", "s2", {SWEEP_DIR_TAG: "/m/2"}), run("c", "s2")]
    assert report.pick_sweep(parents, "latest", "e") == "c"
    assert report.pick_sweep(parents, "previous", "e", anchor="b") == "a"
    assert report.pick_sweep(parents, "x", "e", sweep_dir="/m/2") == "b"
    assert report.pick_sweep(parents, "x", "e", sweep_dir="/m/3", recorded={"a"}) == "a"
    assert report.pick_sweep(parents, "s1", "e") == "a"
    with pytest.raises(LookupError, match="2 sweeps in experiment 'e' are named 's2'"):
        report.pick_sweep(parents, "s2", "e")
    with pytest.raises(LookupError, match="no sweep \\(a parent run with children\\)"):
        report.pick_sweep([], "latest", "e")


def test_a_resumed_sweep_owns_the_runs_it_skipped():
    def run(run_id, start, tags=None):
        info = SimpleNamespace(run_id=run_id, run_name=run_id, start_time=start)
        return SimpleNamespace(info=info, data=SimpleNamespace(tags=tags or {}))

    skipped = {"mlflow.parentRunId": "p1", f"{RESUMED_INTO_TAG_PREFIX}p2": "/m/1/0"}
    runs = [run("p1", 1), run("p2", 3), run("a", 2, skipped), run("cmp", 4)]
    sweeps = report.index_sweeps(runs)
    assert [r.info.run_id for r in sweeps.parents] == ["p1", "p2"]  # not the childless cmp
    assert [r.info.run_id for r in sweeps.children(runs, "p2")] == ["a"]
    assert [r.info.run_id for r in sweeps.children(runs, "p1")] == ["a"]


# --------------------------------------------------------------------------- the commands


def test_compare_against_previous_pairs_the_newest_sweep_with_the_one_before(store, capsys):
    argv = ["compare", "--baseline", "previous", "--tracking-uri", store.uri, "--no-log"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"candidate sweep sweep-12-00-00 ({store.spooled})" in out
    assert "baseline sweep sweep-11-00-00" in out and store.tagged in out  # the title wraps
    assert "no regression in 1 configuration(s)" in out


def test_compare_takes_names_and_dirs_for_either_side(store, capsys):
    argv = ["compare", "--baseline", "sweep-10-00-00", "--candidate", str(store.tagged_dir)]
    assert cli.main([*argv, "--tracking-uri", store.uri, "--no-log"]) == 0
    out = capsys.readouterr().out
    assert store.first in out and store.tagged in out


def test_compare_refuses_an_unknown_baseline_in_one_line(store, capsys):
    argv = ["compare", "--baseline", "yesterday", "--tracking-uri", store.uri, "--no-log"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no sweep 'yesterday'" in err[0] and "'previous'" in err[0]


def test_report_takes_a_sweep_dir(store, tmp_path, capsys):
    argv = ["report", "--sweep", str(store.spooled_dir), "--format", "csv", "--no-log"]
    assert cli.main([*argv, "--out", str(tmp_path), "--tracking-uri", store.uri]) == 0
    assert f"1 runs of sweep sweep-12-00-00 ({store.spooled})" in capsys.readouterr().out


def test_summary_of_a_sweep_in_mlflow_reads_its_child_runs(store, capsys):
    assert cli.main(["summary", "sweep-11-00-00", "--tracking-uri", store.uri]) == 0
    out = capsys.readouterr().out
    assert f"sweep sweep-11-00-00 ({store.tagged})" in out  # the table's title
    assert "FINISHED" in out and "3,200" in out  # dp-ws2's status and throughput
    assert cli.main(["summary", "--tracking-uri", store.uri]) == 0  # default: latest
    assert store.spooled in capsys.readouterr().out


def test_summary_of_a_dir_stays_offline(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "foo://no-such-store")
    outcome = {"status": "FINISHED", "strategy": "dp", "world_size": "2", "zero_stage": "0"}
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "outcome.json").write_text(json.dumps({**outcome, "metrics": METRICS}))
    assert cli.main(["summary", str(tmp_path)]) == 0
    assert "3,200" in capsys.readouterr().out
    assert cli.main(["summary", str(store.tagged_dir)]) == 2  # a dir without outcomes
    assert "no outcome.json under" in capsys.readouterr().err


def test_summary_refuses_an_unknown_sweep_in_one_line(store, capsys):
    assert cli.main(["summary", "sweep-99", "--tracking-uri", store.uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("distbench: summary: no sweep 'sweep-99'")
