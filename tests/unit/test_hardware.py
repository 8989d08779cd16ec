"""CPU peak estimate from cpuinfo; GPU names to catalog options; auto resolves to a device."""

from __future__ import annotations

import pytest

from distbench.compose.hardware import (
    catalog_option_for,
    cpu_peak_tflops_per_core,
    resolve_hardware,
)
from tests.conftest import CONF_DIR

pytestmark = pytest.mark.unit

CPUINFO = "processor\t: 0\ncpu MHz\t\t: 2500.000\nflags\t\t: fpu sse2 avx avx2 fma {extra}\n"


def test_avx2_core_peak_is_mhz_times_32_flops():
    peaks = cpu_peak_tflops_per_core(CPUINFO.format(extra=""))
    assert peaks["fp32"] == pytest.approx(2.5e9 * 32 / 1e12)
    assert peaks["bf16"] == peaks["fp32"]


def test_avx512_bf16_core_doubles_bf16():
    peaks = cpu_peak_tflops_per_core(CPUINFO.format(extra="avx512f avx512_bf16"))
    assert peaks["fp32"] == pytest.approx(2.5e9 * 64 / 1e12)
    assert peaks["bf16"] == pytest.approx(2 * peaks["fp32"])


def test_gpu_names_map_to_catalog():
    assert catalog_option_for("NVIDIA H100 80GB HBM3") == "h100_sxm"
    assert catalog_option_for("NVIDIA A100-SXM4-80GB") == "a100_80gb"
    assert catalog_option_for("NVIDIA L4") == "l4"
    assert catalog_option_for("Tesla T4") is None


def test_cpu_option_gets_a_peak_and_a_price():
    hw = resolve_hardware(
        {"name": "cpu", "device": "cpu", "peak_tflops_fp32": None, "price_usd_per_hour": 0.0893},
        CONF_DIR,
    )
    assert hw["peak_tflops_fp32"] > 0 and hw["price_usd_per_hour"] == 0.0893


def test_auto_resolves_to_a_concrete_device():
    hw = resolve_hardware({"name": "auto", "device": "auto"}, CONF_DIR)
    assert hw["device"] in ("cpu", "cuda") and hw["name"] != "auto"
