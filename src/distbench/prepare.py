"""Prepare a resolved job on this machine, before launch: attach what is measured here and not
configured (job.py's resolve_job measures nothing).

`prepare_job(job)`:
1. `hardware.peak_source=measured`: the job's dtype's peak TFLOP/s from a timed GEMM on this
   device (probes/calibrate.py, cached per machine); the catalog figure stays beside it;
2. `hardware.link_source=measured`: the α-β fits of the collectives runs of this hardware in
   the job's own MLflow store (figures/links.py: the median per tier);
3. the workload's own `prepare` hook (WorkloadSpec.prepare; train: its time source, measured
   step parts and ZeRO-3's engine probe); a time source still `auto` after it is `efficiency`.

A run (the orchestrator's spine) prepares with `probe_when_auto=False`: under the default
`hardware.time_source=auto` it reads the parts `plan` measured and cached, and otherwise keeps
the efficiency model, so its ranks start without waiting on a probe; once they have exited,
`measured_after_run` measures (and caches) those parts (or, on a CPU, times the micro-batch again
beside the cached ones) and the run's predictions use them.
`time_source=measured` (or $DISTBENCH_TIME_SOURCE=measured) measures them before launch.

`probe=False` starts no probe and writes no cache: what is cached is used, the rest keeps the
catalog or the efficiency model and says why (runner.NOT_MEASURED_HERE): for commands that only
show or record a job (`distbench resolve`, run.py's precheck, plan's first pass). A probe that
fails never loses the job: its figure stays the catalog's, with the reason in the job's
`*_calibration_error` (resolved.yaml and the run's params carry it).

    python -c "from tests.conftest import compose_config, CONF_DIR; \\
from distbench.job import resolve_job; from distbench.prepare import prepare_job; \\
print(prepare_job(resolve_job(compose_config(), CONF_DIR), probe=False).measured)"
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from distbench.job import Job
from distbench.probes.calibrate import measured_peak_tflops
from distbench.probes.detect import device_name, num_cpu_cores
from distbench.probes.parts import Measurements
from distbench.probes.runner import (
    NOT_MEASURED_HERE,
    PROBE_ERRORS,
    NotMeasured,
    cache_only,
    no_auto_probes,
)


def prepare_job(job: Job, *, probe: bool = True, probe_when_auto: bool = True) -> Job:
    """The job with this machine's measured figures attached (see the module's docstring);
    `probe=False`: from the cache only, nothing started or written; `probe_when_auto=False`
    (a run): what only the default `auto` asks for is read from the cache, not measured."""
    scope = contextlib.ExitStack()
    if not probe:
        scope.enter_context(cache_only())
    if not probe_when_auto:
        scope.enter_context(no_auto_probes())
    with scope:
        job = with_measured_peak(job)
        job = with_measured_links(job)
        if job.spec.prepare is not None:
            job = job.spec.prepare(job)
    job = _settled(job)
    if job.device == "cpu" and job.measured.host_cores is None:  # what its ranks share
        job = job.with_measured(host_cores=num_cpu_cores())
    return job


def measured_after_run(job: Job) -> Job:
    """A run's job once its ranks have exited: what its workload's after-run hook measures now
    that nothing waits on a probe (WorkloadSpec.after_run; train: the parts the default `auto`
    left unmeasured so that its ranks did not wait, and on a CPU the micro-batch re-timed), for
    the job's predictions. The same object when nothing changed."""
    if job.spec.after_run is None:
        return job
    after = job.spec.after_run(job)
    return job if after is job else _settled(after)


def _settled(job: Job) -> Job:
    """A time source still `auto` after the workload's prepare hook is `efficiency`: nothing
    measures this workload's step."""
    if job.hardware.time_source == "auto":
        return job.with_hardware(time_source="efficiency")
    return job


def left_unmeasured(measured: Measurements) -> bool:
    """Whether a job prepared with probe=False lacks figures a probing prepare would measure
    (NOT_MEASURED_HERE is on its time or peak calibration error)."""
    errors = (measured.time_calibration_error, measured.peak_calibration_error)
    return any(NOT_MEASURED_HERE in (error or "") for error in errors)


def _catalog_peak(job: Job, why: str) -> Job:
    """Back on the catalog peak, saying why."""
    return job.with_hardware(peak_source="catalog").with_measured(peak_calibration_error=why)


