"""A run's signature: a hash of what it measures, so a repeat is recognised, not rerun
(the idea of facebookresearch/dora). Keys that do not change the measurement are left out.

    python -c "from distbench.tracking.signature import run_signature; print(run_signature({'a': 1}))"
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Where results go, how long to wait, whether to resume: none of it changes what is measured.
EXCLUDED_KEYS = ("tracking", "limits", "resume", "retry_failed", "hydra")


def run_signature(config_tree: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the config (minus EXCLUDED_KEYS) as canonical JSON."""
    kept = {k: v for k, v in config_tree.items() if k not in EXCLUDED_KEYS}
    canonical = json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
