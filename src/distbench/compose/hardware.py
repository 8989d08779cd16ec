"""Hardware detection and peak figures: which device a run uses and what its peak is.

The GPU catalog lives in conf/hardware/*.yaml (datasheet figures, prices with their source).
This module resolves `hardware=auto` and fills a CPU's peak from /proc/cpuinfo, or, with
`hardware.peak_source=measured`, from a timed GEMM on this machine (compose/calibrate.py, run as a
subprocess and cached). `detect_tags()` names the machine for MLflow (`hw.*` tags). It never
imports torch: GPUs are found with pynvml when installed, else `nvidia-smi`.

    python -m distbench.compose.hardware   # what `hardware=auto` resolves to here, the hw.* tags
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# FP32 FLOPs per cycle per core for the widest FMA the flags show: 2 FMA pipes x lanes x 2.
FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("avx2", 32), ("avx", 16), ("sse2", 8))
# What `hardware.peak_source=measured` calibrates when no dtype is named, per device.
CALIBRATED_DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}
NVIDIA_SMI_QUERY = "name,memory.total,clocks.max.sm,compute_cap"
# nvidia-smi device-name fragments -> conf/hardware option.
GPU_CATALOG_NAMES = (("H200", "h200"), ("H100", "h100_sxm"), ("A100", "a100_80gb"), ("L4", "l4"))


def cpu_peak_tflops_per_core(cpuinfo: str) -> dict[str, float]:
    """Estimated peak TFLOP/s of one core: MHz × FLOPs per cycle (from the SIMD flags).

    bf16 doubles fp32 where the core has AVX512-BF16 (VDPBF16PS does two products per lane);
    otherwise bf16 runs at the fp32 rate. An estimate: turbo and AVX clocks differ from MHz."""
    mhz, flags = 0.0, set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz" and not mhz:
            mhz = float(value)
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    per_cycle = next((n for flag, n in FP32_FLOPS_PER_CYCLE if flag in flags), 2)
    fp32 = mhz * 1e6 * per_cycle / 1e12
    bf16 = fp32 * (2 if "avx512_bf16" in flags else 1)
    return {"fp32": fp32, "bf16": bf16, "fp16": fp32}


# fields -> (monotonic time asked, nvidia-smi's answer): static fields, asked once per job (a
# plan --search resolves hundreds); an empty answer (no driver, a timeout) stands this long
_NVIDIA_SMI_ANSWERS: dict[str, tuple[float, str]] = {}
NVIDIA_SMI_EMPTY_ANSWER_S = 60.0


def nvidia_smi_query(fields: str) -> str:
    """nvidia-smi's CSV answer for `fields` ("" without nvidia-smi or a driver)."""
    cached = _NVIDIA_SMI_ANSWERS.get(fields)
    if cached and (cached[1] or time.monotonic() - cached[0] < NVIDIA_SMI_EMPTY_ANSWER_S):
        return cached[1]
    answer = ""
    if shutil.which("nvidia-smi"):
        try:
            answer = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
        except (subprocess.SubprocessError, OSError):
            answer = ""
    _NVIDIA_SMI_ANSWERS[fields] = (time.monotonic(), answer)
    return answer


def gpu_names() -> list[str]:
    """Names of the visible NVIDIA GPUs (empty without nvidia-smi or a driver)."""
    out = nvidia_smi_query("name")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in out.splitlines() if n.strip()]
    if visible is not None:
        indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
        names = [names[i] for i in indices if i < len(names)]
    return names


def catalog_option_for(gpu_name: str) -> str | None:
    """The conf/hardware option for a device name from nvidia-smi, if the catalog has one."""
    return next((opt for frag, opt in GPU_CATALOG_NAMES if frag in gpu_name), None)


