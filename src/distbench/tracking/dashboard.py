"""MLflow's UI as distbench's dashboard: what makes a sweep's runs readable at a glance there.

- The headline metrics (step time p50, tokens/s, TFLOP/s per device, MFU, peak memory, cost per
  1M tokens: the catalogue's `MetricSpec.headline`) are logged twice, under their own names and
  under `headline/`. MLflow's chart view makes a section of each metric prefix and sorts the
  prefixed sections first, alphabetically (runs-charts.types.ts, getBaseChartAndSectionConfigs):
  `headline` comes before `progress` and `system`, the unprefixed "Model metrics" last.
- MLflow has no per-experiment default for the runs table's columns. What it has is a shared
  view: an experiment tag `mlflow.sharedViewState.<key>` whose value the UI applies (columns,
  search filter, charts) when a runs page URL carries `viewStateShareKey=<key>`; MLflow 3.17
  lists such tags as saved views (a JSON envelope: name, createdAt, updatedAt and the state as
  a JSON string). Each sweep gets one: its children listed flat (filtered by parent), the
  headline metrics and the swept keys as columns, and in its chart view a parallel-coordinates
  chart of the swept keys against the headline metrics (tracking/view_charts.py: MLflow's own
  default axes are the first params alphabetically), its axes cut at the sweep's end to those
  every finished child has.
- Printed URLs open the training view (`workflowType=machine_learning`: the default is GenAI's)
  and, for a sweep, its shared view.
- Prediction inputs measured on this machine (the `measured.*` figures: step parts, link fits,
  the catalog peak a measured one replaced) stay in resolved.yaml, a run artifact, not in
  params; the reasons a measurement failed (`measured.*_error`) stay params.
- The report's tables are logged with `MlflowClient.log_table` too, which MLflow renders and
  compares across runs (artifacts `report/tables/<name>.json`).

    python -c "from distbench.tracking.dashboard import training_url as t; \\
print(t('http://127.0.0.1:5000/#/experiments/1/runs', 'distbench-0123456789ab'))"
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distbench.tracking import view_charts

HEADLINE_PREFIX = "headline/"
TRAINING_VIEW = {"workflowType": "machine_learning"}
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow UI's constants.tsx
SHARED_VIEW_URL_PARAM = "viewStateShareKey"
SWEEP_VIEW_PREFIX = "distbench-"
SWEEP_VIEW_ID_CHARS = 12  # of the parent run id (uuid4 hex): short enough for a printed URL
# The run tags a sweep's table shows first (orchestrator.naming.NAME_TAGS' most telling).
VIEW_TAGS = ("strategy", "world_size", "zero_stage", "model", "repeat", "oversubscribed")
MEASURED_NODE = "measured."
ERROR_SUFFIX = "_error"
REPORT_TABLES_DIR = "report/tables"


def headline_names() -> list[str]:
    """The catalogue's headline metrics, in its order (workloads.metric_catalog)."""
    from distbench.workloads import metric_catalog

    return [name for name, spec in metric_catalog().items() if spec.headline]


def headline_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """`headline/<name>` for each headline metric the run has."""
    return {
        f"{HEADLINE_PREFIX}{k}": v for k in headline_names() if (v := metrics.get(k)) is not None
    }


