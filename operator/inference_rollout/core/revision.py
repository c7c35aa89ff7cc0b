"""Revisions: a stable hash of the pod template, and the names derived from it.

The hash must not change when the API server re-serialises the template (key order, defaults the
operator never sees), so it is taken over canonical JSON of the template exactly as the user wrote
it in the spec.  Ten hex characters keep ``<name>-<hash>`` within DNS-label limits.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..api import HASH_LENGTH, MAX_ROLLOUT_NAME

__all__ = ["HASH_LENGTH", "MAX_ROLLOUT_NAME", "revision_name", "short_hash", "template_hash"]


def short_hash(canonical: str) -> str:
    """The operator's names for content (a revision, an adapter set, a serving version): the
    first HASH_LENGTH hex characters of its canonical text's SHA-256."""
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]


def template_hash(template: dict[str, Any]) -> str:
    return short_hash(json.dumps(template, sort_keys=True, separators=(",", ":"), default=str))


def revision_name(rollout: str, revision: str) -> str:
    """The Deployment and Service name of one revision."""
    return f"{rollout}-{revision}"
