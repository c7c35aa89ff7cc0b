"""Reading a key of a Secret or a ConfigMap in a rollout's namespace: the one place that does.

Why an adapter of its own: the reconciler decides and writes; what a Secret's bytes are (base64,
UTF-8, trailing newlines) is not its business, and three readers (the Prometheus token, the
evaluation cases, the notification endpoints) each decoded them their own way. Names arrive as
names (``paths.ns_path`` checks them); a value that does not decode is ``None``, never a guess,
and never quoted in an error (it may be a credential).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from .kube import KubeError
from .kube_protocol import ObjectReader
from .paths import ns_path


@dataclass(frozen=True)
class Missing:
    """Why a key could not be read: the object is missing or unreadable (``status`` of the API
    server's answer), or the key is absent."""

    what: str
    status: int = 0

    def __str__(self) -> str:
        return self.what


def _decoded(value: object) -> str | None:
    try:
        return base64.b64decode(value, validate=True).decode().strip()  # type: ignore[arg-type]
    except (binascii.Error, ValueError, TypeError):
        return None


async def secret_texts(kube: ObjectReader, namespace: str, name: str
                       ) -> dict[str, str | None] | Missing:
    """Every key of the Secret as text (stripped; ``None`` where it is not base64 of UTF-8
    text), in one read, or :class:`Missing` saying why there is none."""
    try:
        body = await kube.get(ns_path("", "v1", namespace, "secrets", name))
    except KubeError as e:
        return Missing(f"Secret {name}: {e.message}", e.status)
    return {str(k): _decoded(v) for k, v in (body.get("data") or {}).items()}


async def secret_text(kube: ObjectReader, namespace: str, name: str, key: str
                      ) -> str | Missing | None:
    """The key's value as text (stripped), ``None`` when it is not base64 of UTF-8 text, or
    :class:`Missing` saying why there is none."""
    texts = await secret_texts(kube, namespace, name)
    if isinstance(texts, Missing):
        return texts
    if key not in texts:
        return Missing(f"Secret {name} has no key {key!r}")
    return texts[key]


async def configmap_text(kube: ObjectReader, namespace: str, name: str, key: str) -> str | Missing:
    """The key's text, or :class:`Missing` saying why there is none."""
    try:
        body = await kube.get(ns_path("", "v1", namespace, "configmaps", name))
    except KubeError as e:
        return Missing(f"ConfigMap {name}: {e.message}", e.status)
    text = (body.get("data") or {}).get(key)
    if not isinstance(text, str):
        return Missing(f"ConfigMap {name} has no key {key!r}")
    return text
