"""`distbench compare`: did a candidate sweep get slower or hungrier than a baseline sweep?

Child runs of the two sweeps are paired by configuration, the `distbench.signature` tag (a hash
of the resolved config minus where results go: `tracking`, `limits`, `resume`, `retry_failed`;
so the same config on new code pairs up, another batch or model does not). Several FINISHED runs
of one signature in a sweep (repeats) are samples of it.

The rule, per configuration and metric (pure functions below, no MLflow in them):

    b, c      = the median of the baseline's and of the candidate's runs
    change %  = 100 * (c - b) / b
    worse %   = -change % for higher-is-better metrics (throughput, TFLOP/s, MFU),
                +change % for lower-is-better ones (peak memory, step time, cost): the goal
                that the workload's MetricSpec declares (distbench.workloads.metric_catalog;
                a plug-in's metrics too)
    noise %   = the larger of
                - 2 x the relative standard deviation (sample std / median) of the repeated
                  runs of either sweep (a sweep with one run of the config adds nothing), and
                - for metrics computed from the step time (MetricSpec.step_time: step_time_s_*,
                  throughput, TFLOP/s, MFU, cost): the largest within-run step-time spread
                  100 * (p90 - p50) / p50 of any run of either sweep
    regression  when worse % > threshold % AND worse % > noise %
    improved    when -worse % > threshold % AND -worse % > noise %
    within noise  when worse % > threshold % but not beyond the noise; ok otherwise.

A configuration that finished in the baseline and only failed in the candidate is a regression
too (`failed in candidate`); one present in a single sweep is listed, not judged.

The comparison is logged as its own MLflow run in the candidate's experiment (tag
`distbench.kind=compare`, params `baseline_run_id`, `candidate_run_id`, `threshold_pct`,
`metrics`; metrics `num_regressions`, `num_configs_regressed`, `num_configs_compared`; the table
as artifacts `compare/compare.md` and `compare/compare.csv`), and the candidate's parent run is
tagged `distbench.compare_run_id` and `distbench.num_regressions`.

    distbench compare --baseline <parent run id> --candidate latest      # exit 1 on a regression
    distbench compare --baseline previous     # the newest sweep against the one just before it
    distbench compare --baseline multirun/2026-11-22/10-00-00 --candidate sweep-02-00-00
    distbench compare --baseline ID --candidate ID --threshold-pct 10 --metrics step_time_s_p50
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from distbench.figures.metrics import step_spread_pct
from distbench.tools.report.views import markdown_table
from distbench.tracking.live import now_ms
from distbench.tracking.mlflow_store import retry
from distbench.tracking.signature import SIGNATURE_TAG
from distbench.workloads import metric_catalog

KIND_TAG = "distbench.kind"
COMPARE_ARTIFACT_DIR = "compare"
DEFAULT_METRICS = ("throughput_tokens_per_s", "peak_mem_gib")
DEFAULT_THRESHOLD_PCT = 5.0
REPEAT_NOISE_SIGMAS = 2.0
REGRESSION = "regression"
FAILED = "failed in candidate"
IMPROVED = "improved"
WITHIN_NOISE = "within noise"
OK = "ok"
REGRESSION_VERDICTS = frozenset({REGRESSION, FAILED})
UNPAIRED_VERDICTS = frozenset({"only in baseline", "only in candidate"})


@dataclass(frozen=True)
class RunSample:
    """One child run, as much of it as the comparison needs."""

    run_id: str
    signature: str
    label: str
    status: str
    metrics: Mapping[str, float] = field(default_factory=dict)
    machine: str = ""


@dataclass(frozen=True)
class Row:
    """One configuration × metric of the comparison."""

    config: str
    signature: str
    metric: str
    goal: str
    baseline: float | None
    baseline_n: int
    candidate: float | None
    candidate_n: int
    change_pct: float | None
    noise_pct: float | None
    verdict: str
    note: str = ""

    @property
    def regression(self) -> bool:
        return self.verdict in REGRESSION_VERDICTS


# --------------------------------------------------------------------------- pure rule


def goals() -> dict[str, str]:
    """Every metric a workload declares (WorkloadSpec.metrics, a plug-in's too) → "max" (higher
    is better) or "min" (lower is better)."""
    return {name: metric.goal for name, metric in metric_catalog().items()}


def from_step_time(metric: str) -> bool:
    """Whether `metric` is computed from the median step time (MetricSpec.step_time): its noise
    includes the step-time spread."""
    spec = metric_catalog().get(metric)
    return spec is not None and spec.step_time


def parse_metrics(text: str | None) -> list[str]:
    """`a,b` → ["a", "b"]; ValueError naming an unknown metric and the allowed ones."""
    names = [m.strip() for m in (text or ",".join(DEFAULT_METRICS)).split(",") if m.strip()]
    known = goals()
    for name in names:
        if name not in known:
            raise ValueError(f"--metrics: unknown metric {name!r}; use some of {', '.join(known)}")
    if not names:
        raise ValueError("--metrics is empty; use e.g. throughput_tokens_per_s,peak_mem_gib")
    return names


def check_threshold(threshold_pct: float) -> float:
    if not threshold_pct >= 0:  # also NaN
        raise ValueError(f"--threshold-pct {threshold_pct} must be a percentage >= 0")
    return threshold_pct


def repeat_noise_pct(values: Sequence[float]) -> float:
    """2 × the relative sample standard deviation of repeated runs, in %; 0 for one run."""
    if len(values) < 2:
        return 0.0
    center = statistics.median(values)
    if center == 0:
        return 0.0
    return 100.0 * REPEAT_NOISE_SIGMAS * statistics.stdev(values) / abs(center)


def noise_pct(metric: str, baseline: Sequence[RunSample], candidate: Sequence[RunSample]) -> float:
    """The noise of `metric` for one configuration (see the module docstring)."""
    sides = [
        [r.metrics[metric] for r in runs if metric in r.metrics] for runs in (baseline, candidate)
    ]
    noise = max(repeat_noise_pct(values) for values in sides)
    if from_step_time(metric):
        spreads = [step_spread_pct(r.metrics) for r in (*baseline, *candidate)]
        noise = max([noise, *(s for s in spreads if s is not None)])
    return noise


def worse_pct(change_pct: float, goal: str) -> float:
    """How much worse, in %: a throughput drop or a memory rise is positive."""
    return -change_pct if goal == "max" else change_pct


def judge(worse: float, noise: float, threshold_pct: float) -> str:
    """The verdict of one metric: beyond both the threshold and the noise, or not."""
    if worse > threshold_pct and worse > noise:
        return REGRESSION
    if -worse > threshold_pct and -worse > noise:
        return IMPROVED
    return WITHIN_NOISE if worse > threshold_pct else OK


def _machines_note(baseline: Sequence[RunSample], candidate: Sequence[RunSample]) -> str:
    machines = [{r.machine for r in runs if r.machine} for runs in (baseline, candidate)]
    return "other machine" if all(machines) and machines[0] != machines[1] else ""


def compare_config(
    config: str,
    signature: str,
    baseline: Sequence[RunSample],
    candidate: Sequence[RunSample],
    metrics: Sequence[str],
    threshold_pct: float,
) -> list[Row]:
    """The rows of one configuration: one per metric, FINISHED runs only."""
    done = [[r for r in runs if r.status == "FINISHED"] for runs in (baseline, candidate)]
    note = _machines_note(*done)
    rows = []
    known = goals()
    for metric in metrics:
        goal = known[metric]
        b_values, c_values = (
            [r.metrics[metric] for r in runs if metric in r.metrics] for runs in done
        )
        b = statistics.median(b_values) if b_values else None
        c = statistics.median(c_values) if c_values else None
        change = noise = None
        if not baseline:
            verdict = "only in candidate"
        elif not candidate:
            verdict = "only in baseline"
        elif done[0] and not done[1]:
            verdict = FAILED
        elif not done[0]:
            verdict = "failed in baseline" if done[1] else "failed in both"
        elif b is None or c is None or b == 0:
            verdict = "no data"
        else:
            change = 100.0 * (c - b) / abs(b)
            noise = noise_pct(metric, *done)
            verdict = judge(worse_pct(change, goal), noise, threshold_pct)
        rows.append(
            Row(
                config,
                signature,
                metric,
                goal,
                b,
                len(b_values),
                c,
                len(c_values),
                change,
                noise,
                verdict,
                note,
            )
        )
    return rows


def _labels(samples: Iterable[RunSample]) -> dict[str, str]:
    """signature → a readable name: the run name (dp-ws2), plus #signature where two
    configurations share a name."""
    names: dict[str, str] = {}
    for sample in samples:
        names.setdefault(sample.signature, sample.label)
    counts = pd.Series(list(names.values())).value_counts()
    return {
        sig: (name if counts[name] == 1 else f"{name} #{sig[:8]}") for sig, name in names.items()
    }


def compare_sweeps(
    baseline: Sequence[RunSample],
    candidate: Sequence[RunSample],
    metrics: Sequence[str] = DEFAULT_METRICS,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
) -> list[Row]:
    """Every configuration of either sweep × every metric, sorted by configuration name."""
    labels = _labels([*baseline, *candidate])
    rows: list[Row] = []
    for signature in sorted(labels, key=lambda s: (labels[s], s)):
        base = [r for r in baseline if r.signature == signature]
        cand = [r for r in candidate if r.signature == signature]
        rows += compare_config(labels[signature], signature, base, cand, metrics, threshold_pct)
    return rows


def regressed_configs(rows: Iterable[Row]) -> list[str]:
    return sorted({r.config for r in rows if r.regression})


def compared_configs(rows: Iterable[Row]) -> list[str]:
    """Configurations present in both sweeps (judged, whatever the verdict)."""
    return sorted({r.config for r in rows if r.verdict not in UNPAIRED_VERDICTS})


def to_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """The table as logged (compare.csv / compare.md)."""
    return pd.DataFrame(
        [
            {
                "config": r.config,
                "metric": r.metric,
                "goal": r.goal,
                "baseline": r.baseline,
                "baseline_runs": r.baseline_n,
                "candidate": r.candidate,
                "candidate_runs": r.candidate_n,
                "change_pct": r.change_pct,
                "noise_pct": r.noise_pct,
                "verdict": r.verdict,
                "note": r.note,
                "signature": r.signature,
            }
            for r in rows
        ]
    )


def _num(value: float | None, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}" if sign else f"{value:.4g}"


def summary_line(rows: Sequence[Row], threshold_pct: float) -> str:
    bad = regressed_configs(rows)
    compared = compared_configs(rows)
    if not bad:
        return (
            f"distbench: compare: no regression in {len(compared)} configuration(s) "
            f"(threshold {threshold_pct:g} %, beyond noise)"
        )
    return (
        f"distbench: compare: REGRESSION in {len(bad)} of {len(compared)} configuration(s): "
        f"{', '.join(bad)} (threshold {threshold_pct:g} %, beyond noise)"
    )


# --------------------------------------------------------------------------- MLflow I/O


def samples_of(runs: Iterable[Any]) -> list[RunSample]:
    """MLflow runs → RunSample; a run without a signature tag is keyed by its run name."""
    samples = []
    for run in runs:
        tags = run.data.tags
        machine = "|".join(
            tags.get(k, "") for k in ("hw.cpu_model", "hw.device_name", "hw.device_count")
        )
        samples.append(
            RunSample(
                run_id=run.info.run_id,
                signature=tags.get(SIGNATURE_TAG) or f"name:{run.info.run_name}",
                label=run.info.run_name or run.info.run_id[:8],
                status=run.info.status,
                metrics=dict(run.data.metrics),
                machine=machine.strip("|"),
            )
        )
    return samples


def load_sweep(
    tracking_uri: str, sweep: str, experiment: str, anchor: str | None = None
) -> tuple[Any, list[RunSample]]:
    """(report.Selection, samples) of a sweep named as `distbench report --sweep` takes it
    (report.SWEEP_FORMS); "previous" is the sweep started just before `anchor` (the candidate's
    parent run id). LookupError with a one-line reason otherwise."""
    from distbench.tools.report import load_runs

    selection = load_runs(tracking_uri, sweep, experiment, anchor)
    return selection, samples_of(selection.runs)


def print_table(rows: Sequence[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for header in ("config", "metric", "baseline", "candidate", "change %", "noise %", "verdict"):
        table.add_column(header, justify="left" if header in ("config", "metric") else "right")
    colors = {REGRESSION: "red", FAILED: "red", IMPROVED: "green"}
    for r in rows:
        verdict = f"[{colors[r.verdict]}]{r.verdict}[/]" if r.verdict in colors else r.verdict
        table.add_row(
            r.config,
            f"{r.metric} ({'higher' if r.goal == 'max' else 'lower'} is better)",
            _num(r.baseline) + (f" (n={r.baseline_n})" if r.baseline_n > 1 else ""),
            _num(r.candidate) + (f" (n={r.candidate_n})" if r.candidate_n > 1 else ""),
            _num(r.change_pct, sign=True),
            "-" if r.noise_pct is None else f"{r.noise_pct:.1f}",
            verdict + (f" ({r.note})" if r.note else ""),
        )
    Console(width=160).print(table)


def log_comparison(
    tracking_uri: str,
    experiment_id: str,
    baseline_run_id: str,
    candidate_run_id: str,
    rows: Sequence[Row],
    metrics: Sequence[str],
    threshold_pct: float,
) -> str:
    """The comparison as its own run (see the module docstring); returns its id."""
    from distbench.tracking.mlflow_store import client

    mlflow = client(tracking_uri)
    bad = regressed_configs(rows)
    verdict = "regression" if bad else "pass"
    run_id = _create_compare_run(mlflow, experiment_id, baseline_run_id, candidate_run_id, bad)
    heading = f"# distbench compare: candidate {candidate_run_id} vs baseline {baseline_run_id}"
    _log_tables(mlflow, run_id, rows, heading, threshold_pct)
    params = {
        "baseline_run_id": baseline_run_id,
        "candidate_run_id": candidate_run_id,
        "threshold_pct": f"{threshold_pct:g}",
        "metrics": ",".join(metrics),
    }
    values = comparison_counts(rows)
    _log_values(mlflow, run_id, params, values)
    note = f"**distbench compare**: {verdict}; {summary_line(rows, threshold_pct)}"
    retry(lambda: mlflow.set_tag(run_id, "mlflow.note.content", note))
    retry(lambda: mlflow.set_terminated(run_id, "FINISHED"))
    _tag_candidate(mlflow, candidate_run_id, run_id, values["num_regressions"])
    return run_id


def comparison_counts(rows: Sequence[Row]) -> dict[str, int]:
    """The comparison run's metrics: regressions, configurations regressed and compared."""
    return {
        "num_regressions": sum(r.regression for r in rows),
        "num_configs_regressed": len(regressed_configs(rows)),
        "num_configs_compared": len(compared_configs(rows)),
    }


