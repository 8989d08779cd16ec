"""How a probe runs: as `python -m distbench.<...>` in a subprocess (the caller never imports
torch), whose last stdout line is one JSON document; and the two ways it does not run.

- `cache_only()`: within it no probe starts (`distbench resolve`, run.py's precheck, plan's
  first pass over a layout): run_probe raises NotMeasured and the caller keeps what it has.
- `once(failures, key, call)`: a probe that failed for a key is not retried (nor reported) for
  that key in this process (a plan --search resolves hundreds of layouts of one shape).

    python -c "from distbench.probes.runner import run_probe; \
print(run_probe(['-m', 'distbench.probes.calibrate', '--device-name', 'try', '--size', '256']))"
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from distbench.launch.lifeline import die_with_parent

# What a probe subprocess or its cache can raise: the job then goes on without its figures.
PROBE_ERRORS = (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError, TypeError)

# Why a job prepared without probes (`distbench resolve`, run.py's precheck, a failure recorded
# after the fact, a layout of plan --search that does not fit) lacks measured figures.
NOT_MEASURED_HERE = (
    "not measured where this job was resolved: no cached figures (distbench resolve, run.py's "
    "precheck and failure records measure nothing; run.py and plan do)"
)

# Why a run's `hardware.time_source=auto` used the efficiency model: it times nothing of its
# own; the parts come from the cache that `plan` (or a run asking for `measured`) fills.
NOT_ASKED_TO_MEASURE = (
    "time_source=auto in a run reads cached parts only and none are cached for this shape: "
    "`distbench plan` with the same overrides, or hardware.time_source=measured, measures them"
)

_CACHE_ONLY: ContextVar[bool] = ContextVar("distbench_probes_cache_only", default=False)
_AUTO_PROBES: ContextVar[bool] = ContextVar("distbench_probes_auto", default=True)


class NotMeasured(Exception):
    """Nothing cached, and cache_only() forbids measuring it now."""

    def __init__(self) -> None:
        super().__init__(NOT_MEASURED_HERE)


class ProbeFailed(Exception):
    """A probe failed for a key: now (`repeated` False: say so) or earlier in this process."""

    def __init__(self, why: str, repeated: bool) -> None:
        super().__init__(why)
        self.repeated = repeated


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Within: no probe starts; what is not cached raises NotMeasured."""
    token = _CACHE_ONLY.set(True)
    try:
        yield
    finally:
        _CACHE_ONLY.reset(token)


@contextlib.contextmanager
def no_auto_probes() -> Iterator[None]:
    """Within: a figure that only the default (`auto`) asks for is read from the cache, never
    measured; one the config names (time_source=measured, peak_source=measured) still is."""
    token = _AUTO_PROBES.set(False)
    try:
        yield
    finally:
        _AUTO_PROBES.reset(token)


def auto_probes_allowed() -> bool:
    return _AUTO_PROBES.get()


def probing_allowed() -> bool:
    return not _CACHE_ONLY.get()


def run_probe(
    args: list[str], env: dict[str, str] | None = None, timeout_s: float = 600.0
) -> dict[str, Any]:
    """`python <args>` (args start with `-m distbench.<module>`): its last stdout line, one
    JSON document. The probe dies with this process, even SIGKILLed (the ranks' parent-death
    signal, launch/lifeline.py). A non-zero exit raises SubprocessError naming the probe and its
    last stderr line; under cache_only() nothing starts (NotMeasured)."""
    if not probing_allowed():
        raise NotMeasured()
    cmd = [sys.executable, *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        preexec_fn=die_with_parent(),  # a SIGKILLed orchestrator takes its probe with it
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        probe = args[1].rsplit(".", 1)[-1]
        raise subprocess.SubprocessError(f"{probe} exited {proc.returncode}: {last}")
    document = json.loads(proc.stdout.strip().splitlines()[-1])
    if not isinstance(document, dict):
        raise ValueError(f"{args[1]} printed {type(document).__name__}, not a JSON object")
    return document


def once(failures: dict[str, str], key: str, call: Callable[[], Any]) -> Any:
    """call(), unless it failed before for `key` (ProbeFailed, repeated); a failure now is kept
    in `failures` as "<Error>: <message>" and raised as ProbeFailed. NotMeasured passes."""
    if key in failures:
        raise ProbeFailed(failures[key], repeated=True)
    try:
        return call()
    except PROBE_ERRORS as exc:
        failures[key] = f"{type(exc).__name__}: {exc}"[:500]
        raise ProbeFailed(failures[key], repeated=False) from exc
