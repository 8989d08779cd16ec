"""What a sweep's parent run carries, so that the experiment's runs table and chart view show the
sweep without opening it: the swept keys as params (`strategy=dp,zero3`, `world_size=2,4`) and,
at the end, its summary (`num_jobs`, `num_finished`, `num_failed`, `num_skipped`,
`best_throughput_tokens_per_s` as metrics; the best run's name, strategy, id, layout and tokens
per step as tags; how well the runs were predicted, figures/sweep_accuracy.py:
`pred_step_time_within_target_frac`, `pred_step_time_common_factor`, ... as metrics). "Best"
never compares runs of different world sizes or tokens per step
(figures/fair.py): it is the best of the largest such group (`best_scope` says which), and
`best_by_group` names every group's best.

    python run.py -m strategy=dp,zero3 world_size=2   # parent: params strategy, world_size
"""

from __future__ import annotations

from typing import Any

from distbench.figures.fair import (
    comparable_keys,
    group_label,
    layout_of,
    per_device,
    tokens_per_step_of,
    tokens_text,
)
from distbench.figures.sweep_accuracy import accuracy_metrics

BEST_METRIC = "throughput_tokens_per_s"  # higher is better
STATUSES = ("FINISHED", "FAILED", "SKIPPED")


def varied_params(task_overrides: list[str], sweeper_params: dict[str, Any]) -> dict[str, str]:
    """{key: its choices joined by commas} for each swept key of the command line and of the
    sweeper's own `params` (an Optuna range is kept as written, e.g. `int(interval(1, 8))`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    merged = {str(k): f"{k}={v}" for k, v in sweeper_params.items()}
    for override in task_overrides:
        merged[override.split("=", 1)[0]] = override
    out = {}
    parser = OverridesParser.create()
    for key, text in merged.items():
        try:
            override = parser.parse_override(text)
        except Exception:  # not parseable here (a plugin's own syntax): keep it as written
            out[key.lstrip("+~")] = text.split("=", 1)[1]
            continue
        if not override.is_sweep_override():
            continue
        name = override.get_key_element().lstrip("+~")
        try:
            out[name] = ",".join(override.sweep_string_iterator())
        except Exception:  # a range or interval a sampler draws from
            out[name] = text.split("=", 1)[1]
    return out


def _world_size(outcome: dict[str, Any]) -> int | None:
    value = str(outcome.get("world_size", ""))
    return int(value) if value.isdigit() else None


def comparable_groups(outcomes: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[int]]:
    """{comparison group: the positions of its outcomes that have BEST_METRIC}: runs of one
    world size and one number of tokens per step (figures/fair.py; BEST_METRIC is a whole-job
    figure, so it never compares across world sizes or tokens per step)."""
    scored = [i for i, o in enumerate(outcomes) if isinstance(_metric(o), float | int)]
    keys = comparable_keys(
        [_world_size(outcomes[i]) for i in scored],
        [tokens_per_step_of(outcomes[i].get("metrics") or {}) for i in scored],
        per_device(BEST_METRIC),
    )
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, key in zip(scored, keys, strict=True):
        groups.setdefault(key, []).append(i)
    return groups


def _metric(outcome: dict[str, Any]) -> Any:
    return (outcome.get("metrics") or {}).get(BEST_METRIC)


def headline_group(groups: dict[tuple[Any, ...], list[int]]) -> tuple[Any, ...] | None:
    """The group the parent's best_* name: the one with the most runs, then the largest world
    size, then the most tokens per step."""
    if not groups:
        return None
    return max(groups, key=lambda k: (len(groups[k]), k[1] or 0, k[0] or 0))


def best_outcome(outcomes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The outcome with the highest BEST_METRIC (a FINISHED job, or a skipped one standing in by
    its earlier run's figures) among the runs of the headline comparison group (same world size
    and tokens per step: headline_group), or None."""
    groups = comparable_groups(outcomes)
    key = headline_group(groups)
    if key is None:
        return None
    return max((outcomes[i] for i in groups[key]), key=_metric)


def _best_by_group(outcomes: list[dict[str, Any]]) -> str:
    """`world_size 2, 1,024 tokens/step: dp-ws2 (1,146 tokens/s, 2×1×1); ...` of every group."""
    parts = []
    groups = comparable_groups(outcomes)
    for key, members in sorted(groups.items(), key=lambda kv: (kv[0][1] or 0, kv[0][0] or 0)):
        best = max((outcomes[i] for i in members), key=_metric)
        layout = layout_of(best) or "-"
        parts.append(
            f"{group_label(key)}: {best.get('run_name', '?')} ({_metric(best):,.0f} tokens/s, "
            f"{layout}, {len(members)} run{'s' if len(members) > 1 else ''})"
        )
    return "; ".join(parts)


def sweep_summary(
    outcomes: list[dict[str, Any]], num_jobs: int | None
) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) summarising a sweep for its parent run (num_jobs: the sweep's count when
    known, else the outcomes'). The best_* name the best run of the headline group
    (best_outcome), with its layout, tokens per step and group (`best_scope`); when runs differ
    in world size or tokens per step, `best_by_group` names each group's best."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for status in STATUSES:
        count = sum(o.get("status") == status for o in outcomes)
        metrics[f"num_{status.lower()}"] = float(count)
        tags[f"num_{status.lower()}"] = str(count)
    metrics["num_jobs"] = float(num_jobs if num_jobs is not None else len(outcomes))
    best = best_outcome(outcomes)
    if best is not None:
        metrics[f"best_{BEST_METRIC}"] = float(best["metrics"][BEST_METRIC])
        tags["best_run_name"] = str(best.get("run_name", ""))
        if best.get("strategy"):
            tags["best_strategy"] = str(best["strategy"])
        run_id = best.get("run_id") or best.get("previous_run_id")
        if run_id:
            tags["best_run_id"] = str(run_id)
        tags.update(_best_scope(outcomes, best))
    finished = [o.get("metrics") or {} for o in outcomes if o.get("status") == "FINISHED"]
    metrics.update(accuracy_metrics(finished))
    return metrics, tags


def _best_scope(outcomes: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, str]:
    """The best run's layout and tokens per step, the group it is best in, and every group's
    best when there are several."""
    tags = {}
    if layout_of(best):
        tags["best_layout"] = str(layout_of(best))
    tokens = tokens_per_step_of(best.get("metrics") or {})
    if tokens is not None:
        tags["best_tokens_per_step"] = tokens_text(tokens)
    groups = comparable_groups(outcomes)
    key = headline_group(groups)
    if key is not None and len(groups) > 1:
        tags["best_scope"] = (
            f"{group_label(key)} ({len(groups[key])} of {sum(map(len, groups.values()))} runs; "
            "runs of another world size or tokens per step are not compared: best_by_group)"
        )
        tags["best_by_group"] = _best_by_group(outcomes)[:5000]
    elif key is not None:
        tags["best_scope"] = group_label(key)  # every run compares with every other
    return tags


def log_summary(
    tracking_uri: str, parent_run_id: str, outcomes: list[dict[str, Any]], num_jobs: int | None
) -> None:
    """Log sweep_summary() on the parent run (one batch)."""
    from mlflow.entities import Metric, RunTag

    from distbench.tracking.live import now_ms
    from distbench.tracking.mlflow_store import client, retry

    metrics, tags = sweep_summary(outcomes, num_jobs)
    logged_ms = now_ms()
    mlflow = client(tracking_uri)
    retry(
        lambda: mlflow.log_batch(
            parent_run_id,
            metrics=[Metric(k, v, logged_ms, 0) for k, v in metrics.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        ),
        tracking_uri=tracking_uri,
    )
