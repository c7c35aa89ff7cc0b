"""The gateway templates (``gateway-error-rate``, ``gateway-traffic-share``) and measure() against
a REAL Prometheus scraping one gateway that exposes its request counters the way Traefik, Istio
and kgateway name them (docs/metrics.md, "The gateway's view").

Per scrape the fake gateway routes 100 requests of rollout ``chat`` in ``prod``: 20 to the canary
(3 of them answered 502/503: connection failures) and 80 to the stable (all 200).  Decoys a loose
selector would pick up: a rollout ``chat-abc`` and the same Service in namespace ``staging``, all
5xx, and a Traefik backend of another provider (``@kubernetescrd``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from tests.integration.fake_vllm_exporter import LoopbackServer, send_metrics

from inference_rollout.api.spec import MetricSpec
from inference_rollout.core.types import Measurement
from inference_rollout.metrics import PrometheusSource, measure

pytestmark = pytest.mark.integration

NS, ROLLOUT = "prod", "chat"
CANARY, STABLE = "7d9f8c6b5a", "0123456789"
WINDOW_S = 8
PORT = 8000

#: (namespace, service, code) -> requests per scrape
TRAFFIC: dict[tuple[str, str, str], int] = {
    (NS, f"chat-{CANARY}", "200"): 17, (NS, f"chat-{CANARY}", "502"): 2,
    (NS, f"chat-{CANARY}", "503"): 1, (NS, f"chat-{STABLE}", "200"): 80,
    # decoys
    (NS, f"chat-abc-{CANARY}", "500"): 50, ("staging", f"chat-{CANARY}", "503"): 50,
}


def series(ns: str, svc: str, code: str) -> list[str]:
    """The same requests as each implementation counts them."""
    return [
        # Traefik v3.7's name: the router's, then the backend's (tests/sandbox/test_traefik.py
        # reads the real one)
        f'traefik_service_requests_total{{service="httproute-{ns}-{svc.split("-")[0]}-gw-'
        f'gateway-system-traefik-ep-web-0-c4b3ce1b812cc6cd825e-svc-{ns}-{svc}-0'
        f'@kubernetesgateway",code="{code}",method="POST",protocol="http"}}',
        f'istio_requests_total{{reporter="source",source_workload="gw",'
        f'destination_service_namespace="{ns}",destination_service_name="{svc}",'
        f'response_code="{code}"}}',
        f'envoy_cluster_upstream_rq{{envoy_cluster_name="kube_{ns}_{svc}_{PORT}",'
        f'envoy_response_code="{code}"}}',
    ]


class FakeGateway(LoopbackServer):
    """Serves /metrics on 127.0.0.1; each scrape first routes one tick of :data:`TRAFFIC`."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with gateway.lock:
                    for (ns, svc, code), n in TRAFFIC.items():
                        for s in series(ns, svc, code):
                            gateway.counts[s] += n
                    # a backend of another Traefik provider, same name: never ours
                    gateway.counts[f'traefik_service_requests_total{{service="prod-chat-{CANARY}'
                                   f'-{PORT}@kubernetescrd",code="500"}}'] += 50
                    body = "".join(f"{k} {v}\n" for k, v in gateway.counts.items()).encode()
                send_metrics(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@pytest.fixture(scope="module")
def prom_url(prometheus: Any) -> Iterator[str]:
    with FakeGateway() as gateway:
        port = gateway.port
        server = prometheus([{"job_name": "gateway",
                              "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
                            scrape_interval="1s")
        server.wait_for_targets(1)
        server.wait_until('count_over_time(up{job="gateway"}[1m])',
                          lambda r: bool(r) and float(r[0]["value"][1]) >= WINDOW_S + 2)
        yield server.url
        server.stop()


def run(url: str, metrics: list[MetricSpec], **kw: Any) -> dict[str, Measurement]:
    async def go() -> dict[str, Measurement]:
        async with PrometheusSource(url, timeout_s=5.0) as source:
            return await measure(source, NS, ROLLOUT, CANARY, STABLE, metrics,
                                 interval_s=WINDOW_S, default_min_samples=20,
                                 scrape_interval_s=1.0, **kw)

    return asyncio.run(go())


GATEWAYS = ("traefik", "istio", "kgateway")


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_gateway_error_rate_counts_the_canarys_5xx_and_only_its(prom_url: str,
                                                                gateway: str) -> None:
    m = MetricSpec.model_validate({"name": "e", "template": "gateway-error-rate",
                                   "gateway": gateway, "maxRatioToStable": 2})
    got = run(prom_url, [m])["e"]
    assert got.error is None, got
    assert got.value == pytest.approx(0.15, rel=1e-3)  # 3 of 20
    assert got.stable_value == 0.0  # no 5xx series for the stable: 0, not no data
    assert got.samples is not None and got.samples == pytest.approx(20 * WINDOW_S, rel=0.3)


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_gateway_error_rate_counts_for_the_sequential_test(prom_url: str, gateway: str) -> None:
    import time

    m = MetricSpec.model_validate({"name": "e", "template": "gateway-error-rate",
                                   "gateway": gateway, "max": 0.01})
    got = run(prom_url, [m], since=time.time() - WINDOW_S)["e"]
    ev = got.evidence
    assert ev is not None and ev.requests is not None and ev.errors is not None, got
    assert ev.errors / ev.requests == pytest.approx(0.15, rel=1e-3)


@pytest.mark.parametrize(("gateway", "weight", "points"),
                         [(g, w, p) for g in GATEWAYS for w, p in ((20, 0.0), (5, 15.0))])
def test_traffic_share_is_the_distance_from_the_weight(prom_url: str, gateway: str,
                                                       weight: int, points: float) -> None:
    import time

    m = MetricSpec.model_validate({"name": "s", "template": "gateway-traffic-share",
                                   "gateway": gateway, "max": 2})
    got = run(prom_url, [m], weight=weight, weight_since=time.time() - 60)["s"]
    assert got.error is None, got
    assert got.value == pytest.approx(points, abs=1e-6)  # 20 of 100 went to the canary
    assert got.samples == pytest.approx(100 * WINDOW_S, rel=0.3)  # the rollout's, no decoys
