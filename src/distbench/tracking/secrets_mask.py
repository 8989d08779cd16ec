"""Masks secrets before anything is logged: values of keys that name a secret, and passwords
inside URIs (scheme://user:password@host). Environment variables are never logged at all.

    python -c "import distbench.tracking.secrets_mask as m; print(m.mask_tree({'token': 'x'}))"
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
SECRET_KEY = re.compile(r"(token|password|passwd|secret|api[_-]?key|credential|auth)", re.I)
# scheme://user:password@host: the password runs to the last @ before the host (a password may
# hold an @ or a :), the host to the first /, ?, #, quote or space.
URI_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s'\"]*:)(?P<pw>[^\s/?#'\"]*)(?=@[^@\s/?#'\"]*(?:[/?#\s'\"]|$))",
    re.I,
)
# A secret-named key inside an inline dict of an override: +creds={password: x, user: y}
INLINE_SECRET = re.compile(
    r"(?P<head>\b[\w.-]*" + SECRET_KEY.pattern + r"[\w.-]*\s*[:=]\s*)(?P<value>[^,}\]\s]+)", re.I
)


def mask_text(text: str) -> str:
    """`text` with the password of every URI in it replaced by ***."""
    return URI_PASSWORD.sub(lambda m: m.group("head") + MASK, text)


def mask_override(override: str) -> str:
    """A Hydra override (`+tracking.api_token=abc`, `db.uri=postgresql://u:pw@h/db`) as it may
    be logged: the value of a secret-named key, secret keys of an inline dict and URI passwords
    masked."""
    key, sep, value = override.partition("=")
    if sep and SECRET_KEY.search(key.lstrip("+~").rsplit(".", 1)[-1]):
        return f"{key}={MASK}"
    if sep:
        value = INLINE_SECRET.sub(lambda m: m.group("head") + MASK, value)
    return mask_text(f"{key}{sep}{value}")


def mask_tree(tree: Any, key: str = "") -> Any:
    """A copy of a nested dict/list with secret-named keys' values and URI passwords masked."""
    if isinstance(tree, dict):
        return {k: mask_tree(v, str(k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_tree(v, key) for v in tree]
    if tree is not None and SECRET_KEY.search(key):
        return MASK
    return mask_text(tree) if isinstance(tree, str) else tree
