"""Every cache read checks what it reads: a cache file that is valid JSON but not an object
(`null`, a list, a string), truncated or binary reads as a miss, is measured again and rewritten
as an object, never raised; the equivalence reference (reference_losses.json) lives in
$DISTBENCH_CACHE_DIR like the probes' caches and heals the same way.

    pytest tests/unit/test_edges_caches.py
"""

from __future__ import annotations

import json
import math

import pytest

from distbench.cli import main as distbench
from distbench.job import resolve_job
from distbench.probes import cache, calibrate, step_parts
from distbench.probes.parts import STEP_PARTS_FIELDS, is_step_parts
from distbench.workloads.train import engine_probe, equivalence
from tests.conftest import CONF_DIR, compose_config

pytestmark = pytest.mark.unit

DAMAGED = ["null", "[1, 2]", '"text"', '{"k": [1,', b"\x80\xff\x00binary"]
CACHE_FILES = (
    step_parts.CACHE_FILE,
    calibrate.CACHE_FILE,
    engine_probe.CACHE_FILE,
    equivalence.CACHE_FILE,
)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    return tmp_path


def tiny_job(*overrides: str):
    return resolve_job(compose_config(["model=tiny", "strategy=zero3", *overrides]), CONF_DIR)


def write(path, content: str | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


@pytest.mark.parametrize("content", DAMAGED)
def test_a_damaged_cache_file_is_a_miss_and_is_rewritten_as_an_object(cache_dir, content):
    job = tiny_job()
    model = job.model
    keys = {
        step_parts.CACHE_FILE: step_parts.cache_key("test-cpu", "fp32", model, 1, 32, 1),
        equivalence.CACHE_FILE: equivalence.reference_key(job),
    }
    for name in CACHE_FILES:
        write(cache_dir / name, content)
    # each reader, as the probes and the equivalence check call it: a miss, not an error
    parts_key = keys[step_parts.CACHE_FILE]
    assert cache.cached_entry(step_parts.CACHE_FILE, parts_key, is_step_parts) is None
    assert calibrate.cached_peak("test-cpu", "fp32", 1) is None
    assert engine_probe.cached_probe(job, "test-cpu", 1) is None
    reference_key = keys[equivalence.CACHE_FILE]
    is_reference = equivalence.is_reference
    assert cache.cached_entry(equivalence.CACHE_FILE, reference_key, is_reference) is None
    # what a new measurement writes replaces the damaged file with an object
    parts = {field: 0.25 for field in STEP_PARTS_FIELDS}
    got = cache.cached(step_parts.CACHE_FILE, parts_key, lambda: parts)
    assert got["cached"] is False
    calibrate.store_peak("test-cpu", "fp32", 1, {"tflops": 1.5})
    cache.store(equivalence.CACHE_FILE, reference_key, 10.5)
    for name in (step_parts.CACHE_FILE, calibrate.CACHE_FILE, equivalence.CACHE_FILE):
        assert isinstance(json.loads((cache_dir / name).read_text()), dict), name
    assert calibrate.cached_peak("test-cpu", "fp32", 1) == 1.5
    assert equivalence.reference_loss(job, cache_dir / "no-job-dir") == 10.5


def test_the_equivalence_reference_is_read_from_distbench_cache_dir(cache_dir):
    """A reference cached there is used as is: no subprocess (the job dir does not exist, so
    computing it would fail). A damaged entry is not a reference."""
    job = tiny_job()
    key = equivalence.reference_key(job)
    (cache_dir / "reference_losses.json").write_text(json.dumps({key: 10.25}))
    assert equivalence.reference_loss(job, cache_dir / "no-job-dir") == 10.25
    for damaged in (None, "10.25", True, float("nan"), [10.25]):
        assert not equivalence.is_reference(damaged)


def test_a_non_finite_first_step_loss_is_never_equivalent(cache_dir):
    job = tiny_job()
    _, tags = equivalence.check(job, math.nan, 1e6, cache_dir / "no-job-dir")
    assert tags["equivalent"] == "false"


def test_resolve_reads_null_caches_as_misses(cache_dir, capsys):
    """The N9 case: `null` in every cache file was an AttributeError in every run's precheck."""
    for name in CACHE_FILES:
        (cache_dir / name).write_text("null")
    args = [
        "resolve",
        "model=tiny",
        "hardware.time_source=measured",
        "hardware.peak_source=measured",
    ]
    assert distbench(args) == 0
    out = capsys.readouterr().out
    assert "# distbench resolve" in out and "time_source: efficiency" in out
