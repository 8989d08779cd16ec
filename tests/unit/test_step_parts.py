"""A micro-batch's time from measured parts (hardware.time_source=measured): the meta trace
counts what the real model launches, the parts combine as on the device, and a failed
calibration never loses the job.

    python -m pytest tests/unit/test_step_parts.py -q
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from distbench.figures.metrics import train_flops_per_token
from distbench.figures.params import param_split
from distbench.figures.predict import predict
from distbench.figures.step_time import measured_compute_s
from distbench.job import resolve_job
from distbench.probes import host_load, runner, step_parts, trace
from distbench.probes.detect import device_name, num_cpu_cores
from distbench.probes.parts import STEP_PARTS_FIELDS, MeasuredParts
from distbench.workloads.train import prepare
from tests.conftest import CONF_DIR, compose_config, with_measured_parts

pytestmark = pytest.mark.unit


def _model(overrides: list[str]):
    return resolve_job(compose_config(overrides), CONF_DIR).model


@pytest.mark.parametrize("model", [["model=tiny"], ["model=gpt2_124m", "model.num_layers=2"]])
def test_the_traced_gemms_and_attention_are_palms_model_flops(model):
    cfg = _model(model)
    b, s = 2, 64
    traced_mb = trace.trace_micro_batch(cfg, "fp32", b, s)
    traced = sum(count * trace.gemm_flops(shape) for shape, count in traced_mb.gemms.items())
    weights = train_flops_per_token(param_split(cfg).matmul, cfg.num_layers, cfg.hidden_size, 0)
    # PaLM's N counts the norms' weights too (0.05 % here), which multiply no matrix
    assert traced == pytest.approx(weights * b * s, rel=1e-3)
    # SDPA: one fused call per layer each way, not meta's math path; 3× forward = 12·L·h·s
    assert sum(traced_mb.attention_forward.values()) == cfg.num_layers
    assert traced_mb.attention_backward == traced_mb.attention_forward
    attention = sum(
        n * trace.attention_forward_flops(a) for a, n in traced_mb.attention_forward.items()
    )
    assert 3 * attention == pytest.approx(12 * cfg.num_layers * cfg.hidden_size * s * b * s)
    assert all(num_bytes > 0 for num_bytes in traced_mb.other_bytes)
    eager = trace.trace_micro_batch(
        dataclasses.replace(cfg, attn_implementation="eager"), "fp32", b, s
    )
    assert not eager.attention_forward  # eager attention is its matmuls and softmax, traced
    eager_flops = sum(n * trace.gemm_flops(g) for g, n in eager.gemms.items())
    assert eager_flops == pytest.approx(traced + 3 * attention)


def test_a_layer_adds_the_same_operations_so_two_traces_extrapolate_to_any_depth():
    cfg = _model(["model=tiny"])
    traces = {
        n: trace.trace_micro_batch(dataclasses.replace(cfg, num_layers=n), "fp32", 1, 32)
        for n in (1, 2, 4)
    }
    for quantity in (lambda t: t.num_kernels, lambda t: sum(t.other_bytes)):
        at_1, at_2, at_4 = (quantity(traces[n]) for n in (1, 2, 4))
        assert step_parts.extrapolate(at_1, at_2, 4) == pytest.approx(at_4)


def test_a_micro_batch_takes_the_longer_of_host_and_device_on_a_gpu_and_both_on_a_cpu():
    assert measured_compute_s("cuda", 0.03, 0.05, 1, 1, 4) == pytest.approx(0.2)
    assert measured_compute_s("cuda", 0.08, 0.05, 1, 1, 4) == pytest.approx(0.32)
    assert measured_compute_s("cpu", 0.03, 0.05, 1, 1, 4) == pytest.approx(0.32)
    # tp splits the device work, not the launches; pp splits both (its layers)
    assert measured_compute_s("cuda", 0.08, 0.05, 4, 1, 1) == pytest.approx(0.05)
    assert measured_compute_s("cuda", 0.08, 0.05, 1, 2, 1) == pytest.approx(0.04)


def test_predict_takes_its_compute_from_the_measuredmeasured_parts():
    llama = ["hardware=h100_sxm", "model=llama_1b", "batch=medium", "workload.dtype=bf16"]
    job = resolve_job(compose_config([*llama, "strategy=dp", "world_size=1"]), CONF_DIR)
    by_efficiency = predict(job)
    host_bound = with_measured_parts(job, 0.02, 0.03, 0.09)
    p = predict(host_bound)
    m = job.batch.grad_accum_steps
    assert p.time_s["compute"] == pytest.approx(m * 0.09)
    device_bound = host_bound.with_measured(micro_batch_host_s=0.01)
    assert predict(device_bound).time_s["compute"] == pytest.approx(m * 0.06)
    assert p.assumptions["time_source"] == "measured"
    assert by_efficiency.assumptions["time_source"] == "efficiency"
    assert p.time_s["compute"] != pytest.approx(by_efficiency.time_s["compute"])
    # the optimizer's memory-bound step uses the measured bandwidth
    ratio = by_efficiency.time_s["optimizer"] / p.time_s["optimizer"]
    assert ratio == pytest.approx(3000.0 / job.hardware.mem_bandwidth_gbps)
    # a failed calibration (time_source back to efficiency) ignores stale parts
    stale = host_bound.with_hardware(time_source="efficiency")
    assert predict(stale).time_s == by_efficiency.time_s


def _host_seen_with(monkeypatch, runnable_others: float) -> host_load.HostSample:
    """The probe sees this host (read from /proc now) with `runnable_others` other tasks
    wanting a core: the load is the one thing here not real (the suite's other worker may be
    running ranks beside this test)."""
    now = host_load.sample()
    seen = dataclasses.replace(now, runnable_others=runnable_others)
    monkeypatch.setattr(host_load, "sample", lambda: seen)
    return seen


def test_this_cpu_is_measured_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    _host_seen_with(monkeypatch, 0)
    cfg = _model(["model=tiny"])
    args = (cfg, "cpu", "fp32", 1, 32, "test-cpu")
    first = step_parts.cached_or_measured(*args)
    again = step_parts.cached_or_measured(*args)
    assert first["cached"] is False and again["cached"] is True
    assert "busy_host" not in first and "busy_host" not in again
    assert {k: again[k] for k in STEP_PARTS_FIELDS} == {k: first[k] for k in STEP_PARTS_FIELDS}
    assert first["micro_batch_gemm_s"] > 0 and first["micro_batch_other_s"] > 0
    assert first["micro_batch_host_s"] > 0 and first["kernel_floor_us"] == 0.0
    assert 0.1 < first["measured_mem_bandwidth_gbps"] < 1000
    traced = trace.trace_micro_batch(cfg, "fp32", 1, 32)
    assert first["kernels_per_micro_batch"] == traced.num_kernels
    # on a CPU the parts add up to the bare model's micro-batch, timed whole at its shape
    parts_s = sum(first[k] for k in STEP_PARTS_FIELDS if k.startswith("micro_batch_"))
    assert parts_s == pytest.approx(first["micro_batch_direct_s"], rel=1e-9)
    assert first["cpu_direct_over_parts"] == pytest.approx(
        first["micro_batch_direct_s"] / first["micro_batch_priced_s"]
    )
    assert again["cpu_direct_over_parts"] == first["cpu_direct_over_parts"]
    assert first["direct_probe_layers"] == cfg.num_layers  # run whole: a second or less
    # the job's measured parts carry the factor (resolved.yaml's `measured`, the params)
    measured = MeasuredParts.from_figures(first).measured_fields()
    assert measured["cpu_direct_over_parts"] == first["cpu_direct_over_parts"]


def test_a_micro_batch_too_slow_or_too_large_for_this_cpu_is_priced_not_run():
    """The whole-micro-batch timing runs the model: a 70B one is left to its parts."""
    cfg = _model(["model=llama3_70b"])
    slow = step_parts.cpu_direct_figures(cfg, "bf16", (1, 8192), priced_s=(10.0, 20.0))
    assert slow == {"cpu_direct_skipped": "one layer is priced 10.0 s a micro-batch"}
    assert step_parts.direct_probe_bytes(cfg, "bf16", (1, 8192)) > 140 * 2**30  # its weights
    # priced as fast (what it is not), its 80 layers would not fit in 256 GiB free
    large = step_parts.cpu_direct_figures(
        cfg, "bf16", (1, 8192), priced_s=(1e-3, 2e-3), available_bytes=256 * 2**30
    )
    assert set(large) == {"cpu_direct_skipped"} and large["cpu_direct_skipped"].startswith("needs")


def test_the_direct_probe_runs_the_most_layers_priced_within_its_budget():
    assert step_parts.direct_probe_layers((1.0, 1.5), 4, budget_s=5.0) == 4  # 2.5 s whole
    assert step_parts.direct_probe_layers((1.0, 2.0), 16, budget_s=5.0) == 5  # 5 layers: 5 s
    assert step_parts.direct_probe_layers((6.0, 12.0), 4, budget_s=5.0) == 0


def test_the_direct_probe_counts_weights_gradients_activations_and_logits():
    cfg = _model(["model=tiny"])
    small, longer = (step_parts.direct_probe_bytes(cfg, "fp32", (1, s)) for s in (128, 256))
    weights_and_grads = 2 * 4 * param_split(cfg).total
    # activations and logits grow with the tokens; the weights do not
    assert longer - small == pytest.approx(small - weights_and_grads)


def test_parts_timed_on_a_busy_host_serve_the_job_but_are_not_cached(tmp_path, monkeypatch):
    """A measurement taken while other tasks wanted the cores (a test suite, another job) was
    cached for good before: 431 µs of host time per kernel (45 µs in a quiet measurement of
    another shape that day)."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    cores = host_load.sample().cores  # what the rule counts the others against (/proc's)
    _host_seen_with(monkeypatch, cores)  # a task wanting every core beside the probe's thread
    args = (_model(["model=tiny"]), "cpu", "fp32", 1, 32, "test-cpu")
    busy = step_parts.cached_or_measured(*args)
    assert busy["cached"] is False and f"beside 1 thread(s) on {cores} cores" in busy["busy_host"]
    assert busy["micro_batch_gemm_s"] > 0  # the job that asked gets its figures
    assert not (tmp_path / step_parts.CACHE_FILE).exists()
    _host_seen_with(monkeypatch, 0)  # quiet again: measured anew, and now kept
    quiet = step_parts.cached_or_measured(*args)
    assert quiet["cached"] is False and "busy_host" not in quiet
    assert step_parts.cached_or_measured(*args)["cached"] is True


