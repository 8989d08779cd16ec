"""repeats=N: one configuration run N times inside its Hydra job, so that run-to-run noise is
measured instead of guessed. Each repeat is its own child run, tagged `repeat` (1..N) and named
`dp-ws2 repeat=2`, with the configuration's signature (`repeats` is not part of it): `compare`
and `report` take the repeats as samples. Repeats 1..N-1 run in `<job dir>/repeat-<i>/`, the
last in the job dir itself, so its outcome.json is the job's; the last repeat's run also carries
the spread across the repeats that finished, for each headline metric:

    <metric>_repeat_spread_pct = 100 · (max − min) / median          (num_repeats_finished ≥ 2)

With resume=true (orchestrator/resume.py) only the repeats that have not run are run, with the
same numbers; the last of them runs in the job dir and its spread counts the earlier runs too.

    python run.py -m strategy=dp,zero3 world_size=2 repeats=3
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distbench.compose.schema import ConfigError

REPEAT_TAG = "repeat"  # public: users group a configuration's runs by it
SPREAD_SUFFIX = "_repeat_spread_pct"
NUM_FINISHED_METRIC = "num_repeats_finished"
REPEAT_DIR_PREFIX = "repeat-"


def check_repeats(value: Any) -> int:
    """`repeats` as the number of runs of each configuration; ConfigError (one line) unless it
    is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"repeats={value!r} must be an integer >= 1 (runs of each configuration)")
    return value


def repeats_of(cfg: Any) -> tuple[int, str | None]:
    """(the composed config's repeats, None) or (1, why it cannot be used)."""
    try:
        return check_repeats(cfg.get("repeats", 1)), None
    except ConfigError as exc:
        return 1, str(exc)


def repeat_dir(job_dir: Path, repeat: int, last: int) -> Path:
    """Where repeat `repeat` (1-based) runs when `last` is the last one this job runs (N in a
    fresh sweep): the last one in the job dir, each other in `repeat-<i>/`."""
    return job_dir if repeat == last else job_dir / f"{REPEAT_DIR_PREFIX}{repeat}"


def missing_repeats(repeats: int, ran: Iterable[int] = ()) -> list[int]:
    """The repeats of 1..N still to run, in order, given those that ran (resume=true)."""
    done = set(ran)
    return [repeat for repeat in range(1, repeats + 1) if repeat not in done]


def spread_pct(values: Sequence[float]) -> float | None:
    """100 · (max − min) / median of the repeats' values, in %; None for fewer than two or a
    zero median."""
    if len(values) < 2:
        return None
    center = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / abs(center) if center else None


def spread_metrics(per_repeat: Iterable[Mapping[str, float]], names: Iterable[str]) -> dict:
    """The metrics of the last repeat that say how its repeats agree: num_repeats_finished,
    and `<name>_repeat_spread_pct` for each of `names` that two or more repeats measured."""
    finished = list(per_repeat)
    out: dict[str, float] = {NUM_FINISHED_METRIC: float(len(finished))}
    for name in names:
        spread = spread_pct([m[name] for m in finished if name in m])
        if spread is not None:
            out[f"{name}{SPREAD_SUFFIX}"] = spread
    return out


def spread_line(label: str, per_repeat: Sequence[Mapping[str, float]], name: str) -> str | None:
    """One printed line: `job 1/2: 3 repeats finished, step_time_s_p50 0.301–0.314 (spread
    4.2 %)`; None when fewer than two repeats measured `name`."""
    values = [m[name] for m in per_repeat if name in m]
    spread = spread_pct(values)
    if spread is None:
        return None
    return (
        f"distbench: {label}: {len(per_repeat)} repeats finished, {name} "
        f"{min(values):.4g}–{max(values):.4g} (spread {spread:.1f} %)"
    )
