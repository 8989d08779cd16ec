"""Timing this machine: plain values in (a model config, a shape, a dtype, a device, threads), a
typed result out; never a `Job`. Each probe that needs torch runs as its own process
(`python -m distbench.probes.<probe>`) so that the orchestrator never imports it, and caches
what it measured per machine and shape.

    detect.py      this machine's GPUs, CPU, cores and hw.* tags (pynvml / nvidia-smi, /proc)
    threads.py     the CPU threads one rank gets (what a CPU probe measures with)
    cache.py       the probes' JSON cache ($DISTBENCH_CACHE_DIR), typed reads, locked writes
    runner.py      a probe subprocess, cache_only() (measure nothing), a failure said once
    calibrate.py   peak TFLOP/s of a timed GEMM (hardware.peak_source=measured)
    trace.py       a micro-batch's operations, traced on the meta device
    timing.py      the device's rates: GEMMs, attention, bandwidth, kernel floor, host time
    step_parts.py  a micro-batch's measured parts (MeasuredParts), cached
    parts.py       MeasuredParts: what the step-time probes return; Measurements: Job.measured

A workload's probes that need its own engine live in its folder (train's ZeRO-3 engine probe:
workloads/train/engine_probe.py); distbench/prepare.py and the workload's prepare hook attach
the results to a job before launch.

    python -m distbench.probes.detect
"""