def test_a_probe_is_busy_when_others_leave_its_threads_less_than_a_core_each():
    now = host_load.sample()
    quiet, one_other = (dataclasses.replace(now, runnable_others=n, cores=2) for n in (0, 1))
    assert step_parts.busy_host_reason(1, 2, quiet) is None
    assert step_parts.busy_host_reason(1, 2, one_other) is None  # 1 + 1 on 2 cores
    assert step_parts.busy_host_reason(2, 2, one_other) == (
        "1 other runnable task(s) beside 2 thread(s) on 2 cores"
    )
    assert step_parts.busy_host_reason(2, 2, None) is None  # no /proc: nothing to judge by


def _cpu_job(overrides: list[str] = ()):
    """A measured training job on this CPU (tiny, one rank), its parts not attached yet."""
    cfg = compose_config(
        ["model=tiny", "hardware=cpu", "world_size=1", "strategy=single", *overrides]
    )
    job = resolve_job(cfg, CONF_DIR)
    return job.replace(hardware=dataclasses.replace(job.hardware, time_source="measured"))


def test_a_failed_calibration_keeps_the_efficiency_model_and_says_why_once(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_parts, "_FAILED", {})
    job = _cpu_job()
    failing = ["-m", "distbench.probes.step_parts", "--model-json", "{}"]  # not a model
    real = runner.run_probe
    monkeypatch.setattr(runner, "run_probe", lambda args, *rest: real(failing, *rest))
    prepared = prepare.with_step_parts(job)
    hw = prepared.measured
    assert prepared.hardware.time_source == "efficiency"
    assert "step_parts exited" in hw.time_calibration_error
    assert hw.micro_batch_gemm_s is None
    assert "step-time calibration failed" in capsys.readouterr().err
    # the next job of the same shape (a plan --search: hundreds) neither retries nor repeats it
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    again = prepare.with_step_parts(job).measured
    assert again.time_calibration_error == hw.time_calibration_error
    assert capsys.readouterr().err == ""


