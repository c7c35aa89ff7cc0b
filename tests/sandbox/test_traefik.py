"""Traffic through Traefik, a conformant Gateway API implementation, on the sandbox.

Traefik (built from its Go module by sandbox/build.sh, started by up.d/65-traefik.sh) serves the
Gateway gateway-system/traefik from the sandbox API server: it reads the HTTPRoutes, Services
and EndpointSlices, writes the routes' status, and sends each request to a pod's own address
(``<podIP>:8000``, where the bridge's shim listens: docs/sandbox.md, "Pods with addresses").
Nothing of ours sits between the client and the pod but the pod's shim, so these tests check
the operator's assumptions against a real gateway: the weights it splits by, the status it
reports (read with the operator's own reader), and the counters ``gateway-error-rate`` reads.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from inference_rollout.core.types import RouteApplied, RouteRejected
from inference_rollout.metrics import gateway_templates
from inference_rollout.metrics.promql import Revision
from inference_rollout.traffic.route_status import route_acceptance
from irsandbox import manifests
from irsandbox.cluster import TRAEFIK_GATEWAY, Cluster
from irsandbox.common import read_json, wait_for
from irsandbox.loadgen import LoadReport, run_load
from irsandbox.podspec import LABEL_REVISION

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]

GATEWAY_NS, GATEWAY = TRAEFIK_GATEWAY


@pytest.fixture()
def traefik(kit: Cluster) -> Cluster:
    """The sandbox, with Traefik and pods on their own addresses; fails naming what is missing."""
    if not (kit.traefik_url and kit.traefik_api_url):
        pytest.fail("no TRAEFIK_URL in .sandbox/env: this sandbox was started before Traefik "
                    "joined it; run sandbox/up.sh again "
                    "(docs/sandbox.md#gateways-traefik-and-the-nginx-translator)")
    if not kit.env.get("IR_POD_NETWORK"):
        pytest.fail("IR_POD_NETWORK is empty: this sandbox was started before its pod network "
                    "namespace existed; restart it (sandbox/down.sh && sandbox/up.sh), so "
                    "Traefik can reach pods (docs/sandbox.md#pods-with-addresses)")
    return kit


def traefik_route(ns: str, backends: list[tuple[str, int]], host: str,
                  section: str = "") -> dict[str, Any]:
    route = manifests.httproute("chat", backends, [host])  # under the sandbox's Gateway
    if section:
        route["spec"]["parentRefs"][0]["sectionName"] = section
    return route


def deploy(kit: Cluster, ns: str, weights: tuple[int, int],
           revisions: tuple[str, str] = ("stable", "canary")) -> str:
    """chat-<stable> (2 pods) and chat-<canary> (1 pod), Services of the same names, and route
    "chat" under Traefik's Gateway at ``weights``; returns the host."""
    host = f"chat.{ns}.example"
    for rev, n in zip(revisions, (2, 1), strict=True):
        kit.create(ns, manifests.vllm_deployment(f"chat-{rev}", revision=rev, replicas=n))
        kit.create(ns, manifests.service(f"chat-{rev}", "chat", rev))
    kit.create(ns, traefik_route(ns, [(f"chat-{revisions[0]}", weights[0]),
                                      (f"chat-{revisions[1]}", weights[1])], host))
    for rev, n in zip(revisions, (2, 1), strict=True):
        kit.wait_serving(ns, f"{LABEL_REVISION}={rev}", n)
    return host


def wait_served(kit: Cluster, ns: str, want: dict[str, tuple[int, int]]) -> None:
    """Until Traefik accepted the route's current generation (the operator's reader says
    RouteApplied) and runs exactly these weights and pod counts."""
    def served() -> bool:
        applied = isinstance(route_acceptance(kit.route(ns, "chat")), RouteApplied)
        return applied and kit.traefik_backends(ns, "chat") == want
    wait_for(served, 30, f"Traefik to run {want} for {ns}/chat", interval=0.2)