def with_headline(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics and their headline copies (a copy is never logged over a real name)."""
    return {**headline_metrics(metrics), **metrics}


def without_prediction_inputs(params: Mapping[str, str]) -> dict[str, str]:
    """The params less the measured prediction inputs (`measured.<figure>`): they stay in the
    run's resolved.yaml. The reasons a measurement failed (`measured.*_error`) stay."""
    return {
        k: v
        for k, v in params.items()
        if not k.startswith(MEASURED_NODE) or k.endswith(ERROR_SUFFIX)
    }


def training_url(runs_url: str, view_key: str | None = None) -> str:
    """A runs page URL (`…/#/experiments/<id>/runs`) that opens MLflow's training view, and the
    shared view `view_key` when given."""
    query = {**TRAINING_VIEW, **({SHARED_VIEW_URL_PARAM: view_key} if view_key else {})}
    return f"{runs_url}?{urllib.parse.urlencode(query)}"


def sweep_view_key(parent_run_id: str) -> str:
    """The key of a sweep's shared view: `distbench-<its parent run id's first 12 digits>`."""
    return f"{SWEEP_VIEW_PREFIX}{parent_run_id[:SWEEP_VIEW_ID_CHARS]}"


def view_columns(swept_keys: Iterable[str]) -> list[str]:
    """The runs table's columns of a sweep's view, in MLflow's canonical form (keyType.`name`):
    its duration, the tags that name a run, the swept keys that are params, the headline
    metrics."""
    tags = [f"tags.`{t}`" for t in VIEW_TAGS]
    params = [f"params.`{k}`" for k in swept_keys if "." in k]  # a group's choice is a tag
    metrics = [f"metrics.`{HEADLINE_PREFIX}{name}`" for name in headline_names()]
    return ["attributes.`Duration`", *tags, *params, *metrics]


def sweep_view_state(
    parent_run_id: str,
    swept_keys: Iterable[str],
    axes: tuple[Sequence[str], Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The shared view of a sweep: its children flat, by run name (a config's repeats side by
    side), with view_columns. Sorted by start time MLflow would fold them under their parent
    (ExperimentViewRuns' shouldNestChildrenAndFetchParents). `axes` (params, metrics): its
    chart view's parallel-coordinates chart (view_charts.chart_state)."""
    state = {
        "searchFilter": f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        "orderByKey": "tags.`mlflow.runName`",  # the UI's "Run Name" sort (constants.tsx)
        "orderByAsc": True,
        "selectedColumns": view_columns(swept_keys),
    }
    return {**state, **(view_charts.chart_state(*axes) if axes else {})}


def sweep_axes(swept: Iterable[str], config: Any) -> tuple[list[str], list[str]]:
    """The parallel-coordinates axes of a sweep: the params of its swept keys, the headline
    metrics its workload(s) log (`swept`: its keys, or {key: its choices, comma-separated})."""
    from omegaconf import OmegaConf

    swept_workload = swept.get("workload") if isinstance(swept, Mapping) else None
    workload = swept_workload or OmegaConf.select(
        config, "workload.name", default="", throw_on_resolution_failure=False
    )
    return (
        view_charts.axis_params(swept, config),
        view_charts.axis_metrics(str(workload or "").split(","), headline_names()),
    )


def saved_view_value(name: str, state: Mapping[str, Any], now_ms: int) -> str:
    """The tag value MLflow's UI reads as a saved view (its envelope: the state as a JSON
    string inside)."""
    return json.dumps(
        {"name": name, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(state)}
    )


def log_sweep_view(
    tracking_uri: str,
    experiment_id: str,
    parent_run_id: str,
    parent_run_name: str,
    swept_keys: Iterable[str],
    config: Any = None,
) -> str:
    """Store the sweep's shared view on its experiment; returns its key (for training_url).
    With the sweep's composed `config` its chart view gets the parallel-coordinates chart
    (sweep_axes; `swept_keys` may map each key to its choices)."""
    axes = None
    if config is not None:
        with contextlib.suppress(Exception):  # no chart rather than no view
            axes = sweep_axes(swept_keys, config)
    key = sweep_view_key(parent_run_id)
    value = saved_view_value(
        f"distbench {parent_run_name}",
        sweep_view_state(parent_run_id, swept_keys, axes),
        int(time.time() * 1000),
    )
    _set_view(tracking_uri, experiment_id, key, value)
    return key


def _set_view(tracking_uri: str, experiment_id: str, key: str, value: str) -> None:
    from distbench.tracking.mlflow_store import client, retry

    mlflow = client(tracking_uri)
    retry(
        lambda: mlflow.set_experiment_tag(experiment_id, f"{SHARED_VIEW_TAG_PREFIX}{key}", value),
        tracking_uri=tracking_uri,
    )


def fit_view_axes(tracking_uri: str, experiment_id: str, parent_run_id: str) -> bool:
    """At the sweep's end: its view's parallel-coordinates axes cut to those every finished
    child has (a run that lacks one axis is left out of the chart, so one absent metric would
    empty it). Returns whether the view changed."""
    from distbench.tracking.mlflow_store import client, find_runs

    key = sweep_view_key(parent_run_id)
    tag = f"{SHARED_VIEW_TAG_PREFIX}{key}"
    envelope = json.loads(client(tracking_uri).get_experiment(experiment_id).tags[tag])
    state = json.loads(envelope["state"])
    axes = view_charts.parallel_axes(state)
    children = find_runs(tracking_uri, experiment_id, {"mlflow.parentRunId": parent_run_id})
    present = view_charts.axes_present(*axes, children) if axes else None
    if present is None or present == axes:
        return False
    state.update(view_charts.chart_state(*present))
    now_ms = int(time.time() * 1000)
    value = json.dumps({**envelope, "updatedAt": now_ms, "state": json.dumps(state)})
    _set_view(tracking_uri, experiment_id, key, value)
    return True


def log_tables(tracking_uri: str, run_id: str, tables: Mapping[str, Any]) -> list[str]:
    """Each non-empty DataFrame of `tables` as `report/tables/<name>.json` with MLflow's
    log_table (a table MLflow renders and compares). log_table appends to a file the run has
    already: a report logged again replaces it instead. Returns the artifact paths."""
    from distbench.tracking.mlflow_store import client

    mlflow = client(tracking_uri)
    existing = {a.path for a in mlflow.list_artifacts(run_id, REPORT_TABLES_DIR)}
    logged = []
    for name, frame in tables.items():
        if frame is None or frame.empty:
            continue
        path = f"{REPORT_TABLES_DIR}/{name}.json"
        plain = frame.reset_index(drop=frame.index.name is None)
        if path in existing:  # the same split-orient JSON log_table writes, over the old one
            with tempfile.TemporaryDirectory() as tmp:
                local = Path(tmp) / f"{name}.json"
                plain.to_json(local, orient="split", index=False, date_format="iso")
                mlflow.log_artifact(run_id, str(local), REPORT_TABLES_DIR)
        else:
            mlflow.log_table(run_id, data=plain, artifact_file=path)
        logged.append(path)
    return logged
