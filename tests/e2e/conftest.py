"""Every e2e test may start DeepSpeed ranks: DeepSpeed's CPU op is built first, once per session
(tests/conftest.py's `deepspeed_ops`)."""

import pytest


@pytest.fixture(autouse=True)
def _deepspeed_ops_built(deepspeed_ops) -> None:
    """Depends on the session's op build, so that no test's own time holds it."""