def load(kit: Cluster, host: str, requests: int) -> LoadReport:
    return asyncio.run(run_load(kit.traefik_url, host=host, model="llama", rate=0,
                                requests=requests, concurrency=32))


def test_traefik_programs_the_sandbox_gateway(traefik: Cluster) -> None:
    gw = traefik.custom.get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", GATEWAY_NS, "gateways", GATEWAY)
    conds = {c["type"]: c for c in gw["status"]["conditions"]}
    gen = gw["metadata"]["generation"]
    for ctype in ("Accepted", "Programmed"):
        assert conds[ctype]["status"] == "True", conds[ctype]
        assert conds[ctype]["observedGeneration"] == gen
    assert {"type": "IPAddress", "value": "127.0.0.1"} in gw["status"]["addresses"]
    cls = traefik.custom.get_cluster_custom_object(
        "gateway.networking.k8s.io", "v1", "gatewayclasses", GATEWAY)
    assert {c["type"]: c["status"] for c in cls["status"]["conditions"]}["Accepted"] == "True"


def test_weights_split_through_traefik_at_every_step(traefik: Cluster, namespace: str,
                                                     record_property: Any) -> None:
    """At 5, 20, 50 and 100 %, 2,000 requests through Traefik land on the canary within ±2
    points of the weight, each answered by a pod reached on its own address."""
    host = deploy(traefik, namespace, (100, 0))
    for weight in (5, 20, 50, 100):
        traefik.set_weights(namespace, "chat", {"chat-stable": 100 - weight,
                                                "chat-canary": weight})
        wait_served(traefik, namespace, {"chat-stable": (100 - weight, 2),
                                         "chat-canary": (weight, 1)})
        report = load(traefik, host, 2000)
        assert report.requests == 2000 and report.failed == 0, report.errors
        assert report.unrouted == 0  # every answer named its pod (the shim's X-Serving-Pod)
        share = report.share("canary")
        record_property(f"canary_share_at_{weight}", share)
        print(f"weight {weight}: canary {100 * share:.2f} % of 2000 ({report.by_pod})")
        assert abs(share - weight / 100) <= 0.02, report.by_revision
        if weight < 100:  # the stable's share is spread over its two pods
            stable = [n for p, n in report.by_pod.items() if "chat-stable" in p]
            assert len(stable) == 2 and abs(stable[0] - stable[1]) <= 0.02 * 2000


def test_a_route_traefik_refuses_is_read_as_rejected_with_its_reason(
        traefik: Cluster, namespace: str) -> None:
    """Traefik's own refusals, read by the operator's route reader: a listener the Gateway does
    not have (NoMatchingParent) and a backend Service that does not exist (BackendNotFound)."""
    traefik.create(namespace, manifests.vllm_deployment("chat-stable", revision="stable"))
    traefik.create(namespace, manifests.service("chat-stable", "chat", "stable"))
    route = traefik_route(namespace, [("chat-stable", 1)], f"chat.{namespace}.example",
                          section="no-such-listener")
    traefik.create(namespace, route)

    def verdict() -> RouteRejected | None:
        v = route_acceptance(traefik.route(namespace, "chat"))
        return v if isinstance(v, RouteRejected) else None

    no_parent = wait_for(verdict, 30, "Traefik to refuse the listener")
    assert (no_parent.condition, no_parent.reason) == ("Accepted", "NoMatchingParent")
    assert no_parent.parent == f"Gateway {GATEWAY_NS}/{GATEWAY}/no-such-listener"

    fixed = traefik.route(namespace, "chat")
    fixed["spec"]["parentRefs"][0].pop("sectionName")
    fixed["spec"]["rules"][0]["backendRefs"].append({"name": "missing", "port": 8000,
                                                     "weight": 1})
    traefik.custom.replace_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes", "chat", fixed)
    missing = wait_for(lambda: (v := verdict()) and v.reason == "BackendNotFound" and v, 30,
                       "Traefik to report the missing backend")
    assert missing.condition == "ResolvedRefs" and "missing" in missing.message