def resolve_hardware(hardware: dict, conf_dir: Path, dtypes: Iterable[str] | None = None) -> dict:
    """Fill `hardware=auto` and CPU peaks. Returns a plain dict with every field set that can be.

    auto → the catalog entry for the first GPU (or a bare `cuda` entry with no peak when the GPU
    is not in the catalog: MFU is then not reported rather than made up), else `cpu`.
    `peak_source=measured` then replaces the peaks of `dtypes` (default: every dtype the device
    trains in, CALIBRATED_DTYPES) by this machine's calibrated ones (apply_measured_peaks)."""
    from omegaconf import OmegaConf

    hw = dict(hardware)
    if hw["device"] == "auto":
        names = gpu_names()
        option = "cpu" if not names else catalog_option_for(names[0])
        if option is None:
            hw.update(name=names[0], device="cuda")
        else:
            loaded = OmegaConf.to_container(
                OmegaConf.load(conf_dir / "hardware" / f"{option}.yaml")
            )
            loaded.pop("defaults", None)
            hw.update(loaded)
        hw["detected"] = names[0] if names else "cpu"
    if hw["device"] == "cpu" and hw.get("peak_tflops_fp32") is None:
        peaks = cpu_peak_tflops_per_core(Path("/proc/cpuinfo").read_text())
        for dtype, value in peaks.items():
            hw[f"peak_tflops_{dtype}"] = value
    if hw.get("peak_source", "catalog") == "measured":
        apply_measured_peaks(hw, dtypes)
    return hw


def apply_measured_peaks(hw: dict, dtypes: Iterable[str] | None = None) -> dict:
    """Replace hw's `peak_tflops_<dtype>` by a timed GEMM on this device (cached per machine).

    CPU: one thread, as one rank = one core. A failed calibration keeps the catalog figure,
    sets `peak_source=catalog` and says why in `peak_calibration_error` (it reaches
    resolved.yaml and the run's params): a job is never lost to its calibration."""
    device = "cuda" if hw["device"] == "cuda" else "cpu"
    threads = 1 if device == "cpu" else 0
    device_name = _device_name(device)
    try:
        for dtype in dtypes or CALIBRATED_DTYPES[device]:
            measured = measured_peak_tflops(device, dtype, threads, device_name)
            hw[f"catalog_peak_tflops_{dtype}"] = hw.get(f"peak_tflops_{dtype}")  # to compare
            hw[f"peak_tflops_{dtype}"] = measured
        hw["peak_source"] = "measured"
    except PROBE_ERRORS as exc:
        hw["peak_source"] = "catalog"
        hw["peak_calibration_error"] = f"{type(exc).__name__}: {exc}"[:500]
        print(
            f"distbench: peak calibration failed, using the catalog peak: {exc}",
            file=sys.stderr,
            flush=True,
        )
    return hw


# (tracking URI, experiment, hardware) -> (monotonic time read, fits): a sweep or a plan
# --search resolves many jobs in one process; the store is read again after this long.
_LINK_FITS_CACHE: dict[tuple[str, str, str], tuple[float, dict]] = {}
LINK_FITS_CACHE_S = 60.0
EMPTY_LINK_FITS_CACHE_S = 5.0  # long enough for a plan --search, short for a sweep
_LINK_WARNED: set[str] = set()


def apply_measured_links(hw: dict, tracking_uri: str | None, experiment: str) -> dict:
    """`link_source=measured`: the α-β fits of the collectives runs of this hardware in the
    store (figures/links.py: the median per tier) into hw: measured_interconnect_gbps (the
    intra-node bus bandwidth), measured_internode_gbytes_per_s (the inter-node one),
    link_latency_us (the intra-node α); predictions prefer them to the catalog figures, which
    stay. Without a store or any fit it sets `link_source=catalog` and says why in
    `link_calibration_error` (resolved.yaml and the run's params carry it)."""
    from distbench.figures.links import link_fit_fields
    from distbench.tracking.pred_history import load_link_fits, store_exists

    def give_up(why: str) -> dict:
        hw["link_source"] = "catalog"
        hw["link_calibration_error"] = why[:500]
        if why not in _LINK_WARNED:  # a plan resolves every strategy: say it once
            _LINK_WARNED.add(why)
            print(
                f"distbench: hardware.link_source=measured: {why}; using the catalog links",
                file=sys.stderr,  # plan --json and resolve --json keep stdout one document
            )
        return hw

    if tracking_uri is None:
        return give_up("tracking=none: no store to read collectives runs from")
    if not store_exists(tracking_uri):
        return give_up("no MLflow store yet (run workload=collectives first)")
    key = (tracking_uri, experiment, hw["name"])
    cached = _LINK_FITS_CACHE.get(key)
    # none yet is kept briefly: a collectives job of the same sweep may log one next
    max_age_s = LINK_FITS_CACHE_S if cached and cached[1] else EMPTY_LINK_FITS_CACHE_S
    if cached and time.monotonic() - cached[0] < max_age_s:
        fits = cached[1]
    else:
        try:
            fits = load_link_fits(tracking_uri, experiment, hw["name"])
        except Exception as exc:  # a job is never lost to its calibration
            return give_up(f"the store could not be read ({type(exc).__name__})")
        _LINK_FITS_CACHE[key] = (time.monotonic(), fits)
    if not fits:
        return give_up(
            f"no finished workload=collectives run of hardware={hw['name']} in experiment "
            f"{experiment} (run: python run.py workload=collectives hardware={hw['name']})"
        )
    hw.update(link_fit_fields(fits))
    return hw


