"""The hardware catalog: which figures a job's `hardware=` option stands for.

The GPU catalog lives in conf/hardware/*.yaml (datasheet figures, prices with their source).
`resolve_hardware` fills `hardware=auto` from this machine's first visible GPU (its name, read
by probes/detect.py: pynvml or a cached `nvidia-smi` answer, never torch) and a CPU's peak from
/proc/cpuinfo. Nothing here measures: `hardware.peak_source=measured` and
`hardware.link_source=measured` are filled before launch by distbench/prepare.py, and
`hardware.time_source` by the workload's prepare hook.

    python -m distbench.compose.hardware   # what `hardware=auto` resolves to here
"""

from __future__ import annotations

from pathlib import Path

from distbench.probes.detect import gpu_names

# FP32 FLOPs per cycle per core for the widest FMA the flags show: 2 FMA pipes x lanes x 2.
FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("avx2", 32), ("avx", 16), ("sse2", 8))
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


def catalog_option_for(gpu_name: str) -> str | None:
    """The conf/hardware option for a device name from nvidia-smi, if the catalog has one."""
    return next((opt for frag, opt in GPU_CATALOG_NAMES if frag in gpu_name), None)


def resolve_hardware(hardware: dict, conf_dir: Path) -> dict:
    """Fill `hardware=auto` and CPU peaks. Returns a plain dict with every field set that can be.

    auto → the catalog entry for the first GPU (or a bare `cuda` entry with no peak when the GPU
    is not in the catalog: MFU is then not reported rather than made up), else `cpu`."""
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
    return hw


def is_this_machine(device: str, name: str, local_gpu_names: list[str] | None = None) -> bool:
    """Whether hardware (its device and catalog name) is this machine's device: a CPU entry
    always (its peak is read from this machine's /proc/cpuinfo), a GPU entry when this
    machine's first visible GPU (local_gpu_names, default gpu_names()) is that catalog entry
    (or that name, for a GPU outside the catalog)."""
    if device != "cuda":
        return True
    if local_gpu_names is None:
        local_gpu_names = gpu_names()
    if not local_gpu_names:
        return False
    local = local_gpu_names[0]
    return name in (local, catalog_option_for(local))


if __name__ == "__main__":
    print(resolve_hardware({"name": "auto", "device": "auto"}, Path("conf")))