def _shim_pid(kit: Cluster, pod_key: str) -> int:
    state = read_json(kit.state / "bridge" / "state.json", {}) or {}
    for b in (state.get("backends") or {}).values():
        if f"{b.get('namespace')}/{b.get('name')}" == pod_key:
            return int(b["shim_pid"])
    raise AssertionError(f"{pod_key} not in the bridge's state")


def test_gateway_error_rate_counts_what_users_got_from_a_dead_canary(
        traefik: Cluster, namespace: str) -> None:
    """The canary pod's server dies (SIGKILL; the pod stays Ready, as before a probe notices):
    Traefik answers 502 for its share. vLLM's metrics see nothing of it; the gateway-error-rate
    template, over Traefik's counters in the sandbox Prometheus, counts exactly the 5xx the load
    generator got."""
    host = deploy(traefik, namespace, (50, 50))
    wait_served(traefik, namespace, {"chat-stable": (50, 2), "chat-canary": (50, 1)})
    canary_pod = traefik.wait_serving(namespace, f"{LABEL_REVISION}=canary", 1)[0]

    async def main() -> LoadReport:
        task = asyncio.create_task(run_load(traefik.traefik_url, host=host, model="llama",
                                            rate=40, duration=8, concurrency=16))
        await asyncio.sleep(2)
        os.kill(_shim_pid(traefik, canary_pod), signal.SIGKILL)
        return await task

    report = asyncio.run(main())
    errors = sum(n for kind, n in report.errors.items() if kind.startswith("http_5"))
    assert errors > 0 and set(report.errors) <= {"http_502", "http_503", "http_504"}, \
        report.errors
    answered = report.by_revision.get("canary", 0)
    canary = Revision(namespace, "chat", "canary")
    counts_q = gateway_templates.error_counts("traefik", canary, "10m")
    rate_q = gateway_templates.error_rate("traefik", canary, "10m")

    want = {"http_errors": errors, "http_requests": answered + errors}

    def counted() -> dict[str, float] | None:
        parts = {r["metric"].get("part"): float(r["value"][1]) for r in traefik.prom(counts_q)}
        return parts if parts == want else None

    # Traefik's counters reach Prometheus within a scrape or two of the last request (the
    # last requests finish after the last scrape the load saw: wait for both counts)
    wait_for(counted, 20, f"the canary's counts {want} in Prometheus")
    rate = traefik.prom_value(rate_q)
    assert rate == pytest.approx(errors / (answered + errors))
    print(f"canary: {answered} answered, {errors} 5xx at the gateway; gateway-error-rate "
          f"{rate:.3f}; time {time.strftime('%H:%M:%S')}")


def test_gateway_traffic_share_reads_the_split_traefik_made(traefik: Cluster,
                                                            namespace: str) -> None:
    """The traffic-share template over Traefik's counters: at 20 % the canary's share of the
    rollout's requests is 20 % (within a point), and the guard counts the rollout's requests.
    Revisions are named as the operator names them (10 hex characters), which the template's
    "every revision of the rollout" selector requires."""
    stable, canary = "a1b2c3d4e5", "f6e5d4c3b2"
    host = deploy(traefik, namespace, (80, 20), (stable, canary))
    wait_served(traefik, namespace, {f"chat-{stable}": (80, 2), f"chat-{canary}": (20, 1)})
    report = load(traefik, host, 1500)
    assert report.failed == 0 and abs(report.share(canary) - 0.20) <= 0.02, report.by_revision
    rev = Revision(namespace, "chat", canary)
    share_q = gateway_templates.traffic_share_error("traefik", rev, "5m", 20)
    total_q = gateway_templates.rollout_requests("traefik", rev, "5m")

    def settled() -> tuple[float, float] | None:
        total, points = traefik.prom_value(total_q), traefik.prom_value(share_q)
        return (total, points) if total and total >= 1000 and points is not None else None

    total, points = wait_for(settled, 20, "the rollout's requests at Traefik in Prometheus")
    print(f"gateway-traffic-share: {points:.2f} points from 20 % over {total:.0f} requests")
    assert points <= 1.0
