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
    cannot judge  a regression or improvement of a timed metric (any but memory) from one run a
                side: one run measures no run-to-run noise, so the change must also exceed
                SINGLE_RUN_NOISE_PCT (`--single-run-noise-pct`), the worst this project saw
                between identical single runs; from a run tagged `oversubscribed` (its host had
                more work than cores), no change is judged. repeats=N gives samples instead.

A configuration that finished in the baseline and only failed in the candidate is a regression
too (`failed in candidate`); one present in a single sweep is listed, not judged. Only a
regression exits 1: `cannot judge` exits 0 and says how to get samples.

The comparison is logged as its own MLflow run in the candidate's experiment, and the
candidate's parent run names it (tools/compare_log.py).

    distbench compare --baseline <parent run id> --candidate latest      # exit 1 on a regression
    distbench compare --baseline previous     # the newest sweep against the one just before it
    distbench compare --baseline multirun/2026-11-22/10-00-00 --candidate sweep-02-00-00
    distbench compare --baseline ID --candidate ID --threshold-pct 10 --metrics step_time_s_p50
    distbench compare --baseline ID --single-run-noise-pct 10   # a quiet GPU host: judge one run
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from distbench.figures.fair import (
    layout_of,
    layout_of_params,
    tokens_of_params,
    tokens_per_step_of,
    tokens_text,
)
from distbench.figures.metrics import step_spread_pct
from distbench.tracking.signature import SIGNATURE_TAG
from distbench.workloads import counts_batch_tokens, metric_catalog

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
CANNOT_JUDGE = "cannot judge"
# The worst change of a timed figure between two single runs of one configuration that the host
# alone produced in this project: single pairs of identical steps ran 0.72x-1.37x apart on a
# 2-core host at load 1-2 (benchmarks/README.md, harness overhead), and two identical sweeps at
# load 6-7 differed by -55.7 % (a host that busy is tagged oversubscribed and never judged from
# one run). Below this, one run a side cannot tell a regression from the host's noise.
SINGLE_RUN_NOISE_PCT = 40.0
# Units of the metrics a busy host does not move (memory): judged from one run too.
UNTIMED_UNITS = frozenset({"GiB"})
OVERSUBSCRIBED_TAG = "oversubscribed"  # orchestrator/host_watch.py's
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
    oversubscribed: bool = False  # its host had more work than cores (tag oversubscribed)
    layout: str = ""  # `2×1×1 1,024 tok`: dp×tp×pp and tokens per step (figures/fair.py)


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
    layout: str = ""  # the configuration's dp×tp×pp and tokens per step (RunSample.layout)

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


def timed(metric: str) -> bool:
    """Whether a busy host moves `metric`: everything but memory (UNTIMED_UNITS)."""
    spec = metric_catalog().get(metric)
    return spec is None or spec.unit not in UNTIMED_UNITS


def single_run_bound(
    metric: str,
    baseline: Sequence[RunSample],
    candidate: Sequence[RunSample],
    single_run_noise_pct: float,
) -> float | None:
    """The change `metric` must exceed to be judged when each side has one run (None: judged
    as usual): SINGLE_RUN_NOISE_PCT for a timed metric, any change (inf) when a run was
    oversubscribed."""
    if len(baseline) > 1 or len(candidate) > 1 or not timed(metric):
        return None
    if any(r.oversubscribed for r in (*baseline, *candidate)):
        return math.inf
    return single_run_noise_pct


def cannot_judge_note(bound: float) -> str:
    """Why a change was not judged, and what to do about it."""
    why = "an oversubscribed run" if math.isinf(bound) else f"|change| <= {bound:g} %"
    return f"1 run a side, {why}: rerun both with repeats=3"


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


def check_threshold(threshold_pct: float, flag: str = "--threshold-pct") -> float:
    if not threshold_pct >= 0:  # also NaN
        raise ValueError(f"{flag} {threshold_pct} must be a percentage >= 0")
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
    single_run_noise_pct: float = SINGLE_RUN_NOISE_PCT,
) -> list[Row]:
    """The rows of one configuration: one per metric, FINISHED runs only."""
    done = [[r for r in runs if r.status == "FINISHED"] for runs in (baseline, candidate)]
    machines = _machines_note(*done)
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
        note = machines
        verdict = _unjudged(baseline, candidate, done, b, c)
        if verdict is None:
            change = 100.0 * (c - b) / abs(b)
            noise = noise_pct(metric, *done)
            worse = worse_pct(change, goal)
            verdict = judge(worse, noise, threshold_pct)
            bound = single_run_bound(metric, *done, single_run_noise_pct)
            if verdict in (REGRESSION, IMPROVED) and bound is not None and abs(worse) <= bound:
                verdict = CANNOT_JUDGE
                note = "; ".join(n for n in (machines, cannot_judge_note(bound)) if n)
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


