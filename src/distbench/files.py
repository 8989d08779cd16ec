"""Files a job dir holds, written so that a reader (the orchestrator polling, `distbench sync`,
a killed writer's successor) never sees half of one.

    python -c "from distbench.files import write_json_atomic; write_json_atomic('/tmp/x.json', {})"
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path | str, obj: Any) -> None:
    """Write JSON to a temporary sibling, then rename it over `path`."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)
