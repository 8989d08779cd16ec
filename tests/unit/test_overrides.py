"""Overrides Hydra would refuse are named in one line before Hydra runs, inside a sweep too.

pytest tests/unit/test_overrides.py
"""

from __future__ import annotations

import pytest

from distbench.compose.overrides import refuse_overrides
from tests.conftest import CONF_DIR

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["-m", "world_size=2,nan"], "world_size=nan: Value 'nan' of type 'float' could not be"),
        (["limits.timeout_s=abc", "tracking=none"], "limits.timeout_s=abc: Value 'abc'"),
        (["tracking=none", "nosuchkey=1"], "nosuchkey=1: Key 'nosuchkey' not in 'Config'"),
        (["-m", "strategy=dp,base_strategy"], "strategy=base_strategy is not an option"),
    ],
)
def test_the_override_at_fault_is_named(argv, refusal):
    message = refuse_overrides(argv, CONF_DIR)
    assert message is not None and message.startswith(refusal) and "\n" not in message


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "gemm.m=64,128", "workload=gemm"],  # valid once its group is chosen, any order
        ["+foo=1", "strategy=zero3", "world_size=4"],
        ["-m", "world_size=range(2,5)", "strategy.name=???,dp"],  # Hydra's and the job's rules
        ["hydra.sweep.dir=it's here"],
        [],
    ],
)
def test_what_hydra_accepts_is_left_to_it(argv):
    assert refuse_overrides(argv, CONF_DIR) is None
