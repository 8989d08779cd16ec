"""Files a job dir holds, written so that a reader (the orchestrator polling, `distbench sync`,
a killed writer's successor) never sees half of one, and the lock that serialises their writers.

    python -c "from distbench.files import write_json_atomic; write_json_atomic('/tmp/x.json', {})"
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path | str, obj: Any) -> None:
    """Write JSON to a temporary sibling (named by this process: two writers at once never
    share it), then rename it over `path`. A write that fails (a full disk) removes the
    sibling before raising."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the block; a path that cannot
    be opened (a read-only dir) is not locked: nothing else can write there either."""
    try:
        lock = open(path, "a")  # noqa: SIM115 - held across the yield
    except OSError:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
