"""The probes' cache: one JSON object per file in ~/.cache/distbench/ ($DISTBENCH_CACHE_DIR
overrides the folder), keyed by what a measurement depends on (host, device, shape, ...).

A file or an entry that is not what a probe wrote (a `null`, a list, truncated or binary text, a
damaged or older entry) reads as missing: it is measured again and the file rewritten as an
object, never raised. Each reader passes what its entry must be (`valid`). Writers hold a lock
(jobs may overlap). The train workload's equivalence reference (reference_losses.json) lives here
too.

    python -c "from distbench.probes.cache import read_cache; print(read_cache('step_parts.json'))"
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distbench.files import file_lock, write_json_atomic

CACHE_DIR_ENV = "DISTBENCH_CACHE_DIR"


def cache_dir() -> Path:
    """The folder the probes cache their figures in."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "distbench")


def read_cache(file_name: str) -> dict[str, Any]:
    """Every cached measurement of the cache folder's `file_name` by key ({} without one, or
    when the file does not hold a JSON object)."""
    try:
        cache = json.loads((cache_dir() / file_name).read_text())
    except (OSError, ValueError, RecursionError):  # missing, binary, truncated, absurdly nested
        return {}
    return cache if isinstance(cache, dict) else {}


def is_record(entry: Any) -> bool:
    """The least a cache entry is: a JSON object."""
    return isinstance(entry, dict)


def cached_entry(file_name: str, key: str, valid: Callable[[Any], bool] = is_record) -> Any:
    """The entry under `key` when `valid` accepts it, else None (measure it again)."""
    entry = read_cache(file_name).get(key)
    return entry if valid(entry) else None


def store(file_name: str, key: str, entry: Any) -> None:
    """Add one measurement (a JSON value) to the cache, under the file's lock; a file that held
    no JSON object is replaced by one."""
    path = cache_dir() / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_suffix(".lock")):
        cache = read_cache(file_name)
        cache[key] = entry
        write_json_atomic(path, dict(sorted(cache.items())))


def cached(
    file_name: str,
    key: str,
    measure_now: Callable[[], dict[str, Any]],
    force: bool = False,
    valid: Callable[[Any], bool] = is_record,
    keep: Callable[[dict[str, Any]], bool] = is_record,
) -> dict[str, Any]:
    """The figures cached under `key`, or measure_now()'s, cached when `keep` accepts them (a
    measurement the probe does not trust is returned, not kept); under the file's lock (two
    jobs of one shape measure once), with "cached" saying which."""
    path = cache_dir() / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_suffix(".lock")):
        cache = read_cache(file_name)
        if valid(cache.get(key)) and not force:
            return {**cache[key], "cached": True}
        result = measure_now()
        if keep(result):
            cache[key] = result
            write_json_atomic(path, dict(sorted(cache.items())))
    return {**result, "cached": False}
