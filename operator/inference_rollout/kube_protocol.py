"""What each caller needs of the Kubernetes client (:class:`~inference_rollout.kube.Kube`), as
protocols: the reconciler and the adapters are typed against these, so a stand-in API (the unit
tests') is checked for the operations it serves, and :class:`~inference_rollout.kube.Kube`
satisfies them all without naming them.

Paths are :class:`~inference_rollout.paths.ApiPath` (checked and encoded there), answers plain
dicts, and every refusal a :class:`~inference_rollout.kube.KubeError`, as in ``kube.py``.
"""

from __future__ import annotations

from typing import Any, Protocol

from .paths import ApiPath


class ObjectReader(Protocol):
    """GET of one object: the Secret and ConfigMap readers (``config_objects``, the notifier)."""

    async def get(self, path: ApiPath) -> dict[str, Any]: ...


class KubeClient(Protocol):
    """What a reconcile does with the API server (``reconciler.Deps``), the route and revision
    adapters it composes included."""

    async def get(self, path: ApiPath, params: dict[str, str] | None = None) -> dict[str, Any]: ...

    async def get_or_none(self, path: ApiPath) -> dict[str, Any] | None: ...

    async def create(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]: ...

    async def merge_patch(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]: ...

    async def apply(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]: ...

    async def delete(self, path: ApiPath) -> None: ...


class LeaseClient(Protocol):
    """The leader election's Lease reads and writes (``leader``)."""

    async def get_or_none(self, path: ApiPath) -> dict[str, Any] | None: ...

    async def create(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]: ...

    async def request(self, method: str, path: ApiPath, body: Any = None) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class FinalizerClient(Protocol):
    """The deletion watchdog's listing, reading and finalizer removal (``deletion_watchdog``)."""

    async def list_metadata(self, path: ApiPath) -> dict[str, Any]: ...

    async def get_or_none(self, path: ApiPath) -> dict[str, Any] | None: ...

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json") -> dict[str, Any]: ...
