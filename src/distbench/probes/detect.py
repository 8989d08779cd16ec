"""What this machine is: its GPUs (pynvml when installed, else `nvidia-smi`; never torch), its
CPU and memory (/proc), the cores this process may use, and the name a measurement is cached
under. Cheap, and cached where it asks a subprocess: a plan --search resolves hundreds of jobs.

`detect_tags()` names the machine for MLflow (`hw.*` tags); `gpu_names()` is what
`hardware=auto` resolves from (compose/hardware.py).

    python -m distbench.probes.detect   # this machine's hw.* tags
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

NVIDIA_SMI_QUERY = "name,memory.total,clocks.max.sm,compute_cap"


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
    return _visible([n.strip() for n in out.splitlines() if n.strip()])


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


def device_name(device: str) -> str:
    """The name a measurement is cached under: the first visible GPU's, or the CPU model."""
    if device == "cuda":
        gpus = detect_gpus()
        if gpus:
            return gpus[0]["name"]
    return parse_cpu_model(_read("/proc/cpuinfo"))


def num_cpu_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    print(json.dumps(detect_tags(), indent=1))
