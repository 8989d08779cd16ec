"""`distbench plan`'s rows: each conf/strategy option composed and resolved as run.py would,
predicted (figures/predict.py), given its error bars, and one recommended (tools/plan/).

    python -c "from distbench.tools.plan import make_plan; print(make_plan(['model=tiny']).reason)"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distbench.compose.composer import composing
from distbench.compose.schema import ConfigError, HardwareConfig
from distbench.figures.links import LinkFit, link_fit_fields
from distbench.figures.pred_error import ErrorBar, calibrated_prediction
from distbench.figures.predict import Prediction, predict
from distbench.figures.recommend import recommend
from distbench.prepare import prepare_job
from distbench.probes.parts import Measurements
from distbench.tools.plan.inputs import (
    composed_or_why,
    efficiency_model,
    hardware_dict,
    host_mem_gib,
    plan_warnings,
    run_key_tags,
    split_strategy_override,
    strategy_options,
)
from distbench.tools.plan.sources import figure_sources
from distbench.tools.plan.store import stored_link_fits, strategy_error_bars


@dataclass
class Plan:
    predictions: list[Prediction]
    refused: dict[str, str]
    recommendation: str | None
    reason: str
    hardware: dict[str, Any]
    title: str
    dtype: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict)
    # strategy -> kind (mem, time) -> the observed error of its predictions (pred_error.py)
    error_bars: dict[str, dict[str, ErrorBar]] = field(default_factory=dict)
    calibrated: bool = False
    history: str = ""  # where the error bars came from, or why there are none


@dataclass
class _Shape:
    """What the plan's first resolved job fixes for every row (one hardware group per plan;
    hardware=auto is detected once)."""

    hardware: HardwareConfig
    measured: Measurements  # the first job's, with plan_measured
    plan_fields: dict[str, Any]  # what the plan sets on every row's own hardware
    plan_measured: dict[str, Any]  # and on its measurements (the store's link fits)
    dtype: str
    tracking: Any
    fits: dict[str, LinkFit]
    link_note: str
    warnings: list[str]
    title: str


@dataclass
class _Rows:
    """The strategies planned so far: predicted rows, refusals with their reason, and what each
    row's earlier runs are found by."""

    predictions: list[Prediction] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # row -> its runs' tags
    time_sources: dict[str, str] = field(default_factory=dict)  # row -> how its time is predicted
    shape: _Shape | None = None


def make_plan(
    overrides: list[str],
    strategies: list[str] | None = None,
    *,
    efficiency: float | None = None,
    bandwidth_gbps: float | None = None,
    latency_s: float | None = None,
    recompute: bool = False,
    history: bool = False,
    calibrated: bool = False,
    measured_links: bool = False,
) -> Plan:
    """Compose, resolve and predict every strategy; recommend one. With `history`, each
    prediction gets the error bar of the tracking store's earlier runs of its kind, and with
    `calibrated` too, is divided by it before the recommendation. With `measured_links`, the
    links are the α-β fits of the store's collectives runs of this hardware, per tier, where
    there are any (figures/links.py); `extra["sources"]` names where each figure came from."""
    overrides, from_overrides = split_strategy_override(efficiency_model(overrides, efficiency))
    rows = _Rows()
    with composing() as compose:
        for name in strategies or from_overrides or strategy_options(compose.conf_dir):
            cfg, why = composed_or_why(compose, [*overrides, f"strategy={name}"])
            if why is not None:  # an override of another engine's key
                rows.refused[name] = why
                continue
            job = _plannable_job(name, cfg, compose.conf_dir, rows.refused)
            if job is None:
                continue
            if rows.shape is None:
                rows.shape = _plan_shape(job, cfg, overrides, measured_links)
            rows.keys[name] = run_key_tags(job)
            rows.time_sources[name] = job.hardware.time_source
            hardware = dataclasses.replace(job.hardware, **rows.shape.plan_fields)
            measured = job.measured.replace(**rows.shape.plan_measured)
            rows.predictions.append(
                predict(
                    job.replace(hardware=hardware, measured=measured),
                    efficiency=efficiency,
                    bandwidth_gbps=bandwidth_gbps,
                    latency_s=latency_s,
                    recompute=recompute,
                )
            )
    sources = figure_sources(
        rows.shape and rows.shape.hardware,
        rows.shape and rows.shape.measured,
        rows.shape.fits if rows.shape else {},
        efficiency,
        bandwidth_gbps,
        latency_s,
    )
    return _recommended(rows, sources, history=history, calibrated=calibrated)


