"""What a sweep's parent run carries, so that the experiment's runs table and chart view show the
sweep without opening it: the swept keys as params (`strategy=dp,zero3`, `world_size=2,4`) and,
at the end, its summary (`num_jobs`, `num_finished`, `num_failed`, `num_skipped`,
`best_throughput_tokens_per_s` as metrics; the best run's name, strategy and id as tags).

    python run.py -m strategy=dp,zero3 world_size=2   # parent: params strategy, world_size
"""

from __future__ import annotations

from typing import Any

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


def best_outcome(outcomes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The outcome with the highest BEST_METRIC (a FINISHED job, or a skipped one standing in by
    its earlier run's figures), or None."""
    scored = [o for o in outcomes if isinstance(o.get("metrics", {}).get(BEST_METRIC), float | int)]
    return max(scored, key=lambda o: o["metrics"][BEST_METRIC], default=None)


def sweep_summary(
    outcomes: list[dict[str, Any]], num_jobs: int | None
) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) summarising a sweep for its parent run (num_jobs: the sweep's count when
    known, else the outcomes')."""
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
    return metrics, tags


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
