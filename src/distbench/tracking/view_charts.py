"""The chart view of a sweep's shared view (tracking/dashboard.py): a parallel-coordinates chart
whose axes are the sweep's varied keys (as the run params that carry them) and its headline
metrics, in a section of its own right after MLflow's `headline` one.

MLflow picks no useful axes by itself. Its compare page's parallel-coordinates plot starts on
the first three params that differ, alphabetically, and the first metric the runs share
(ParallelCoordinatesPlotPanel.tsx, its `state`: `diffParamKeys.sort().slice(0, 3)`,
`sharedMetricKeys.slice(0, 1)`; in MLflow 3.17.2's bundle server/js/build/static/js/
1886.c80613f9.chunk.js), held in component state that no tag or URL sets: `layout.dp`,
`layout.pp`, `layout.tp` against a system metric. The experiment page's chart view makes a
parallel chart only for runs without metrics (RunsChartsCardConfig.getBaseChartAndSectionConfigs).
But a shared view carries the chart view's cards: `compareRunCharts` and `compareRunSections`
are among the fields the UI applies from `mlflow.sharedViewState.<key>`
(ExperimentPageUIState.ts, EXPERIMENT_PAGE_UI_STATE_FIELDS), and a PARALLEL card names its axes
(`selectedParams`, `selectedMetrics`). The UI then adds every metric's chart to these sections
(updateChartAndSectionConfigs), sorted by name with "Model metrics" and "System metrics" last,
so those two must be listed here or their charts have no section to show in.

A parallel chart shows only the runs that have every axis ("Only runs with all relevant
metrics and/or parameters will be displayed"): `axes_present` keeps the axes every finished run
of the sweep has, once they have run.

    python -c "from distbench.tracking.view_charts import chart_state as c; \\
print(c(['strategy.name', 'world_size'], ['step_time_s_p50']))"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PARALLEL = "PARALLEL"  # runs-charts.types.ts RunsChartType
HEADLINE_SECTION = "headline"  # the section MLflow makes of the `headline/` metrics
PARALLEL_SECTION = "headline: parallel coordinates"  # sorts right after "headline"
# The UI's sections of unprefixed and `system/` metrics (constants.tsx), always shown last.
MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"
SECTIONS = (HEADLINE_SECTION, PARALLEL_SECTION, MODEL_SECTION, SYSTEM_SECTION)
PARALLEL_CARD_ID = "distbench-parallel"
# One card across the section, taller than the 360 px default: its axes' names stay legible
# (a section's `columns` and `cardHeight`, RunsChartsDraggableCardsGridSection).
PARALLEL_LAYOUT = {"columns": 1, "cardHeight": 480}
GROUP_CHOICE = "name"  # a config group's node names its choice: strategy=dp → strategy.name
_ABSENT = object()


def section_id(name: str) -> str:
    return f"distbench-section-{name}"


def axis_params(swept_keys: Iterable[str], config: Any) -> list[str]:
    """The params that carry the swept keys, as every job logs its config flattened: a config
    group's choice is `<group>.name` (strategy → strategy.name), a plain or dotted key is
    itself (world_size, batch.micro_batch_size); a key the config lacks (`+extra=1,2`) is no
    param of the runs and is left out."""
    from omegaconf import DictConfig, OmegaConf

    params = []
    for key in swept_keys:
        node = OmegaConf.select(config, key, default=_ABSENT, throw_on_resolution_failure=False)
        if isinstance(node, DictConfig) and GROUP_CHOICE in node:
            params.append(f"{key}.{GROUP_CHOICE}")
        elif node is not _ABSENT and not isinstance(node, DictConfig):
            params.append(key)
    return params


def axis_metrics(workload_names: Iterable[str], headline: Sequence[str]) -> list[str]:
    """The headline metrics (in `headline`'s order) that every named workload logs; all of
    `headline` when a name is no registered workload."""
    from distbench import workloads

    specs = workloads.registry()
    names = [name for name in workload_names if name]
    if not names or any(name not in specs for name in names):
        return list(headline)
    logged = [{m.name for m in specs[name].metrics} for name in names]
    return [m for m in headline if all(m in each for each in logged)]


def chart_state(params: Sequence[str], metrics: Sequence[str]) -> dict[str, Any]:
    """The shared view's chart fields: the sections (MLflow's headline, the parallel chart's,
    its two last ones) and the parallel-coordinates card with these axes, full width, every
    run of the view in it (`showAllRuns`: the chart view shows the first 10 otherwise)."""
    card = {
        "uuid": PARALLEL_CARD_ID,
        "type": PARALLEL,
        "runsCountToCompare": 10,
        "metricSectionId": section_id(PARALLEL_SECTION),
        "deleted": False,
        "isGenerated": False,
        "selectedParams": list(params),
        "selectedMetrics": list(metrics),
        "showAllRuns": True,
    }
    sections = [
        {
            "uuid": section_id(name),
            "name": name,
            "display": True,
            "isReordered": False,
            "deleted": False,
            "isGenerated": name != PARALLEL_SECTION,
            **(PARALLEL_LAYOUT if name == PARALLEL_SECTION else {}),
        }
        for name in SECTIONS
    ]
    return {
        "compareRunCharts": [card],
        "compareRunSections": sections,
        "isAccordionReordered": False,  # the UI sorts the sections by name
    }


def parallel_axes(state: Mapping[str, Any]) -> tuple[list[str], list[str]] | None:
    """(params, metrics) of a view state's parallel-coordinates card, or None."""
    for card in state.get("compareRunCharts") or []:
        if card.get("uuid") == PARALLEL_CARD_ID:
            return list(card["selectedParams"]), list(card["selectedMetrics"])
    return None


def axes_present(
    params: Sequence[str], metrics: Sequence[str], runs: Iterable[Any]
) -> tuple[list[str], list[str]] | None:
    """The axes every FINISHED run has (MlflowClient runs); None when no run finished."""
    finished = [r for r in runs if r.info.status == "FINISHED"]
    if not finished:
        return None
    kept_params = [p for p in params if all(p in r.data.params for r in finished)]
    kept_metrics = [m for m in metrics if all(m in r.data.metrics for r in finished)]
    return kept_params, kept_metrics
