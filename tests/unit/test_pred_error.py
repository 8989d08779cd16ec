"""Prediction error bars calibrated from the store: the pure functions on hand-made runs, then
runs written to a real sqlite MLflow store with MLflow's client and read back by the plan, by a
new run's priors and by the report's prediction error over time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distbench.figures.communication import DEFAULT_CPU_INTERCONNECT_GBPS
from distbench.figures.links import LinkFit, efficiency_source, link_fits, link_source
from distbench.figures.pred_error import (
    ErrorBar,
    calibrate,
    calibrated_prediction,
    error_bar,
    error_bars,
    prior_metrics,
    run_rel_errs,
    with_error,
)
from distbench.figures.predict import predict
from distbench.job import resolve_job
from distbench.tools import report
from distbench.tools.plan import make_plan, plan_json, plan_table, run_key_tags
from distbench.tracking.pred_history import finished_runs, prior_errors, store_exists
from distbench.tracking.signature import run_signature
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

TAGS = {"model": "tiny", "strategy": "dp", "zero_stage": "0", "hardware": "cpu"}
TAGS["precision"] = "fp32"


def fake_run(start: int, metrics: dict[str, float], status: str = "FINISHED", **tags: str):
    return SimpleNamespace(
        info=SimpleNamespace(status=status, start_time=start, run_id=f"r{start}"),
        data=SimpleNamespace(tags={**TAGS, **tags}, metrics=metrics),
    )


def test_error_bar_is_the_median_and_the_median_absolute_deviation():
    bar = error_bar([0.1, 0.3, 0.2, 0.9])
    assert bar.median_rel_err == pytest.approx(0.25)
    assert bar.spread_rel_err == pytest.approx(0.1)  # |deviations| 0.15 0.05 0.05 0.65
    assert bar.num_runs == 4
    assert bar.label == "+25 % ±10 %, n=4"
    assert with_error("1.23", bar) == "1.23 (+25 % ±10 %, n=4)"
    assert with_error("1.23", None) == "1.23"
    assert error_bar([-0.4]).label == "-40 % ±0 %, n=1"
    with pytest.raises(ValueError):
        error_bar([])


def test_calibrating_divides_out_the_median_error():
    bar = ErrorBar(median_rel_err=0.25, spread_rel_err=0.0, num_runs=2)
    assert calibrate(1.25, bar) == pytest.approx(1.0)  # predicted 25 % high


def test_a_runs_error_is_the_logged_one_else_recomputed_from_its_pred_metric():
    logged = {"mem_pred_rel_err": 0.5, "pred_peak_mem_gib": 9.0, "peak_mem_gib": 1.0}
    assert run_rel_errs(logged) == {"mem": 0.5}
    older = {"pred_step_time_s": 3.0, "step_time_s_p50": 2.0}
    assert run_rel_errs(older) == {"time": pytest.approx(0.5)}
    assert run_rel_errs({"pred_step_time_s": 3.0}) == {}


def test_error_bars_group_finished_runs_by_key_and_keep_the_newest():
    runs = [fake_run(t, {"time_pred_rel_err": 0.1 * t}) for t in range(1, 6)]
    runs.append(fake_run(9, {"time_pred_rel_err": 5.0}, status="FAILED"))
    runs.append(fake_run(7, {"time_pred_rel_err": -0.5}, strategy="zero3", zero_stage="3"))
    runs.append(fake_run(8, {"time_pred_rel_err": 1.0}, model="none", precision=None))
    bars = error_bars(runs, max_runs_per_key=3)
    dp = tuple(TAGS.values())
    assert set(bars) == {dp, ("tiny", "zero3", "3", "cpu", "fp32")}  # no key without tags
    assert bars[dp]["time"].num_runs == 3  # runs 5, 4, 3: the failed one is not counted
    assert bars[dp]["time"].median_rel_err == pytest.approx(0.4)
    assert "mem" not in bars[dp]


def test_prior_metrics_name_the_prior_and_the_calibrated_prediction():
    bars = {"time": ErrorBar(0.5, 0.1, 3)}
    out = prior_metrics(bars, {"pred_step_time_s": 3.0, "step_time_s_p50": 2.5})
    assert out == {
        "time_pred_rel_err_prior": 0.5,
        "time_pred_rel_err_prior_spread": 0.1,
        "time_pred_prior_num_runs": 3.0,
        "pred_step_time_s_calibrated": 2.0,
        "time_pred_calibrated_rel_err": pytest.approx(-0.2),
    }


def test_a_calibrated_prediction_scales_memory_terms_and_step_time():
    job = resolve_job(compose_config(["hardware=cpu", "world_size=2", "strategy=dp"]), CONF_DIR)
    raw = predict(job)
    bars = {"mem": ErrorBar(1.0, 0.0, 1), "time": ErrorBar(-0.5, 0.0, 1)}
    cal = calibrated_prediction(raw, bars)
    assert cal.mem.total == pytest.approx(raw.mem.total / 2)
    assert sum(cal.mem.terms.values()) == pytest.approx(sum(raw.mem.terms.values()) / 2)
    assert cal.step_time_s == pytest.approx(raw.step_time_s * 2)
    assert cal.tokens_per_s == pytest.approx(raw.tokens_per_s / 2)
    assert cal.assumptions["calibrated"]["time"]["num_runs"] == 1
    assert calibrated_prediction(raw, {}).step_time_s == raw.step_time_s


# --------------------------------------------------------------------------- a real store


def log_runs(uri: str, tags: dict[str, str], time_errs: list[float], mem_errs: list[float]):
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("distbench")
    for i, (t, m) in enumerate(zip(time_errs, mem_errs, strict=True)):
        run = client.create_run(experiment_id, tags=tags, start_time=1000 + i)
        run_id = run.info.run_id
        client.log_metric(run_id, "pred_step_time_s", 1.0 + t)
        client.log_metric(run_id, "step_time_s_p50", 1.0)
        client.log_metric(run_id, "time_pred_rel_err", t)
        client.log_metric(run_id, "mem_pred_rel_err", m)
        client.set_terminated(run_id, "FINISHED")
    failed = client.create_run(experiment_id, tags=tags).info.run_id
    client.log_metric(failed, "time_pred_rel_err", 9.0)
    client.set_terminated(failed, "FAILED")


OVERRIDES = ["hardware=cpu", "world_size=2", "model=tiny"]


def dp_tags() -> dict[str, str]:
    job = resolve_job(compose_config([*OVERRIDES, "strategy=dp"]), CONF_DIR)
    return run_key_tags(job)


def test_no_store_is_no_history_and_none_is_created(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert not store_exists(uri)
    assert finished_runs(uri, "distbench") == []
    assert not (tmp_path / "mlflow.db").exists()
    plan = make_plan([*OVERRIDES, f"tracking.uri={uri}"], ["dp"], history=True)
    assert plan.error_bars == {} and "no store" in plan.history
    assert not (tmp_path / "mlflow.db").exists()


def test_the_plan_shows_and_applies_the_stores_error_bars(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    log_runs(uri, dp_tags(), time_errs=[0.2, 0.4, 0.3], mem_errs=[0.1, 0.1, 0.1])
    assert store_exists(uri) and len(finished_runs(uri, "distbench", dp_tags())) == 3
    overrides = [*OVERRIDES, f"tracking.uri={uri}"]
    plain = make_plan(overrides, ["dp", "zero3"])
    shown = make_plan(overrides, ["dp", "zero3"], history=True)
    assert set(shown.error_bars) == {"dp"}  # zero3 has no runs: no error bar
    time = shown.error_bars["dp"]["time"]
    assert (time.median_rel_err, time.num_runs) == (pytest.approx(0.3), 3)
    assert time.spread_rel_err == pytest.approx(0.1)
    assert "3 finished runs" in shown.history
    dp = next(p for p in shown.predictions if p.strategy == "dp")
    assert dp.step_time_s == plain.predictions[0].step_time_s  # shown, not applied
    rows = plan_json(shown)
    json.dumps(rows)
    assert rows[0]["pred_error"]["time"]["num_runs"] == 3 and rows[1]["pred_error"] == {}
    assert rows[-1]["calibrated"] is False
    cells = [list(column.cells) for column in plan_table(shown).columns]
    step_cells = next(c for c in cells if "n=3" in c[0] and "+30 %" in c[0])
    assert step_cells[1] == f"{shown.predictions[1].step_time_s:.3g}"  # zero3: bare

    cal = make_plan(overrides, ["dp", "zero3"], history=True, calibrated=True)
    cal_dp = next(p for p in cal.predictions if p.strategy == "dp")
    assert cal_dp.step_time_s == pytest.approx(dp.step_time_s / 1.3)
    assert cal_dp.mem.total == pytest.approx(dp.mem.total / 1.1)
    assert cal.predictions[1].step_time_s == shown.predictions[1].step_time_s
    assert plan_json(cal)[-1]["calibrated"] is True


def test_a_new_run_logs_the_prior_errors_of_its_key(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    log_runs(uri, TAGS, time_errs=[0.2, 0.4], mem_errs=[-0.1, -0.3])
    tracking = SimpleNamespace(backend="sqlite", uri=uri, experiment_name="distbench")
    metrics = {"pred_step_time_s": 1.5, "step_time_s_p50": 1.0, "pred_peak_mem_gib": 0.8}
    prior = prior_errors(tracking, TAGS, metrics, "efficiency")
    assert prior["time_pred_rel_err_prior"] == pytest.approx(0.3)
    assert prior["time_pred_prior_num_runs"] == 2.0
    assert prior["mem_pred_rel_err_prior"] == pytest.approx(-0.2)
    assert prior["pred_step_time_s_calibrated"] == pytest.approx(1.5 / 1.3)
    assert prior["pred_peak_mem_gib_calibrated"] == pytest.approx(1.0)
    assert "mem_pred_calibrated_rel_err" not in prior  # no peak measured
    assert prior_errors(tracking, {**TAGS, "strategy": "zero3"}, metrics, "efficiency") == {}
    nothing_predicted = {"gemm_time_s_p50": 1.0}
    assert prior_errors(tracking, TAGS, nothing_predicted, "efficiency") == {}
    off = SimpleNamespace(backend="none", uri=None, experiment_name="distbench")
    assert prior_errors(off, TAGS, metrics, "efficiency") == {}
    # these runs predate hardware.time_source (efficiency): a measured run's time has no prior
    measured = prior_errors(tracking, TAGS, metrics, "measured")
    assert "time_pred_rel_err_prior" not in measured and "mem_pred_rel_err_prior" in measured


def test_a_step_time_bar_counts_only_the_runs_predicted_the_same_way():
    def run(start, time_err, source=None):
        found = fake_run(start, {"time_pred_rel_err": time_err, "mem_pred_rel_err": 0.1})
        found.data.params = {} if source is None else {"hardware.time_source": source}
        return found

    runs = [run(1, 0.5), run(2, 0.7, "efficiency"), run(3, -0.1, "measured")]
    key = tuple(TAGS.values())
    measured = error_bars(runs, time_source="measured")[key]
    assert (measured["time"].median_rel_err, measured["time"].num_runs) == (-0.1, 1)
    assert measured["mem"].num_runs == 3  # memory is predicted alike either way
    efficiency = error_bars(runs, time_source="efficiency")[key]["time"]
    assert (efficiency.median_rel_err, efficiency.num_runs) == (pytest.approx(0.6), 2)
    assert error_bars(runs)[key]["time"].num_runs == 3


# --------------------------------------------------------------------------- the report


def history_table() -> pd.DataFrame:
    """dp's time error improving over three runs (the last logged with its prior), one zero3
    run, one run of another model, one failed run."""
    rows = [
        ("dp-a", "dp", "0", "FINISHED", "2026-11-20", 0.9, 0.5, np.nan, np.nan),
        ("dp-b", "dp", "0", "FINISHED", "2026-11-21", 0.5, 0.3, 0.7, np.nan),
        ("dp-c", "dp", "0", "FINISHED", "2026-11-22", 0.2, 0.1, 0.5, -0.1),
        ("z3-a", "zero3", "3", "FINISHED", "2026-11-22", -0.4, np.nan, np.nan, np.nan),
        ("dp-x", "dp", "0", "FAILED", "2026-11-23", np.nan, np.nan, np.nan, np.nan),
    ]
    columns = ["run_name", "strategy", "zero_stage", "status", "start_time"]
    columns += ["time_pred_rel_err", "mem_pred_rel_err", "time_pred_rel_err_prior"]
    columns += ["time_pred_calibrated_rel_err"]
    df = pd.DataFrame(rows, columns=columns)
    df["start_time"] = pd.to_datetime(df["start_time"])
    df["model"], df["hardware"], df["precision"] = "tiny", "cpu", "fp32"
    other = df.iloc[[0]].assign(model="gpt2_124m", run_name="gpt")
    return pd.concat([df, other], ignore_index=True)


def test_the_error_history_follows_each_key_over_time():
    history = report.pred_error_history(history_table())
    assert list(history["run_name"]) == ["dp-a", "gpt", "dp-b", "dp-c", "z3-a"]
    dp = history[history["key"] == "tiny dp z0 cpu fp32"]
    assert list(dp["time_err_pct"]) == pytest.approx([90, 50, 20])
    assert list(dp["time_prior_err_pct"].iloc[1:]) == pytest.approx([70, 50])
    assert dp["time_calibrated_err_pct"].iloc[-1] == pytest.approx(-10)
    only_dp = report.pred_error_history(history_table(), keys=history_table().iloc[[0]])
    assert set(only_dp["key"]) == {"tiny dp z0 cpu fp32"}  # the sweep's keys only
    summary = report.pred_error_summary(history).set_index("key")
    assert summary.loc["tiny dp z0 cpu fp32", "runs"] == 3
    assert summary.loc["tiny dp z0 cpu fp32", "time_err_pct"] == "+50 ±30"
    assert summary.loc["tiny dp z0 cpu fp32", "time_latest_err_pct"] == pytest.approx(20)
    assert summary.loc["tiny zero3 z3 cpu fp32", "mem_err_pct"] == "-"
    assert report.pred_error_history(pd.DataFrame()).empty


def test_the_report_of_a_sweep_shows_the_errors_of_its_keys_through_earlier_sweeps(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("distbench")
    for sweep, (err, start) in enumerate(((0.6, 1_000), (0.2, 2_000))):
        parent = client.create_run(experiment_id, run_name=f"sweep{sweep}", start_time=start)
        tags = {**TAGS, "mlflow.parentRunId": parent.info.run_id}
        child = client.create_run(
            experiment_id, tags=tags, run_name=f"dp-{sweep}", start_time=start
        )
        client.log_metric(child.info.run_id, "time_pred_rel_err", err)
        client.log_metric(child.info.run_id, "step_time_s_p50", 1.0)
        client.set_terminated(child.info.run_id, "FINISHED")
        client.set_terminated(parent.info.run_id, "FINISHED")
    selection = report.load_runs(uri, "latest")
    assert [r.info.run_name for r in selection.runs] == ["dp-1"]
    assert {r.info.run_name for r in selection.history} == {"dp-0", "dp-1"}
    df = report.flat_table(selection.runs)
    files, sections = report.write_report(
        df, tmp_path / "out", selection.title, history=report.flat_table(selection.history)
    )
    assert list(sections.pred_history["time_err_pct"]) == pytest.approx([60, 20])
    assert (tmp_path / "out" / "pred_error_over_time.png") in files
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Prediction error over time" in md and "dp-0" in md
    assert "+40 ±20" in md  # the error bar of the two runs
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Prediction error over time" in page and "dp-0" in page


# --------------------------------------------------------------------------- measured links


def collectives_run(start: int, alpha_s: float, busbw: float | None, num_nodes: str = "1"):
    metrics = {"alpha_s.all_reduce": alpha_s}
    if busbw is not None:
        metrics["beta_busbw_gbps.all_reduce"] = busbw
    tags = {"workload": "collectives", "num_nodes": num_nodes}
    return fake_run(start, metrics, **tags)


def test_link_fits_are_the_median_alpha_and_busbw_per_tier():
    runs = [collectives_run(1, 1e-4, 0.4), collectives_run(2, 3e-4, 0.6)]
    runs += [collectives_run(3, 5e-4, 0.8), collectives_run(4, 1e-4, None)]  # latency-bound
    runs += [collectives_run(5, 2e-5, 12.0, num_nodes="2")]
    fits = link_fits(runs)
    assert fits["intra"] == LinkFit(alpha_s=3e-4, busbw_gbps=0.6, num_runs=3)
    assert fits["inter"] == LinkFit(alpha_s=2e-5, busbw_gbps=12.0, num_runs=1)
    assert link_fits([]) == {}
    assert "fit of 3 stored collectives" in link_source(fits["intra"], None, 900.0, "X")
    assert link_source(None, 5.0, 900.0, "X") == "the command line"
    assert link_source(None, None, None, "X") == "X (constant)"
    assert "measured GEMM peak" in efficiency_source(None, "measured")
    assert efficiency_source(0.5, "catalog").startswith("--efficiency × the catalog peak")


def test_the_plan_uses_the_stored_collectives_fit_and_names_it(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    log_runs(uri, dp_tags(), time_errs=[0.2], mem_errs=[0.1])
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("distbench").experiment_id
    tags = {"workload": "collectives", "hardware": "cpu", "num_nodes": "1"}
    for busbw in (2.0, 2.4):
        run_id = client.create_run(experiment_id, tags=tags).info.run_id
        client.log_metric(run_id, "alpha_s.all_reduce", 2e-4)
        client.log_metric(run_id, "beta_busbw_gbps.all_reduce", busbw)
        client.set_terminated(run_id, "FINISHED")
    overrides = [*OVERRIDES, f"tracking.uri={uri}"]
    constant = make_plan(overrides, ["dp"], history=True)
    assert constant.predictions[0].assumptions["bandwidth_gbps"] == DEFAULT_CPU_INTERCONNECT_GBPS
    assert (
        "DEFAULT_CPU_INTERCONNECT_GBPS (constant)" in constant.extra["sources"]["intra_node_link"]
    )
    assert "DEFAULT_LATENCY_S[cpu] = 1500 µs" in constant.extra["sources"]["latency"]
    assert set(constant.error_bars["dp"]) == {"mem", "time"}
    measured = make_plan(overrides, ["dp"], history=True, measured_links=True)
    (p,) = measured.predictions
    assert p.assumptions["bandwidth_gbps"] == pytest.approx(2.2)  # the median of 2.0, 2.4
    assert p.assumptions["latency_s"] == pytest.approx(2e-4)
    assert p.step_time_s < constant.predictions[0].step_time_s  # a faster link than the constant
    assert "fit of 2 stored collectives" in measured.extra["sources"]["intra_node_link"]
    assert "intra-node 2.2 GB/s" in measured.extra["links"]
    assert set(measured.error_bars["dp"]) == {"mem"}  # time bars were for the constant links
    assert plan_json(measured)[-1]["sources"] == measured.extra["sources"]
    elsewhere = make_plan([*OVERRIDES, "tracking=none"], ["dp"], measured_links=True)
    assert "tracking=none" in elsewhere.extra["links"]
    assert elsewhere.predictions[0].assumptions["bandwidth_gbps"] == DEFAULT_CPU_INTERCONNECT_GBPS


def test_link_source_measured_resolves_the_fit_into_the_jobs_hardware(tmp_path, capsys):
    """hardware.link_source=measured: the job's own hardware figures (resolved.yaml, the
    logged pred_*) are the store's collectives fit; without one the catalog stays, said once."""
    from distbench import prepare as hw_module
    from distbench.prepare import prepare_job

    hw_module._LINK_WARNED.clear()  # said once per process: an earlier test may have said it
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    measured = [*OVERRIDES, f"tracking.uri={uri}", "hardware.link_source=measured"]
    assert resolve_job(compose_config(measured), CONF_DIR).measured.link_calibration_error is None
    no_store = prepare_job(resolve_job(compose_config(measured), CONF_DIR))
    assert no_store.hardware.link_source == "catalog"
    assert "no MLflow store" in no_store.measured.link_calibration_error
    fits = no_store.measured
    assert fits.measured_interconnect_gbps is None and fits.link_latency_us is None
    assert capsys.readouterr().err.count("link_source=measured") == 1
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("distbench")
    wrong_hw = {"workload": "collectives", "hardware": "h100_sxm", "num_nodes": "1"}
    for tags, busbw in (({**wrong_hw, "hardware": "cpu"}, 3.0), (wrong_hw, 400.0)):
        run_id = client.create_run(experiment_id, tags=tags).info.run_id
        client.log_metric(run_id, "alpha_s.all_reduce", 3e-4)
        client.log_metric(run_id, "beta_busbw_gbps.all_reduce", busbw)
        client.set_terminated(run_id, "FINISHED")
    hw_module._LINK_FITS_CACHE.clear()
    job = prepare_job(resolve_job(compose_config(measured), CONF_DIR))
    hw, fits = job.hardware, job.measured
    assert hw.link_source == "measured" and fits.link_calibration_error is None
    assert fits.measured_interconnect_gbps == pytest.approx(3.0)  # this hardware's, not the H100's
    assert fits.link_latency_us == pytest.approx(300.0)
    assert hw.interconnect_gbps is None  # the catalog figure stays beside it
    pred = predict(job)
    assert pred.assumptions["bandwidth_gbps"] == pytest.approx(3.0)
    assert pred.assumptions["latency_s"] == pytest.approx(3e-4)
    catalog = predict(resolve_job(compose_config([*OVERRIDES, f"tracking.uri={uri}"]), CONF_DIR))
    assert catalog.assumptions["bandwidth_gbps"] == DEFAULT_CPU_INTERCONNECT_GBPS
    assert pred.time_s["comm"] < catalog.time_s["comm"]  # 3 GB/s, 300 µs against the constants
    # Prediction inputs only: a run with measured links pairs with one without (compare, resume)
    assert run_signature(job.tree()) == run_signature(
        resolve_job(compose_config([*OVERRIDES, f"tracking.uri={uri}"]), CONF_DIR).tree()
    )


