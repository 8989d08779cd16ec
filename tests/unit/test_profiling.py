"""The profiled step's figures: kernel time counted once, the busy share bounded.

pytest tests/unit/test_profiling.py -m unit
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from distbench.ranks.profiling import device_busy_fraction, kernel_time_us

pytestmark = pytest.mark.unit


def event(device_type, self_device_us: float, annotation: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        device_type=device_type,
        self_device_time_total=self_device_us,
        is_user_annotation=annotation,
    )


def test_an_operator_and_its_kernel_count_the_kernel_time_once():
    # aten::mm (a host-side op whose self device time is its kernel's) and the kernel itself,
    # as key_averages() lists them; a user annotation spanning both is not a kernel
    events = [
        event(DeviceType.CPU, 160.0),
        event(DeviceType.CUDA, 160.0),
        event(DeviceType.CUDA, 40.0),
        event(DeviceType.CUDA, 500.0, annotation=True),
    ]
    assert kernel_time_us(events) == 200.0


def test_the_busy_share_is_a_fraction_of_the_wall_time():
    assert device_busy_fraction(0.25, 1.0) == 0.25
    assert device_busy_fraction(2.0, 1.0) == 1.0  # overlapping streams: capped
    assert device_busy_fraction(0.1, 0.0) == 0.0