def _no_subprocess(*args, **kwargs):
    raise AssertionError(f"a subprocess was started: {args}")


def test_parts_timed_on_a_busy_host_are_measured_once_per_process(capsys, monkeypatch, tmp_path):
    """Every layout of one `distbench plan` shares a shape's parts: on a busy host they are
    measured once, said once, and not cached."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_parts, "_BUSY", {})
    job = _cpu_job()
    cores = num_cpu_cores()
    real = runner.run_probe

    def more_threads_than_cores(args, *rest):  # the probe's own rule sees the cores oversubscribed
        i = args.index("--threads") + 1
        return real([*args[:i], str(cores + 1), *args[i + 1 :]], *rest)

    monkeypatch.setattr(runner, "run_probe", more_threads_than_cores)
    prepared = prepare.with_step_parts(job)
    assert prepared.hardware.time_source == "measured" and prepared.measured.micro_batch_gemm_s > 0
    err = capsys.readouterr().err
    assert f"({cores + 1} threads on {cores} cores)" in err and "does not keep them" in err
    assert not (tmp_path / step_parts.CACHE_FILE).exists()
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    again = prepare.with_step_parts(job).measured
    assert again.micro_batch_gemm_s == prepared.measured.micro_batch_gemm_s
    assert capsys.readouterr().err == ""


def test_a_cached_measurement_is_read_without_a_subprocess(monkeypatch, tmp_path):
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    model = _model(["model=tiny"])
    # a rank alone on this machine gets every core (launch/workers.py): measured with as many
    threads = num_cpu_cores()
    key = step_parts.cache_key(device_name("cpu"), "fp32", model, 2, 128, threads)
    figures = {field: 0.5 for field in STEP_PARTS_FIELDS}
    (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps({key: figures}))
    monkeypatch.setattr(runner.subprocess, "run", _no_subprocess)
    parts = step_parts.measured_step_parts(
        model, "fp32", 2, 128, device="cpu", device_name=device_name("cpu"), threads=threads
    )
    assert parts == MeasuredParts(**figures)
    job = prepare.with_step_parts(_cpu_job(["batch.micro_batch_size=2", "batch.seq_len=128"]))
    assert job.hardware.time_source == "measured" and job.measured.micro_batch_host_s == 0.5


@pytest.mark.parametrize("damaged", [None, [1, 2], {"micro_batch_gemm_s": "fast"}])
def test_a_damaged_cache_is_measured_again_not_raised(damaged, monkeypatch, tmp_path):
    """A cache file or entry that is not what a probe wrote (null, a list, a field that is not
    a number) reads as missing: the probe runs again (here: refused by cache_only)."""
    monkeypatch.setenv("DISTBENCH_CACHE_DIR", str(tmp_path))
    model = _model(["model=tiny"])
    key = step_parts.cache_key("test-cpu", "fp32", model, 2, 128, 1)
    for content in (damaged, {key: damaged}):
        (tmp_path / step_parts.CACHE_FILE).write_text(json.dumps(content))
        with runner.cache_only(), pytest.raises(runner.NotMeasured):
            step_parts.measured_step_parts(
                model, "fp32", 2, 128, device="cpu", device_name="test-cpu", threads=1
            )
