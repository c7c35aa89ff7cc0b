"""What one tenant's rollout may make the operator do with Prometheus (docs/security.md).

Two operator settings, both off by default (a single-team cluster needs neither):

* ``--prometheus-allow URL`` (repeatable): the Prometheus addresses rollouts may name.  An address
  outside the list is never contacted -- no request, so no bearer token read from the tenant's
  Secret leaves the operator and no reply text reaches a status -- and every metric measures as a
  ``BadQuery`` error naming the setting, which never passes a release.
* ``--confine-queries``: every query is confined to the rollout's namespace
  (:mod:`.confine`) before it is sent.

An allow-list entry is a base URL: scheme, host and port must be equal (the default port of the
scheme when none is written) and the address's path must be the entry's path or below it, on a
``/`` boundary.  URLs are compared parsed, never as string prefixes, so the entry
``http://prometheus`` does not allow ``http://prometheus.evil.example``.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from ..bounded_http import sanitize
from .confine import ConfinementError, confine
from .source import BadQuery, MetricQueryError, MetricSource

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _parts(url: str) -> tuple[str, str, int | None, str] | None:
    """(scheme, host, port, path ending in '/'), or None for what is not an http(s) URL."""
    try:
        u = urlsplit(url.strip())
        port = u.port or _DEFAULT_PORTS.get(u.scheme.lower())
    except ValueError:
        return None
    if u.scheme.lower() not in _DEFAULT_PORTS or not u.hostname or u.query or u.fragment:
        return None
    path = u.path if u.path.endswith("/") else u.path + "/"
    return u.scheme.lower(), u.hostname.lower(), port, path


def check_allow_list(entries: Sequence[str]) -> list[str]:
    """The entries that are not base URLs (the operator refuses to start with them)."""
    return [e for e in entries if _parts(e) is None]


def address_allowed(address: str, allowed: Sequence[str]) -> bool:
    """Whether ``address`` is one of ``allowed`` or below one of them (see the module doc)."""
    target = _parts(address)
    if target is None:
        return False
    for entry in allowed:
        base = _parts(entry)
        if base is not None and base[:3] == target[:3] and target[3].startswith(base[3]):
            return True
    return False


class FailingSource:
    """A source whose every query fails with ``error`` and is sent nowhere: an address outside
    the allow-list (:func:`refused`), or a token that cannot be read."""

    def __init__(self, error: MetricQueryError) -> None:
        self.error = error

    async def query(self, promql: str, at: float | None = None) -> float:
        raise type(self.error)(self.error.message)

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        raise type(self.error)(self.error.message)


def refused(address: str) -> FailingSource:
    """The source of an address outside the allow-list: every metric a ``BadQuery``."""
    return FailingSource(BadQuery(
        f"Prometheus address {sanitize(address, 200)} is not allowed by this operator "
        "(setting --prometheus-allow, chart value tenancy.prometheusAllow): ask its "
        "administrators to add it, or use an allowed Prometheus"))


class NamespaceConfined:
    """``source`` with every query confined to ``namespace`` first; a query that cannot be
    confined is a ``BadQuery`` and is not sent."""

    def __init__(self, source: MetricSource, namespace: str) -> None:
        self.source = source
        self.namespace = namespace

    async def query(self, promql: str, at: float | None = None) -> float:
        return await self.source.query(self._confined(promql), at)

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        return await self.source.query_vector(self._confined(promql), label, at)

    def _confined(self, promql: str) -> str:
        try:
            return confine(promql, self.namespace)
        except ConfinementError as e:
            raise BadQuery(f"namespace confinement (setting --confine-queries): {e}") from None
