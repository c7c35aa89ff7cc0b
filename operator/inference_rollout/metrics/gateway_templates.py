"""The gateway's view of a revision: built-in templates over the gateway's own request counters.

vLLM's metrics are the engine's view: when a canary's pods die its series vanish, and the 5xx
users get at the gateway (connection refused, no ready endpoint, upstream reset) are counted by
nobody.  The gateway counts every request it routed to a backend, with the status it answered.
Two templates read those counters (docs/metrics.md, "The gateway's view"):

* ``gateway-error-rate``: the share of the revision's requests the gateway answered 5xx
  (connection failures included: the gateway answers them 502/503/504 itself);
* ``gateway-traffic-share``: how far, in percentage points, the share of the rollout's requests
  the gateway really sent to the canary is from the weight written to the route.

Every implementation names backends and labels differently; ``metric.gateway`` picks one of
:data:`GATEWAYS`.  A backend is always selected by its Service (``<rollout>-<revision>``, in the
rollout's namespace): the label values are escaped like every other selector (:mod:`.promql`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..api import HASH_LENGTH
from .promql import Revision, counted_increase, quote, regex_escape

GATEWAY_ERROR_RATE = "gateway-error-rate"
GATEWAY_TRAFFIC_SHARE = "gateway-traffic-share"
GATEWAY_TEMPLATES = (GATEWAY_ERROR_RATE, GATEWAY_TRAFFIC_SHARE)
DEFAULT_GATEWAY = "traefik"

#: A revision's hash in a regex: exactly HASH_LENGTH hex characters (never a '-'), so rollout
#: ``chat`` never selects the backends of a rollout named ``chat-abc``.
_HASH = f"[0-9a-f]{{{HASH_LENGTH}}}"


def _traefik_name(text: str) -> str:
    """Traefik's ``provider.Normalize``: runs of characters other than letters and digits become
    one ``-``."""
    return "-".join(part for part in re.split(r"[^0-9A-Za-z]+", text) if part)


@dataclass(frozen=True)
class Gateway:
    """Where one implementation counts the requests it routed to a backend."""

    metric: str  # a counter with one series per backend and response code
    code_label: str  # the response code's label
    #: Matchers of one revision's backend, and of every revision of the rollout.
    backend: Callable[[Revision], str]
    rollout_backends: Callable[[Revision], str]


def _traefik(rev: Revision, revision_pattern: str) -> str:
    """Traefik's Kubernetes Gateway provider names the service of an HTTPRoute's Service backend
    ``<router>-svc-<namespace>-<service>-<backend index>@kubernetesgateway``, where ``<router>`` is
    ``httproute-<namespace>-<route>-gw-<gateway ns>-<gateway>-ep-<entry point>-<rule>-<hash>``
    (v3.7: ``makeRouterName`` and ``loadService`` in ``pkg/provider/kubernetes/gateway``; seen in
    the sandbox's Traefik v3.7.13, tests/sandbox/test_traefik.py). Earlier v3 releases named it
    ``<namespace>-<service>-<port>@kubernetesgateway``; the router part is optional so both
    match. Only the leaf services are counted per backend (the weighted parent is not), so a
    revision's series are exactly its backend's."""
    ns = regex_escape(_traefik_name(rev.namespace))
    own = f"{regex_escape(_traefik_name(f'{rev.namespace}-{rev.rollout}'))}-{revision_pattern}"
    pattern = f"(httproute-{ns}-.+-svc-)?{own}-[0-9]+@kubernetesgateway"
    return f'service=~"{quote(pattern)}"'


def _istio(rev: Revision, name: str) -> str:
    # reporter="source": the proxy that sent the request (the gateway's, or a client sidecar's)
    # saw the connection failures; the destination's sidecar never sees those.
    return (f'reporter="source",destination_service_namespace="{quote(rev.namespace)}",'
            f'destination_service_name=~"{quote(name)}"')


def _kgateway(rev: Revision, name: str) -> str:
    # kgateway's Envoy cluster of a Service backend: kube_<namespace>_<service>_<port>.
    pattern = f"kube_{regex_escape(rev.namespace)}_{name}_[0-9]+"
    return f'envoy_cluster_name=~"{quote(pattern)}"'


def _own(rev: Revision) -> str:
    return regex_escape(f"{rev.rollout}-{rev.revision}")


def _all(rev: Revision) -> str:
    return f"{regex_escape(rev.rollout)}-{_HASH}"


GATEWAYS: dict[str, Gateway] = {
    "traefik": Gateway(
        "traefik_service_requests_total", "code",
        lambda rev: _traefik(rev, regex_escape(rev.revision)),
        lambda rev: _traefik(rev, _HASH)),
    "istio": Gateway(
        "istio_requests_total", "response_code",
        lambda rev: _istio(rev, _own(rev)), lambda rev: _istio(rev, _all(rev))),
    "kgateway": Gateway(
        "envoy_cluster_upstream_rq", "envoy_response_code",
        lambda rev: _kgateway(rev, _own(rev)), lambda rev: _kgateway(rev, _all(rev))),
}


def _count(g: Gateway, matchers: str, w: str) -> str:
    return f"sum(increase({g.metric}{{{matchers}}}[{w}]))"


def _counted(g: Gateway, matchers: str, w: str) -> str:
    """Requests with the one that created a series (a backend's first 5xx), as the
    ``error-rate`` template counts them (:func:`.promql.counted_increase`)."""
    return f"sum({counted_increase(g.metric, matchers, w)})"


def error_rate(gateway: str, rev: Revision, w: str) -> str:
    g = GATEWAYS[gateway]
    own, errors = g.backend(rev), f'{g.backend(rev)},{g.code_label}=~"5.."'
    total = _counted(g, own, w)
    # `or 0 * total`: no 5xx series yet is 0 where the backend has traffic, NoData where not.
    return f"({_counted(g, errors, w)} or 0 * {total}) / {total}"


def requests(gateway: str, rev: Revision, w: str) -> str:
    """Requests the gateway routed to the revision in the window (the sample guard)."""
    g = GATEWAYS[gateway]
    return _counted(g, g.backend(rev), w)


def error_counts(gateway: str, rev: Revision, w: str) -> str:
    """The Sequential rule's counts, as the ``error-rate`` template's HTTP view (``part``)."""
    g = GATEWAYS[gateway]
    own = g.backend(rev)
    errors = f'{own},{g.code_label}=~"5.."'
    return (f'label_replace({_counted(g, errors, w)}, "part", "http_errors", "", "") or '
            f'label_replace({_counted(g, own, w)}, "part", "http_requests", "", "")')


def traffic_share_error(gateway: str, rev: Revision, w: str, weight: int) -> str:
    """Percentage points between the canary's share of the rollout's requests at the gateway
    and ``weight``."""
    g = GATEWAYS[gateway]
    total = _count(g, g.rollout_backends(rev), w)
    # A canary the gateway sent nothing to has no series: its share is 0, not "no data".
    return f"abs(100 * ({_count(g, g.backend(rev), w)} or 0 * {total}) / {total} - {weight})"


def rollout_requests(gateway: str, rev: Revision, w: str) -> str:
    """Requests the gateway routed to any revision of the rollout (the share's sample guard)."""
    g = GATEWAYS[gateway]
    return _count(g, g.rollout_backends(rev), w)
