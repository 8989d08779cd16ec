"""The prediction errors the MLflow store holds, read for `distbench plan` and for each new run
(figures/pred_error.py computes the error bars; this module only reads). Reading never creates
a store: a sqlite file or a file store that does not exist has no history.

    python -c "from distbench.tracking.pred_history import *; \
        print(load_error_bars('sqlite:///mlflow.db', 'distbench'))"
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from distbench.figures.links import LinkFit, link_fits
from distbench.figures.pred_error import (
    KEY_TAGS,
    PRED_METRICS,
    ErrorBar,
    PredKey,
    error_bars,
    pred_key,
    prior_metrics,
)


def store_exists(tracking_uri: str) -> bool:
    """Whether there is a store to read: a sqlite file or a file-store directory that exists;
    a server is assumed to be there (the client fails fast when it is not)."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme == "sqlite":
        path = tracking_uri.split(":///", 1)[-1]
        return path != ":memory:" and Path(path).is_file()
    if parts.scheme in ("", "file"):
        return Path(parts.path or tracking_uri).is_dir()
    return True


def finished_runs(
    tracking_uri: str, experiment: str, tags: Mapping[str, str] | None = None
) -> list[Any]:
    """The experiment's FINISHED runs whose tags equal `tags` (all runs without), newest
    first; [] when the store or the experiment does not exist."""
    if not store_exists(tracking_uri):
        return []
    from distbench.tracking.mlflow_store import client, find_runs

    found = client(tracking_uri).get_experiment_by_name(experiment)
    if found is None:
        return []
    runs = find_runs(tracking_uri, found.experiment_id, dict(tags or {}))
    return [r for r in runs if r.info.status == "FINISHED"]


def load_link_fits(tracking_uri: str, experiment: str, hardware: str) -> dict[str, LinkFit]:
    """tier -> LinkFit (figures/links.py) of the stored collectives runs of this hardware."""
    return link_fits(
        finished_runs(tracking_uri, experiment, {"workload": "collectives", "hardware": hardware})
    )


def load_error_bars(
    tracking_uri: str,
    experiment: str,
    tags: Mapping[str, str] | None = None,
    time_source: str | None = None,
) -> dict[PredKey, dict[str, ErrorBar]]:
    """key -> kind -> ErrorBar (pred_error.error_bars) of the runs `finished_runs` reads; with
    `time_source`, the step-time bars of the runs predicted by it only."""
    return error_bars(finished_runs(tracking_uri, experiment, tags), time_source=time_source)


def prior_errors(
    tracking: Any, tags: Mapping[str, str], metrics: Mapping[str, float], time_source: str
) -> dict[str, float]:
    """The metrics a new run logs of the earlier runs of its key (pred_error.prior_metrics;
    step time: of the runs predicted by the same `time_source`),
    read from the store `tracking` (the job's tracking config) resolves to; {} without
    tracking, predictions, a key or earlier runs. Never raises: a store that cannot be read
    costs the run its priors, not its record."""
    from distbench.tracking.sweep import resolve_tracking_uri

    key = pred_key(tags)
    uri = resolve_tracking_uri(tracking, Path.cwd())
    if uri is None or key is None or not any(p in metrics for p, _, _ in PRED_METRICS.values()):
        return {}
    try:
        tags_of_key = dict(zip(KEY_TAGS, key, strict=True))
        bars = load_error_bars(uri, tracking.experiment_name, tags_of_key, time_source)
    except Exception as exc:  # reading priors is optional
        print(f"distbench: no prediction-error priors ({type(exc).__name__}: {exc})"[:300])
        return {}
    return prior_metrics(bars.get(key, {}), metrics)
