"""Masks secrets before anything is logged: values of keys that name a secret, and passwords
inside URIs (scheme://user:password@host). Environment variables are never logged at all.

    python -c "import distbench.tracking.secrets_mask as m; print(m.mask_tree({'token': 'x'}))"
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
SECRET_KEY = re.compile(r"(token|password|passwd|secret|api[_-]?key|credential|auth)", re.I)
URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]+:)(?P<pw>[^@\s/]+)(?=@)", re.I)


def mask_text(text: str) -> str:
    """`text` with the password of every URI in it replaced by ***."""
    return URI_PASSWORD.sub(lambda m: m.group("head") + MASK, text)


def mask_tree(tree: Any, key: str = "") -> Any:
    """A copy of a nested dict/list with secret-named keys' values and URI passwords masked."""
    if isinstance(tree, dict):
        return {k: mask_tree(v, str(k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_tree(v, key) for v in tree]
    if tree is not None and SECRET_KEY.search(key):
        return MASK
    return mask_text(tree) if isinstance(tree, str) else tree