def _unjudged(
    baseline: Sequence[RunSample],
    candidate: Sequence[RunSample],
    done: list[list[RunSample]],
    b: float | None,
    c: float | None,
) -> str | None:
    """The verdict of a configuration × metric that has no change to judge, else None."""
    if not baseline:
        return "only in candidate"
    if not candidate:
        return "only in baseline"
    if done[0] and not done[1]:
        return FAILED
    if not done[0]:
        return "failed in baseline" if done[1] else "failed in both"
    if b is None or c is None or b == 0:
        return "no data"
    return None


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
    single_run_noise_pct: float = SINGLE_RUN_NOISE_PCT,
) -> list[Row]:
    """Every configuration of either sweep × every metric, sorted by configuration name."""
    labels = _labels([*baseline, *candidate])
    rows: list[Row] = []
    for signature in sorted(labels, key=lambda s: (labels[s], s)):
        base = [r for r in baseline if r.signature == signature]
        cand = [r for r in candidate if r.signature == signature]
        judged = compare_config(
            labels[signature], signature, base, cand, metrics, threshold_pct, single_run_noise_pct
        )
        layout = next((r.layout for r in [*base, *cand] if r.layout), "")
        rows += [dataclasses.replace(row, layout=layout) for row in judged]
    return rows


def unjudged_configs(rows: Iterable[Row]) -> list[str]:
    """Configurations with a metric that one run a side could not judge."""
    return sorted({r.config for r in rows if r.verdict == CANNOT_JUDGE})


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
    unjudged = unjudged_configs(rows)
    cannot = (
        f"; cannot judge {len(unjudged)} from one run a side ({', '.join(unjudged)}): rerun "
        "both sweeps with repeats=3"
        if unjudged
        else ""
    )
    if not bad:
        return (
            f"distbench: compare: no regression in {len(compared)} configuration(s) "
            f"(threshold {threshold_pct:g} %, beyond noise){cannot}"
        )
    return (
        f"distbench: compare: REGRESSION in {len(bad)} of {len(compared)} configuration(s): "
        f"{', '.join(bad)} (threshold {threshold_pct:g} %, beyond noise){cannot}"
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
                oversubscribed=tags.get(OVERSUBSCRIBED_TAG) == "true",
                layout=layout_text(run),
            )
        )
    return samples


def layout_text(run: Any) -> str:
    """A run's `dp×tp×pp tokens/step` (`2×1×1 1,024 tok`) from its params and metrics."""
    params, metrics = getattr(run.data, "params", None) or {}, run.data.metrics
    layout = layout_of({"layout": layout_of_params(params), **run.data.tags})
    tokens = tokens_per_step_of(metrics) or tokens_of_params(
        params, counts_batch_tokens(params.get("workload.name"))
    )
    return f"{layout or '-'} {tokens_text(tokens)} tok" if layout or tokens else ""


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
    headers = ("config", "dp×tp×pp tok/step", "metric", "baseline", "candidate", "change %")
    for header in (*headers, "noise %", "verdict"):
        table.add_column(header, justify="left" if header in ("config", "metric") else "right")
    colors = {REGRESSION: "red", FAILED: "red", IMPROVED: "green", CANNOT_JUDGE: "yellow"}
    for r in rows:
        verdict = f"[{colors[r.verdict]}]{r.verdict}[/]" if r.verdict in colors else r.verdict
        table.add_row(
            r.config,
            r.layout or "-",
            f"{r.metric} ({'higher' if r.goal == 'max' else 'lower'} is better)",
            _num(r.baseline) + (f" (n={r.baseline_n})" if r.baseline_n > 1 else ""),
            _num(r.candidate) + (f" (n={r.candidate_n})" if r.candidate_n > 1 else ""),
            _num(r.change_pct, sign=True),
            "-" if r.noise_pct is None else f"{r.noise_pct:.1f}",
            verdict + (f" ({r.note})" if r.note else ""),
        )
    Console(width=160).print(table)