def _create_compare_run(
    mlflow: Any, experiment_id: str, baseline_run_id: str, candidate_run_id: str, bad: list[str]
) -> str:
    """A RUNNING run `compare-<candidate>-vs-<baseline>` tagged with its kind and verdict."""
    run = retry(
        lambda: mlflow.create_run(
            experiment_id,
            run_name=f"compare-{candidate_run_id[:8]}-vs-{baseline_run_id[:8]}",
            tags={
                KIND_TAG: "compare",
                "distbench.compare.verdict": "regression" if bad else "pass",
                "distbench.compare.regressed": ", ".join(bad)[:5000],
            },
        )
    )
    return run.info.run_id


def _log_tables(
    mlflow: Any, run_id: str, rows: Sequence[Row], heading: str, threshold_pct: float
) -> None:
    """The table as artifacts compare/compare.md (with the summary line) and compare/compare.csv."""
    frame = to_frame(rows)
    with tempfile.TemporaryDirectory() as tmp:
        md = Path(tmp) / "compare.md"
        md.write_text(
            f"{heading}\n\n{summary_line(rows, threshold_pct)}\n\n{markdown_table(frame)}"
        )
        csv = Path(tmp) / "compare.csv"
        frame.to_csv(csv, index=False)
        for path in (md, csv):
            retry(lambda p=path: mlflow.log_artifact(run_id, str(p), COMPARE_ARTIFACT_DIR))


def _log_values(mlflow: Any, run_id: str, params: dict[str, str], values: dict[str, int]) -> None:
    from mlflow.entities import Metric, Param

    logged_ms = now_ms()
    retry(
        lambda: mlflow.log_batch(
            run_id,
            params=[Param(k, v) for k, v in params.items()],
            metrics=[Metric(k, float(v), logged_ms, 0) for k, v in values.items()],
        )
    )


def _tag_candidate(mlflow: Any, candidate_run_id: str, run_id: str, num_regressions: int) -> None:
    """The candidate sweep's parent names its comparison and its number of regressions."""
    retry(lambda: mlflow.set_tag(candidate_run_id, "distbench.compare_run_id", run_id))
    retry(
        lambda: mlflow.set_tag(candidate_run_id, "distbench.num_regressions", str(num_regressions))
    )