def measured_peak_tflops(
    device: str, dtype: str, threads: int, device_name: str, timeout_s: float = 600.0
) -> float:
    """This machine's peak TFLOP/s for dtype: the cache's, else a `python -m
    distbench.compose.calibrate`
    subprocess (the caller never imports torch) whose last stdout line is one JSON document."""
    from distbench.compose import calibrate

    cached = calibrate.cached_peak(device_name, dtype, threads)
    if cached is not None:
        return cached
    cmd = [
        sys.executable,
        "-m",
        "distbench.compose.calibrate",
        "--device",
        device,
        "--dtype",
        dtype,
    ]
    cmd += ["--threads", str(threads), "--device-name", device_name]
    env = dict(os.environ, OMP_NUM_THREADS=str(max(threads, 1)))
    return float(_last_json_line(cmd, env, timeout_s)["tflops"])


def _last_json_line(cmd: list[str], env: dict | None, timeout_s: float) -> dict:
    """Run a `python -m distbench.compose.<probe>` command; its last stdout line, one JSON
    document. A non-zero exit raises SubprocessError naming the probe and its last stderr line."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        probe = cmd[2].rsplit(".", 1)[-1]
        raise subprocess.SubprocessError(f"{probe} exited {proc.returncode}: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# What a probe subprocess or its cache can raise: the job then goes on without its figures.
PROBE_ERRORS = (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError, TypeError)

# What `hardware.time_source=measured` fills from compose/step_parts.py's figures.
STEP_PARTS_FIELDS = (
    "micro_batch_gemm_s",
    "micro_batch_attention_s",
    "micro_batch_other_s",
    "micro_batch_host_s",
    "kernels_per_micro_batch",
    "host_us_per_kernel",
    "kernel_floor_us",
    "measured_mem_bandwidth_gbps",
)


def _step_parts_subprocess(
    device: str,
    device_name: str,
    dtype: str,
    model: Any,
    micro_batch_size: int,
    seq_len: int,
    threads: int,
    timeout_s: float,
) -> dict:
    """compose/step_parts.py's figures from a subprocess (the caller never imports torch)."""
    cmd = [sys.executable, "-m", "distbench.compose.step_parts", "--device", device]
    cmd += ["--dtype", dtype, "--model-json", json.dumps(dataclasses.asdict(model))]
    cmd += ["--micro-batch-size", str(micro_batch_size), "--seq-len", str(seq_len)]
    cmd += ["--device-name", device_name, "--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if device == "cpu" else None
    return _last_json_line(cmd, env, timeout_s)


def is_this_machine(hw: dict, local_gpu_names: list[str] | None = None) -> bool:
    """Whether a resolved hardware dict describes this machine's device: a CPU entry always (its
    peak is read from this machine's /proc/cpuinfo), a GPU entry when this machine's first
    visible GPU (local_gpu_names, default gpu_names()) is that catalog entry (or that name, for
    a GPU outside the catalog)."""
    if hw["device"] != "cuda":
        return True
    if local_gpu_names is None:
        local_gpu_names = gpu_names()
    if not local_gpu_names:
        return False
    local = local_gpu_names[0]
    return hw["name"] in (local, catalog_option_for(local))


# Names what `hardware.time_source=auto` means on this machine (efficiency or measured).
TIME_SOURCE_ENV = "DISTBENCH_TIME_SOURCE"


def resolve_time_source(
    hw: dict, workload_name: str, local_gpu_names: list[str] | None = None
) -> str:
    """What `hardware.time_source=auto` means for this job: what $DISTBENCH_TIME_SOURCE names,
    else `measured` for a training job whose hardware is this machine's device (its parts can
    be timed here) and `efficiency` otherwise (a plan for an H100 cluster made on a laptop).
    `efficiency` and `measured` stand as given. ConfigError for a value outside TIME_SOURCES."""
    from distbench.compose.schema import TIME_SOURCES, ConfigError

    source = hw.get("time_source") or "auto"
    if source == "auto" and os.environ.get(TIME_SOURCE_ENV):
        source = os.environ[TIME_SOURCE_ENV]
        if source not in TIME_SOURCES:
            raise ConfigError(
                f"${TIME_SOURCE_ENV}={source!r} is not allowed; choose one of {list(TIME_SOURCES)}"
            )
    if source != "auto":
        return source
    local = workload_name == "train" and is_this_machine(hw, local_gpu_names)
    return "measured" if local else "efficiency"


# cache key -> why its measurement failed: a plan --search resolves hundreds of layouts with
# the same model and micro-batch; a failure is not retried (nor reported) for each.
_STEP_PARTS_FAILED: dict[str, str] = {}


# Why a job that measures nothing (`distbench resolve`, a failure recorded after the fact, a
# layout of plan --search that does not fit) has no measured parts: nothing was cached.
NOT_MEASURED_HERE = (
    "not measured where this job was resolved: no cached figures (distbench resolve, run.py's "
    "precheck and failure records measure nothing; run.py and plan do)"
)


def left_unmeasured(hardware: Any) -> bool:
    """Whether a job resolved with measure=False lacks parts a measuring resolve would time
    (its step parts or its engine probe: NOT_MEASURED_HERE is on its time_calibration_error)."""
    return NOT_MEASURED_HERE in (hardware.time_calibration_error or "")


def apply_measured_step_parts(
    hw: dict,
    model: Any,
    dtype: str,
    micro_batch_size: int,
    seq_len: int,
    ranks_sharing_cores: int = 1,
    timeout_s: float = 600.0,
    probe: bool = True,
) -> dict:
    """`time_source=measured`: fill hw's STEP_PARTS_FIELDS for this model and micro-batch from
    the cache, else a `python -m distbench.compose.step_parts` subprocess (it caches them per
    machine and shape). A failed measurement keeps the efficiency model, sets
    `time_source=efficiency` and says why in `time_calibration_error`: a job is never lost to
    its calibration. On a CPU it measures with the threads the launcher will give each rank of
    the `ranks_sharing_cores` on this machine (rank_threads). `probe=False` reads the cache
    only: without an entry the job keeps the efficiency model (NOT_MEASURED_HERE)."""
    from distbench.compose import step_parts

    device = "cuda" if hw["device"] == "cuda" else "cpu"
    device_name = _device_name(device)
    threads = rank_threads(num_cpu_cores(), ranks_sharing_cores) if device == "cpu" else 1
    key = step_parts.cache_key(device_name, dtype, model, micro_batch_size, seq_len, threads)
    figures = step_parts.read_cache().get(key)
    if figures is None and not probe:
        hw.update(time_source="efficiency", time_calibration_error=NOT_MEASURED_HERE)
        return hw
    try:
        if figures is None and key in _STEP_PARTS_FAILED:
            raise subprocess.SubprocessError(_STEP_PARTS_FAILED[key])
        if figures is None:
            figures = _step_parts_subprocess(
                device, device_name, dtype, model, micro_batch_size, seq_len, threads, timeout_s
            )
        hw.update({field: figures[field] for field in STEP_PARTS_FIELDS})
        hw["time_source"] = "measured"
    except PROBE_ERRORS as exc:
        hw["time_source"] = "efficiency"
        hw["time_calibration_error"] = f"{type(exc).__name__}: {exc}"[:500]
        if key not in _STEP_PARTS_FAILED:
            _STEP_PARTS_FAILED[key] = str(exc)
            print(
                f"distbench: step-time calibration failed, using the efficiency model: {exc}",
                file=sys.stderr,
                flush=True,
            )
    return hw


# What `hardware.time_source=measured` fills from compose/engine_probe.py for a ZeRO-3 job.
ENGINE_PARTS_FIELDS = ("micro_batch_engine_host_s", "engine_step_s")

# cache key -> why its engine probe failed (as _STEP_PARTS_FAILED)
_ENGINE_PARTS_FAILED: dict[str, str] = {}


def apply_engine_parts(job: Any, timeout_s: float = 600.0, probe: bool = True) -> Any:
    """The job with its engine's host work (ENGINE_PARTS_FIELDS) from the cache, else a
    `python -m distbench.compose.engine_probe` subprocess, when engine_probe.applies to it and
    its step parts were measured. A failed probe keeps the step parts, leaves the fields None
    and says why in `time_calibration_error`: the job goes on. `probe=False` reads the cache
    only (NOT_MEASURED_HERE without an entry)."""
    from distbench.compose import engine_probe

    if job.hardware.time_source != "measured" or not engine_probe.applies(job):
        return job
    device = "cuda" if job.device == "cuda" else "cpu"
    device_name = _device_name(device)
    sharing = ranks_sharing_machine(
        job.topology.rank_launcher, job.world_size, job.topology.ranks_per_node
    )
    threads = rank_threads(num_cpu_cores(), sharing) if device == "cpu" else 1
    key = engine_probe.cache_key(job, device_name, threads)
    figures = engine_probe.read_cache().get(key)
    changes: dict[str, Any] = {}
    if not _is_probe(figures) and not probe:
        note = f"engine probe: {NOT_MEASURED_HERE}"
        return job.replace(hardware=dataclasses.replace(job.hardware, time_calibration_error=note))
    try:
        if not _is_probe(figures):
            figures = None
            if key not in _ENGINE_PARTS_FAILED:
                figures = _engine_probe_subprocess(job, device, device_name, threads, timeout_s)
        if figures is not None:
            changes = engine_probe.engine_parts(figures, job.model.num_layers)
    except PROBE_ERRORS as exc:
        _ENGINE_PARTS_FAILED[key] = f"engine probe: {type(exc).__name__}: {exc}"[:500]
        print(
            f"distbench: the engine probe failed, ZeRO-3's host work is not predicted: {exc}",
            file=sys.stderr,
            flush=True,
        )
    if not changes:  # failed now or before: said once, not retried for the same key
        changes = {"time_calibration_error": _ENGINE_PARTS_FAILED[key]}
    return job.replace(hardware=dataclasses.replace(job.hardware, **changes))


def _is_probe(figures: Any) -> bool:
    """Whether a cache entry holds a whole probe (an older or a damaged one is measured again)."""
    from distbench.compose.engine_probe import PROBE_FIELDS

    return isinstance(figures, dict) and all(
        isinstance(figures.get(field), dict) for field in PROBE_FIELDS
    )


def _engine_probe_subprocess(
    job: Any, device: str, device_name: str, threads: int, timeout_s: float
) -> dict:
    """compose/engine_probe.py's figures from a subprocess (the caller never imports torch)."""
    with tempfile.TemporaryDirectory(prefix="distbench-engine-probe-") as folder:
        job_yaml = Path(folder) / "job.yaml"
        job_yaml.write_text(job.to_yaml())
        cmd = [sys.executable, "-m", "distbench.compose.engine_probe", "--job-yaml", str(job_yaml)]
        cmd += ["--device-name", device_name, "--threads", str(threads)]
        env = dict(os.environ, DS_ACCELERATOR=device)
        if device == "cpu":
            env["OMP_NUM_THREADS"] = str(threads)
        return _last_json_line(cmd, env, timeout_s)


def num_cpu_cores() -> int:
    return len(os.sched_getaffinity(0))


def rank_threads(num_cores: int, ranks_sharing_cores: int) -> int:
    """The CPU threads of one rank (OMP_NUM_THREADS): the cores split between the ranks that
    share them (oversubscription costs 3x on CPU)."""
    return max(1, num_cores // ranks_sharing_cores)


def ranks_sharing_machine(rank_launcher: str, world_size: int, ranks_per_node: int) -> int:
    """Ranks on one machine: every rank under local_nodes (its "nodes" are this machine), else
    a node's."""
    return world_size if rank_launcher == "local_nodes" else ranks_per_node


# --------------------------------------------------------------------------- hw.* tags


def parse_nvidia_smi(csv_text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,compute_cap
    --format=csv,noheader` lines → one dict per GPU (memory in GiB, clock in MHz)."""
    gpus = []
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if not fields[0]:
            continue
        fields += [""] * (4 - len(fields))
        mem_mib = _number(fields[1])
        gpus.append(
            {
                "name": fields[0],
                "mem_gib": "" if mem_mib is None else f"{mem_mib / 1024:.1f}",
                "sm_clock_mhz": "" if _number(fields[2]) is None else str(int(_number(fields[2]))),
                "compute_capability": fields[3] if _number(fields[3]) is not None else "",
            }
        )
    return gpus


def _number(text: str) -> float | None:
    """The leading number of '81559 MiB', '1980 MHz', '9.0'; None for '[N/A]' and the like."""
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _visible(items: list) -> list:
    """The items CUDA_VISIBLE_DEVICES keeps (numeric indices; nvidia-smi and NVML list all)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return items
    indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
    return [items[i] for i in indices if i < len(items)]


def _gpus_pynvml() -> list[dict[str, str]] | None:
    """The GPUs as NVML sees them; None when pynvml is not installed or NVML has no driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
            gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "mem_gib": f"{pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30:.1f}",
                    "sm_clock_mhz": str(clock),
                    "compute_capability": f"{major}.{minor}",
                }
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _gpus_nvidia_smi() -> list[dict[str, str]]:
    out = nvidia_smi_query(NVIDIA_SMI_QUERY)
    return parse_nvidia_smi(out)


def detect_gpus() -> list[dict[str, str]]:
    """The visible GPUs (name, mem_gib, sm_clock_mhz, compute_capability): pynvml when
    importable, else nvidia-smi; empty on a machine without NVIDIA GPUs."""
    gpus = _gpus_pynvml()
    return _visible(gpus if gpus is not None else _gpus_nvidia_smi())


def parse_cpu_model(cpuinfo: str) -> str:
    """The first `model name` of /proc/cpuinfo (or an arm `Hardware`/`CPU part` line)."""
    for key in ("model name", "Hardware", "CPU part"):
        for line in cpuinfo.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return " ".join(value.split())
    return "unknown"


def parse_mem_total_gib(meminfo: str) -> float | None:
    """MemTotal of /proc/meminfo in GiB."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return float(line.split()[1]) / 2**20  # kB -> GiB
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def detect_tags() -> dict[str, str]:
    """MLflow tags naming this machine: the GPU table (`hw.device_name`, `hw.device_count`,
    `hw.mem_gib`, `hw.sm_clock_mhz`, `hw.compute_capability`) on a GPU machine, else the CPU as
    the device (one rank = one core: the count is the cores this process may use); the host
    CPU (`hw.cpu_model`, `hw.cpu_cores`) in both cases. Values are strings; nothing raises."""
    cpu_model = parse_cpu_model(_read("/proc/cpuinfo"))
    cores = num_cpu_cores()
    tags = {"hw.cpu_model": cpu_model, "hw.cpu_cores": str(cores)}
    gpus = detect_gpus()
    if gpus:
        first = gpus[0]
        tags.update(
            {
                "hw.device": "cuda",
                "hw.device_name": first["name"],
                "hw.device_count": str(len(gpus)),
                "hw.mem_gib": first["mem_gib"],
                "hw.sm_clock_mhz": first["sm_clock_mhz"],
                "hw.compute_capability": first["compute_capability"],
            }
        )
        if len({g["name"] for g in gpus}) > 1:
            tags["hw.device_names"] = ";".join(g["name"] for g in gpus)
    else:
        mem = parse_mem_total_gib(_read("/proc/meminfo"))
        tags.update(
            {
                "hw.device": "cpu",
                "hw.device_name": cpu_model,
                "hw.device_count": str(cores),
                "hw.mem_gib": "" if mem is None else f"{mem:.1f}",
            }
        )
    return {k: v for k, v in tags.items() if v != ""}


def _device_name(device: str) -> str:
    """The name a calibration is cached under: the first visible GPU's, or the CPU model."""
    if device == "cuda":
        gpus = detect_gpus()
        if gpus:
            return gpus[0]["name"]
    return parse_cpu_model(_read("/proc/cpuinfo"))


if __name__ == "__main__":
    print(resolve_hardware({"name": "auto", "device": "auto"}, Path("conf")))
    print(json.dumps(detect_tags(), indent=1))