def test_search_layouts_carry_the_error_bars_of_their_strategys_stored_runs(tmp_path):
    from distbench.tools.plan import search_json, search_layouts

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    log_runs(uri, dp_tags(), time_errs=[0.2, 0.4], mem_errs=[0.1, 0.1])
    found = search_layouts([*OVERRIDES, f"tracking.uri={uri}"], micro_batches=(1, 2))
    with_bars = {label for label in found.error_bars}
    # dp_tags() is DeepSpeed's dp at ZeRO-0: its layouts (any micro batch), nothing else
    assert with_bars and all(label.startswith("deepspeed ") for label in with_bars)
    assert all(" z0 " in label for label in with_bars)
    assert {label for label, _ in found.ranked if " z0 " in label and "deepspeed" in label} == (
        with_bars
    )
    assert "from 2 finished runs" in found.history  # one key's runs, counted once
    doc = search_json(found)
    row = next(r for r in doc["ranked"] if r["layout"] in with_bars)
    assert row["pred_error"]["time"]["num_runs"] == 2
    assert all(r["pred_error"] == {} for r in doc["ranked"] if r["layout"] not in with_bars)
    bare = search_layouts([*OVERRIDES, f"tracking.uri={uri}"], micro_batches=(1,), history=False)
    assert bare.error_bars == {} and bare.history == ""
