"""A CPU run predicted from cached step parts runs its micro-batch whole again once its ranks
have exited, and its parts are scaled to the host's speed now (workloads/train/prepare.py
`with_direct_after_run`): a shared VM's speed moves by a third within minutes, and parts timed
before a sweep priced its later jobs at a host that was gone.

    python -m pytest tests/unit/test_direct_after_run.py -q
"""

from __future__ import annotations

import json
import subprocess

import pytest

from distbench.figures.predict import predict
from distbench.job import resolve_job
from distbench.prepare import measured_after_run, prepare_job
from distbench.probes import detect, runner, step_parts
from distbench.probes.parts import CPU_DIRECT_SCALED_FIELDS, STEP_PARTS_FIELDS
from distbench.probes.threads import rank_threads
from distbench.tracking.signature import run_signature
from distbench.workloads.train.prepare import with_direct_after_run
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

# what the cache holds for the default job's shape (tiny, 2 x 128, 2 ranks): parts of 0.125 s
# each, beside a whole micro-batch at 2 layers that took CACHED_DIRECT_S when they were timed
CACHED_DIRECT_S = 50.0
PARTS = {field: 0.125 for field in STEP_PARTS_FIELDS}
WHOLE = {
    "direct_probe_layers": 2,
    "micro_batch_direct_s": CACHED_DIRECT_S,
    "cpu_direct_over_parts": 1.25,
    "measured_at": "2026-11-27T22:36:00",
}


def _cached_job(monkeypatch, tmp_path, entry: dict, overrides: tuple[str, ...] = ()):
    """The default job (tiny, dp, 2 ranks on this CPU) as a run prepares it under
    `time_source=measured`, its parts read from a cache in tmp_path holding `entry`."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    cfg = compose_config(["hardware=cpu", "hardware.time_source=measured", *overrides])
    model = resolve_job(compose_config(["hardware.time_source=efficiency"]), CONF_DIR).model
    threads = rank_threads(detect.num_cpu_cores(), 2)
    key = step_parts.cache_key(
        detect.device_name("cpu"), "fp32", model, cfg.batch.micro_batch_size, 128, threads
    )
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({key: entry}))
    job = prepare_job(resolve_job(cfg, CONF_DIR), probe_when_auto=False)
    assert job.hardware.time_source == "measured" and job.measured.micro_batch_gemm_s == 0.125
    return job


def test_cached_parts_are_scaled_to_the_micro_batch_run_again_after_the_ranks(
    monkeypatch, tmp_path, capsys
):
    """A real re-timing (the tiny model cut to the cached 2 layers, in a subprocess): the
    parts scale by its time now over the cached one, the prediction follows, the run's
    signature does not."""
    job = _cached_job(monkeypatch, tmp_path, {**PARTS, **WHOLE})
    after = measured_after_run(job)
    ratio = after.measured.cpu_direct_after_run_over_cached
    # a 2 x 128 micro-batch of a 2-layer tiny Llama: milliseconds, against the cached 50 s
    assert 0 < ratio < 0.1
    for field in CPU_DIRECT_SCALED_FIELDS:
        assert getattr(after.measured, field) == pytest.approx(0.125 * ratio)
    assert after.measured.cpu_direct_over_parts == 1.25  # the cached factor, kept
    assert after.hardware.time_source == "measured"
    assert predict(after).step_time_s < predict(job).step_time_s
    assert run_signature(after.tree()) == run_signature(job.tree())
    said = capsys.readouterr().out
    assert f"against {CACHED_DIRECT_S:.3g} s when its parts were timed" in said
    assert "(2026-11-27T22:36:00)" in said
    # a job re-timed once is not re-timed again
    assert measured_after_run(after) is after


def test_only_a_cpu_job_on_cached_parts_that_ran_whole_is_re_timed(monkeypatch, tmp_path):
    """No whole micro-batch in the entry (a GPU's parts, or one skipped for memory), a job on
    the efficiency model, a GPU job: returned as they are, nothing started."""

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(runner.subprocess, "run", no_subprocess)
    skipped = {**PARTS, "cpu_direct_skipped": "needs 9.0 of 8.0 GiB free"}
    job = _cached_job(monkeypatch, tmp_path, skipped)
    assert measured_after_run(job) is job
    efficiency = prepare_job(
        resolve_job(compose_config(["hardware.time_source=efficiency"]), CONF_DIR)
    )
    assert measured_after_run(efficiency) is efficiency
    on_gpu = job.with_hardware(device="cuda")
    assert with_direct_after_run(on_gpu) is on_gpu


def test_a_failed_re_timing_keeps_the_cached_parts(monkeypatch, tmp_path, capsys):
    job = _cached_job(monkeypatch, tmp_path, {**PARTS, **WHOLE})

    def crashed(cmd, **kwargs):  # the re-timing process dies (OOM-killed, say)
        return subprocess.CompletedProcess(cmd, -9, stdout="", stderr="Killed\n")

    monkeypatch.setattr(runner.subprocess, "run", crashed)
    assert measured_after_run(job) is job
    assert "the micro-batch's re-timing failed, the cached parts stand" in capsys.readouterr().out


def test_the_re_timing_runs_on_the_ranks_threads_at_the_cached_depth(monkeypatch, tmp_path):
    """The cached micro-batch ran on a rank's threads (time_step_parts): so does the re-timing,
    or a 4-thread rank's parts would be scaled by a 1-thread run."""
    job = _cached_job(monkeypatch, tmp_path, {**PARTS, **WHOLE})
    started: list[tuple[list[str], dict]] = []

    def probe(args, env, timeout_s):
        started.append((args, env))
        return {"micro_batch_direct_s": 2 * CACHED_DIRECT_S}

    monkeypatch.setattr(runner, "run_probe", probe)
    after = measured_after_run(job)
    assert after.measured.cpu_direct_after_run_over_cached == 2.0
    assert after.measured.micro_batch_attention_s == 0.25
    ((args, env),) = started
    threads = str(rank_threads(detect.num_cpu_cores(), 2))
    assert args[args.index("--threads") + 1] == threads and env["OMP_NUM_THREADS"] == threads
    assert args[args.index("--direct-layers") + 1] == "2"


def test_parts_gone_or_measured_again_since_launch_are_left_as_the_job_read_them(
    monkeypatch, tmp_path
):
    """The cache emptied after launch (nothing to re-time beside), or its entry measured again
    with other parts (the job was not priced at its whole micro-batch): nothing is scaled."""
    job = _cached_job(monkeypatch, tmp_path, {**PARTS, **WHOLE})
    monkeypatch.setattr(runner, "run_probe", lambda *a: {"micro_batch_direct_s": 1.0})
    cache_file = tmp_path / step_parts.CACHE_FILE
    entry = json.loads(cache_file.read_text())
    (key,) = entry
    cache_file.write_text(json.dumps({key: {**PARTS, **WHOLE, "micro_batch_gemm_s": 0.5}}))
    assert measured_after_run(job) is job
    cache_file.unlink()
    assert measured_after_run(job) is job
