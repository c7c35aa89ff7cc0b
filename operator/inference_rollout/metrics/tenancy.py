"""What one tenant's rollout may make the operator do with Prometheus (docs/security.md).

Two operator settings, both secure by default (issue 29), each with an explicit opt-out for a
single-team cluster:

* ``--prometheus-allow URL`` (repeatable): the Prometheus addresses rollouts may name; none by
  default, ``--prometheus-allow-any`` to allow any.  An address outside the list is never
  contacted -- no request, so no bearer token read from the tenant's Secret leaves the operator
  and no reply text reaches a status -- and every metric measures as a ``BadQuery`` error naming
  the setting, which never passes a release.
* ``--confine-queries`` (on; ``--no-confine-queries`` to turn it off): every query is confined to
  the rollout's namespace (:mod:`.confine`) before it is sent.  The ``gateway-*`` templates are
  the exception (:func:`unconfined`): the gateway's series carry the gateway's namespace.

An allow-list entry is a base URL: scheme, host and port must be equal (the default port of the
scheme when none is written) and the address's path must be the entry's path or below it, on a
``/`` boundary.  URLs are compared parsed, never as string prefixes, so the entry
``http://prometheus`` does not allow ``http://prometheus.evil.example``.  The comparison lives in
:mod:`inference_rollout.addresses`, shared with the notifications' ``--notify-allow``.
"""

from __future__ import annotations

from ..addresses import address_allowed as address_allowed  # re-exported: the reconciler
from ..addresses import check_allow_list as check_allow_list  # and __main__ import them here
from ..bounded_http import sanitize
from .confine import ConfinementError, confine
from .source import BadQuery, MetricQueryError, MetricSource


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


def unconfined(source: MetricSource) -> MetricSource:
    """The same Prometheus (allow-list and token included) without namespace confinement, for
    the operator's own ``gateway-*`` queries: a gateway's request counters are labelled with the
    gateway's namespace, so confining them to the rollout's reads nothing. They select only the
    rollout's own Services, by names the CRD and the model validate (DNS-1123, hex revisions)."""
    return source.source if isinstance(source, NamespaceConfined) else source


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