def resolve_row(cfg: Any, conf_dir: Path) -> Any:
    """The Job a plan row predicts (ConfigError for a config run.py refuses)."""
    from distbench.job import resolve_job

    return prepare_job(resolve_job(cfg, conf_dir))  # measured here, as run.py


def _plannable_job(name: str, cfg: Any, conf_dir: Path, refused: dict[str, str]) -> Any | None:
    """The strategy's Job, or None with the reason in `refused`: a config run.py refuses, a
    workload without a model, the one-device baseline asked for several ranks."""
    try:
        job = resolve_row(cfg, conf_dir)
    except ConfigError as exc:
        refused[name] = str(exc)
        return None
    if not job.builds_model:  # gemm, collectives: no model, no training step
        refused[name] = (
            f"workload={job.workload.name} builds no model; distbench plan predicts "
            "training (workload=train)"
        )
        return None
    if job.world_size_requested:  # the one-device baseline, pinned to one rank
        refused[name] = (
            f"strategy={name} runs on one device, got "
            f"world_size={job.world_size_requested}; use world_size=1 (run.py runs it "
            "on one rank in any sweep) or strategy=ddp"
        )
        return None
    return job


def _plan_shape(job: Any, cfg: Any, overrides: list[str], measured_links: bool) -> _Shape:
    """The plan's hardware (a CPU's memory shared by the host's ranks; the store's links with
    `measured_links`), precision, store, warnings and title, from its first job."""
    plan_fields: dict[str, Any] = {}
    plan_measured: dict[str, Any] = {}
    if job.hardware.device == "cpu" and job.hardware.mem_gib is None:
        host = host_mem_gib()  # ranks on one host share its memory
        nproc = job.topology.ranks_per_node
        plan_fields["mem_gib"] = None if host is None else host / nproc
    fits: dict[str, LinkFit] = {}
    link_note = ""
    if measured_links:  # the same fields hardware.link_source=measured fills
        fits, link_note = stored_link_fits(cfg.tracking, job.hardware.name)
        if fits:
            plan_fields["link_source"] = "measured"
            plan_measured = link_fit_fields(fits)
    # the rows' time fields are their own (each strategy's measured parts)
    hardware = dataclasses.replace(job.hardware, **plan_fields)
    batch = job.batch
    title = (
        f"distbench plan: model={job.model.name} "
        f"world_size={job.world_size} hardware={hardware.name} "
        f"dtype={job.dtype} batch={batch.name} "
        f"(micro_batch {batch.micro_batch_size} × "
        f"{batch.grad_accum_steps} × seq {batch.seq_len})"
    )
    return _Shape(
        hardware=hardware,
        measured=job.measured.replace(**plan_measured),
        plan_fields=plan_fields,
        plan_measured=plan_measured,
        dtype=job.dtype,
        tracking=cfg.tracking,
        fits=fits,
        link_note=link_note,
        warnings=plan_warnings(job, overrides),
        title=title,
    )


def _error_bars(rows: _Rows) -> tuple[dict[str, dict[str, ErrorBar]], str]:
    """Each row's error bars from the store, and where they came from."""
    shape = rows.shape
    bars, note = strategy_error_bars(shape and shape.tracking, rows.keys, rows.time_sources)
    # The stored runs predicted on their own links (KEY_TAGS has no link source).
    if shape is not None and shape.hardware.link_source == "measured" and bars:
        bars = {s: {k: b for k, b in kinds.items() if k != "time"} for s, kinds in bars.items()}
        note += "; no step-time error bars with measured links (observed on the runs' links)"
    return bars, note


def _recommended(rows: _Rows, sources: dict[str, str], *, history: bool, calibrated: bool) -> Plan:
    """The plan: the rows (divided by their error bars when `calibrated`), the recommendation
    among them, and what the notes under the table say."""
    bars, note = _error_bars(rows) if history else ({}, "")
    predictions = rows.predictions
    if calibrated:
        predictions = [
            calibrated_prediction(p, bars[p.strategy]) if bars.get(p.strategy) else p
            for p in predictions
        ]
    best, reason = recommend(predictions)
    shape = rows.shape
    return Plan(
        predictions=predictions,
        refused=rows.refused,
        recommendation=best,
        reason=reason,
        hardware=hardware_dict(shape and shape.hardware, shape and shape.measured),
        title=shape.title if shape else "distbench plan",
        dtype=shape.dtype if shape else "fp32",
        extra={
            "warnings": shape.warnings if shape else [],
            "sources": sources,
            "links": shape.link_note if shape else "",
        },
        error_bars=bars,
        calibrated=calibrated,
        history=note,
    )