def with_measured_peak(job: Job) -> Job:
    """`peak_source=measured`: the job's dtype's `peak_tflops_<dtype>` from a timed GEMM on this
    device (CPU: one thread, as one rank = one core); job.measured's
    `catalog_peak_tflops_<dtype>` keeps the catalog's. A failed (or, under probe=False,
    uncached) calibration keeps the catalog figure, sets `peak_source=catalog` and says why in
    `peak_calibration_error`."""
    hw, dtype = job.hardware, job.dtype
    catalog = getattr(job.measured, f"catalog_peak_tflops_{dtype}")
    if hw.peak_source != "measured" or catalog is not None:
        return job  # catalog figures, or measured already
    device = "cuda" if hw.device == "cuda" else "cpu"
    threads = 1 if device == "cpu" else 0
    try:
        measured = measured_peak_tflops(device, dtype, threads, device_name(device))
    except NotMeasured as exc:
        return _catalog_peak(job, str(exc))
    except PROBE_ERRORS as exc:
        print(
            f"distbench: peak calibration failed, using the catalog peak: {exc}",
            file=sys.stderr,
            flush=True,
        )
        why = f"{type(exc).__name__}: {exc}"[:500]
        return _catalog_peak(job, why)
    return job.with_measured(
        **{f"catalog_peak_tflops_{dtype}": getattr(hw, f"peak_tflops_{dtype}")}
    ).with_hardware(**{f"peak_tflops_{dtype}": measured})


# (tracking URI, experiment, hardware) -> (monotonic time read, fits): a sweep or a plan
# --search prepares many jobs in one process; the store is read again after this long.
_LINK_FITS_CACHE: dict[tuple[str, str, str], tuple[float, dict]] = {}
LINK_FITS_CACHE_S = 60.0
EMPTY_LINK_FITS_CACHE_S = 5.0  # long enough for a plan --search, short for a sweep
_LINK_WARNED: set[str] = set()


def with_measured_links(job: Job) -> Job:
    """`link_source=measured`: the store's α-β fits into job.measured's
    measured_interconnect_gbps (the
    intra-node bus bandwidth), measured_internode_gbytes_per_s (the inter-node one) and
    link_latency_us (the intra-node α); predictions prefer them to the catalog figures, which
    stay. Without a store or any fit: `link_source=catalog`, the reason in
    `link_calibration_error`, said once per process on stderr."""
    if job.hardware.link_source != "measured":
        return job
    fields, why = _link_fit_fields(job)
    if why is None:
        return job.with_measured(**fields)
    if why not in _LINK_WARNED:  # a plan prepares every strategy: say it once
        _LINK_WARNED.add(why)
        print(
            f"distbench: hardware.link_source=measured: {why}; using the catalog links",
            file=sys.stderr,  # plan --json and resolve --json keep stdout one document
        )
    return job.with_hardware(link_source="catalog").with_measured(link_calibration_error=why[:500])


def _link_fit_fields(job: Job) -> tuple[dict[str, Any], str | None]:
    """(the Measurements fields of the store's fits, None), or ({}, why there are none)."""
    from distbench.figures.links import link_fit_fields
    from distbench.tracking.pred_history import load_link_fits, store_exists
    from distbench.tracking.sweep import resolve_tracking_uri

    uri = resolve_tracking_uri(job.tracking, Path.cwd())
    experiment, name = job.tracking.experiment_name, job.hardware.name
    if uri is None:
        return {}, "tracking=none: no store to read collectives runs from"
    if not store_exists(uri):
        return {}, "no MLflow store yet (run workload=collectives first)"
    key = (uri, experiment, name)
    cached = _LINK_FITS_CACHE.get(key)
    # none yet is kept briefly: a collectives job of the same sweep may log one next
    max_age_s = LINK_FITS_CACHE_S if cached and cached[1] else EMPTY_LINK_FITS_CACHE_S
    if cached and time.monotonic() - cached[0] < max_age_s:
        fits = cached[1]
    else:
        try:
            fits = load_link_fits(uri, experiment, name)
        except Exception as exc:  # a job is never lost to its calibration
            return {}, f"the store could not be read ({type(exc).__name__})"
        _LINK_FITS_CACHE[key] = (time.monotonic(), fits)
    if not fits:
        return {}, (
            f"no finished workload=collectives run of hardware={name} in experiment "
            f"{experiment} (run: python run.py workload=collectives hardware={name})"
        )
    return link_fit_fields(fits), None
