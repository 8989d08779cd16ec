"""Train's prepare hook (WorkloadSpec.prepare): before launch, and in `plan`, what a training
job measures on this machine to predict its step, attached to the job (`job.measured`, its
resolved source in `hardware.time_source`):

1. the time source: `hardware.time_source=auto` (the default) is what $DISTBENCH_TIME_SOURCE
   names, else `measured` when the job's hardware is this machine's device (its parts can be
   timed here) and `efficiency` otherwise (a plan for an H100 cluster made on a laptop);
2. under `measured`, the micro-batch's parts (probes/step_parts.py), with the CPU threads the
   launcher will give each rank;
3. for DeepSpeed ZeRO-3 on a GPU, the engine's host work (engine_probe.py).

Once a run's ranks have exited, `after_run` (WorkloadSpec.after_run) measures the parts a run
under `auto` left unmeasured, or, on a CPU, runs the micro-batch whole again and scales the
cached parts to the host's speed now (`with_direct_after_run`).

Each is read from the probes' cache, else measured in a subprocess. A probe that fails, or that
distbench/prepare.py's `probe=False` forbids (runner.cache_only), never loses the job: it keeps
the efficiency model (or the step parts) and says why in `time_calibration_error`.

    python -c "from tests.conftest import compose_config, CONF_DIR; \\
from distbench.job import resolve_job; from distbench.workloads.train.prepare import prepare; \\
print(prepare(resolve_job(compose_config(['hardware=cpu']), CONF_DIR)).measured)"
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from distbench.compose.hardware import is_this_machine
from distbench.compose.schema import TIME_SOURCES, ConfigError
from distbench.job import Job
from distbench.probes import runner, step_parts
from distbench.probes.detect import device_name, num_cpu_cores
from distbench.probes.parts import CPU_DIRECT_SCALED_FIELDS, STEP_PARTS_FIELDS
from distbench.probes.runner import NotMeasured, ProbeFailed
from distbench.probes.step_parts import measured_step_parts
from distbench.probes.threads import rank_threads, ranks_sharing_machine

# Names what `hardware.time_source=auto` means on this machine (efficiency or measured).
TIME_SOURCE_ENV = "DISTBENCH_TIME_SOURCE"


def env_time_source() -> str | None:
    """What $DISTBENCH_TIME_SOURCE names (None: unset); ConfigError for a value outside
    TIME_SOURCES (train's check raises it before anything runs)."""
    source = os.environ.get(TIME_SOURCE_ENV)
    if source and source not in TIME_SOURCES:
        raise ConfigError(
            f"${TIME_SOURCE_ENV}={source!r} is not allowed; choose one of {list(TIME_SOURCES)}"
        )
    return source or None


def resolve_time_source(
    time_source: str | None, device: str, name: str, local_gpu_names: list[str] | None = None
) -> str:
    """What the job's `hardware.time_source` means here: `efficiency` and `measured` stand as
    given; `auto` is $DISTBENCH_TIME_SOURCE's, else `measured` for hardware that is this
    machine's device (is_this_machine) and `efficiency` otherwise."""
    source = time_source or "auto"
    if source == "auto":
        source = env_time_source() or "auto"
    if source != "auto":
        return source
    return "measured" if is_this_machine(device, name, local_gpu_names) else "efficiency"


def prepare(job: Job) -> Job:
    """The job with its time source resolved and, under `measured`, its measured parts. When
    only `auto` chose `measured` and the caller forbids auto probes (a run), the parts come from
    the cache, else the efficiency model with the reason (runner.NOT_ASKED_TO_MEASURE)."""
    hw = job.hardware
    source = resolve_time_source(hw.time_source, hw.device, hw.name)
    job = job.with_hardware(time_source=source)
    if source != "measured":
        return job
    asked = (hw.time_source or "auto") != "auto" or env_time_source() is not None
    if asked or runner.auto_probes_allowed():
        return with_engine_parts(with_step_parts(job))
    with runner.cache_only():
        prepared = with_engine_parts(with_step_parts(job))
    why = prepared.measured.time_calibration_error or ""
    if runner.NOT_MEASURED_HERE in why:
        why = why.replace(runner.NOT_MEASURED_HERE, runner.NOT_ASKED_TO_MEASURE)
        prepared = prepared.with_measured(time_calibration_error=why)
    return prepared


def after_run(job: Job) -> Job:
    """Train's after-run hook: a job that `auto` left on the efficiency model
    (runner.NOT_ASKED_TO_MEASURE) prepared again, its parts measured (and cached) now; else a
    CPU job on cached parts re-timed (with_direct_after_run). The same object otherwise."""
    if runner.NOT_ASKED_TO_MEASURE in (job.measured.time_calibration_error or ""):
        again = job.with_hardware(time_source="auto").with_measured(time_calibration_error=None)
        return prepare(again)
    return with_direct_after_run(job)


def with_direct_after_run(job: Job, timeout_s: float = 300.0) -> Job:
    """A CPU job predicted from cached parts that ran their micro-batch whole (also parts
    measured just before launch under `time_source=measured`): that micro-batch run again now
    (step_parts.direct_after_run, the rank's threads), and the parts scaled by its time now
    over its time then (`cpu_direct_after_run_over_cached`): the host the ranks just met, not
    the one the parts met minutes or days ago (a shared VM's speed moves by a third within
    minutes). A failed re-timing keeps the parts and says so; a cache entry gone or measured
    again since the job read it, and anything else, is returned as it is."""
    measured = job.measured
    if (
        job.device != "cpu"
        or job.hardware.time_source != "measured"
        or measured.cpu_direct_over_parts is None
        or measured.cpu_direct_after_run_over_cached is not None
    ):
        return job
    _, name, threads = _where(job)
    shape = (job.batch.micro_batch_size, job.batch.seq_len)
    try:
        rerun = step_parts.direct_after_run(
            job.model, job.dtype, *shape, device_name=name, threads=threads, timeout_s=timeout_s
        )
    except runner.PROBE_ERRORS as exc:
        print(f"distbench: the micro-batch's re-timing failed, the cached parts stand: {exc}")
        return job
    if rerun is None:
        return job
    now_s, entry = rerun
    if any(getattr(measured, field) != entry[field] for field in STEP_PARTS_FIELDS):
        return job  # measured again since the job read them: not the time they were priced at
    ratio = now_s / entry["micro_batch_direct_s"]
    scaled = {field: getattr(measured, field) * ratio for field in CPU_DIRECT_SCALED_FIELDS}
    print(
        f"distbench: the micro-batch run whole after the ranks: {now_s:.3g} s, against "
        f"{entry['micro_batch_direct_s']:.3g} s when its parts were timed "
        f"({entry.get('measured_at', '?')}): the parts x {ratio:.3f}",
        flush=True,
    )
    return job.with_measured(**scaled, cpu_direct_after_run_over_cached=ratio)


def _where(job: Job) -> tuple[str, str, int]:
    """(device, the name its figures are cached under, a rank's CPU threads: 1 on a GPU)."""
    device = "cuda" if job.device == "cuda" else "cpu"
    sharing = ranks_sharing_machine(
        job.topology.rank_launcher, job.world_size, job.topology.ranks_per_node
    )
    threads = rank_threads(num_cpu_cores(), sharing) if device == "cpu" else 1
    return device, device_name(device), threads


def _say_once(failure: ProbeFailed, what: str) -> None:
    if not failure.repeated:  # a plan --search prepares hundreds of layouts of one shape
        print(f"distbench: {what}: {failure}", file=sys.stderr, flush=True)


def with_step_parts(job: Job, timeout_s: float = 600.0) -> Job:
    """The job with its micro-batch's measured parts (time_source=measured), or back on the
    efficiency model with the reason (time_source=efficiency, time_calibration_error)."""
    device, name, threads = _where(job)
    shape = (job.batch.micro_batch_size, job.batch.seq_len)
    try:
        parts = measured_step_parts(
            job.model,
            job.dtype,
            *shape,
            device=device,
            device_name=name,
            threads=threads,
            timeout_s=timeout_s,
        )
    except (NotMeasured, ProbeFailed) as exc:
        if isinstance(exc, ProbeFailed):
            _say_once(exc, "step-time calibration failed, using the efficiency model")
        return job.with_hardware(time_source="efficiency").with_measured(
            time_calibration_error=str(exc)
        )
    return job.with_hardware(time_source="measured").with_measured(**parts.measured_fields())


# cache key -> why its engine probe failed (runner.once): not retried for each layout
_ENGINE_FAILED: dict[str, str] = {}


def with_engine_parts(job: Job, timeout_s: float = 600.0) -> Job:
    """The job with its engine's host work (micro_batch_engine_host_s, engine_step_s) when
    engine_probe.applies and its step parts were measured. A failed probe keeps the step parts,
    leaves the fields None and says why in `time_calibration_error`: the job goes on."""
    # imported here: `python -m distbench.workloads.train.engine_probe` imports this package
    from distbench.workloads.train import engine_probe

    if job.hardware.time_source != "measured" or not engine_probe.applies(job):
        return job
    device, name, threads = _where(job)
    key = engine_probe.cache_key(job, name, threads)
    try:
        figures = engine_probe.cached_probe(job, name, threads) or runner.once(
            _ENGINE_FAILED, key, lambda: _probed_engine(job, device, name, threads, timeout_s)
        )
    except (NotMeasured, ProbeFailed) as exc:
        if isinstance(exc, ProbeFailed):
            _say_once(exc, "the engine probe failed, ZeRO-3's host work is not predicted")
        return job.with_measured(time_calibration_error=f"engine probe: {exc}")
    return job.with_measured(**engine_probe.engine_parts(figures, job.model.num_layers))


def _probed_engine(
    job: Job, device: str, name: str, threads: int, timeout_s: float
) -> dict[str, Any]:
    """engine_probe's figures from a subprocess (the caller never imports torch), given the
    job as its resolved.yaml."""
    from distbench.workloads.train import engine_probe

    with tempfile.TemporaryDirectory(prefix="distbench-engine-probe-") as folder:
        job_yaml = Path(folder) / "job.yaml"
        job_yaml.write_text(job.to_yaml())
        args = ["-m", engine_probe.MODULE, "--job-yaml", str(job_yaml)]
        args += ["--device-name", name, "--threads", str(threads)]
        env = dict(os.environ, DS_ACCELERATOR=device)
        if device == "cpu":
            env["OMP_NUM_THREADS"] = str(threads)
        figures = runner.run_probe(args, env, timeout_s)
    if not engine_probe.is_probe(figures):
        raise ValueError(f"engine_probe printed no probe: {sorted(figures)}")
    return figures
