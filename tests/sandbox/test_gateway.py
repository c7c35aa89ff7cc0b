"""The sandbox's data plane: Traefik (the sandbox's Gateway API implementation) carries
load-generator traffic by the HTTPRoute's weights to pods on their own addresses: weight changes
under streaming load, per-revision latency and business metrics, a backend with no Service; and
the nginx translator, kept for InferencePool backends, balances a pool's pods.

The weights' exact split at 5/20/50/100 % and Traefik's own status and counters are in
test_traefik.py."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from irsandbox import manifests
from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.loadgen import BusinessMetrics, MetricsServer, run_load
from irsandbox.manifests import NGINX_PARENT, SIM_ANNOTATION
from irsandbox.podspec import LABEL_REVISION

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]


def sim(**behaviour: float) -> dict[str, str]:
    """Simulator annotations: ``sim(itl_ms=5)`` is ``sim.inference.dev/itl-ms: "5"``."""
    return {f"{SIM_ANNOTATION}{k.replace('_', '-')}": f"{v:g}" for k, v in behaviour.items()}


def stable_and_canary(
    kit: Cluster,
    ns: str,
    weights: tuple[int, int],
    replicas: tuple[int, int] = (2, 1),
    stable_ann: dict | None = None,
    canary_ann: dict | None = None,
) -> str:
    """Deployments chat-stable / chat-canary with Services of the same names, and HTTPRoute
    "chat" for host chat.<ns>.example splitting between them. Returns the host."""
    host = f"chat.{ns}.example"
    for rev, n, ann in (("stable", replicas[0], stable_ann), ("canary", replicas[1], canary_ann)):
        kit.create(
            ns, manifests.vllm_deployment(f"chat-{rev}", revision=rev, replicas=n, annotations=ann)
        )
        kit.create(ns, manifests.service(f"chat-{rev}", "chat", rev))
    kit.create(
        ns,
        manifests.httproute(
            "chat", [("chat-stable", weights[0]), ("chat-canary", weights[1])], [host]
        ),
    )
    for rev, n in (("stable", replicas[0]), ("canary", replicas[1])):
        kit.wait_serving(ns, f"{LABEL_REVISION}={rev}", n)
    kit.wait_programmed(ns, "chat", {"chat-stable": replicas[0], "chat-canary": replicas[1]})
    return host


def test_weight_changes_drop_no_requests(kit, namespace):
    """Streaming load at 60 req/s while the weights move 90/10 -> 50/50 -> 0/100 -> 100/0:
    every request succeeds (Traefik swaps its configuration in place), and once the last change
    is running
    the weight-0 canary gets no new request."""
    host = stable_and_canary(kit, namespace, (90, 10), replicas=(1, 1),
                             stable_ann=sim(itl_ms=5), canary_ann=sim(itl_ms=5))
    programmed: list[tuple[float, dict[str, int]]] = []
    changing: list[tuple[float, float]] = []  # (weights written, reload programmed)

    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stop = asyncio.Event()
        load = asyncio.create_task(
            run_load(kit.gateway_url, host=host, model="llama", rate=60, stop=stop, stream=True,
                     max_tokens=20, concurrency=128)
        )
        for at, w in ((2, (50, 50)), (5, (0, 100)), (8, (100, 0))):
            await asyncio.sleep(max(0.0, t0 + at - loop.time()))
            weights = {"chat-stable": w[0], "chat-canary": w[1]}
            requested = loop.time() - t0
            await asyncio.to_thread(kit.set_weights, namespace, "chat", weights)
            await asyncio.to_thread(
                kit.wait_programmed, namespace, "chat", {"chat-stable": 1, "chat-canary": 1}
            )
            programmed.append((loop.time() - t0, weights))
            changing.append((requested, loop.time() - t0))
        # Load for at least 12 s and 3 s past the last change, however slow the machine is.
        await asyncio.sleep(max(t0 + 12 - loop.time(), 3.0))
        stop.set()
        return await load

    report = asyncio.run(main())
    print(
        f"weight changes at {[round(t, 2) for t, _ in programmed]}s: {report.requests} "
        f"streamed requests, {report.failed} failed, {report.retried} retried, "
        f"{report.by_revision}"
    )
    # Each change had requests in flight through it (the test's point), however slow the
    # machine; a total count floor here failed at load 8 (415 requests at a p50 of 3.5 s).
    for begin, end in changing:
        spanning = [r for r in report.results if r.started < end and r.started + r.latency > begin]
        assert len(spanning) >= 5, (begin, end, len(spanning))
    failures = [(r.error, r.status, r.pod, round(r.started, 3), round(r.latency, 3))
                for r in report.results if r.error]
    print(f"failures (error, status, pod, started, latency): {failures}; changes {changing}")
    assert report.failed == 0, failures
    assert report.unrouted == 0
    last_change = programmed[-1][0]
    late = [r for r in report.results if r.started > last_change + 0.1]
    assert len(late) > 60
    assert {r.revision for r in late} == {"stable"}
    # and while the canary had 100 %, it got (nearly) everything
    mid = [r for r in report.results if programmed[1][0] + 0.1 < r.started < programmed[2][0] - 1]
    assert mid and sum(r.revision == "canary" for r in mid) / len(mid) > 0.98
    assert report.itl_ms["count"] > 0


def test_streaming_latency_per_revision_through_the_gateway(kit, namespace):
    host = stable_and_canary(kit, namespace, (50, 50), replicas=(1, 1),
                             stable_ann=sim(ttft_ms=20, itl_ms=2),
                             canary_ann=sim(ttft_ms=250, itl_ms=20))
    report = asyncio.run(
        run_load(kit.gateway_url, host=host, model="llama", rate=40, requests=80, stream=True,
                 max_tokens=16)
    )
    assert report.failed == 0, report.errors
    by_rev = {rev: [r for r in report.results if r.revision == rev] for rev in ("stable", "canary")}
    ttft = {rev: statistics.median(r.ttft for r in rs) for rev, rs in by_rev.items()}
    itl = {rev: statistics.median(x for r in rs for x in r.itls) for rev, rs in by_rev.items()}
    # The simulators' delays are floors (a busy machine only adds to them, to both revisions
    # alike), so the bounds are the floors and the gap between the revisions, not ceilings: a
    # ceiling here failed at load 7 on two cores (stable 0.27 s for a 20 ms TTFT).
    assert ttft["stable"] >= 0.015 and ttft["canary"] >= 0.24, ttft
    assert ttft["canary"] - ttft["stable"] >= 0.15, ttft  # configured gap: 230 ms
    # (tokens can arrive two to a read, so the stable's 2 ms ITL has no floor at the client)
    assert itl["canary"] >= 0.015, itl
    assert itl["canary"] - itl["stable"] >= 0.01, itl  # configured gap: 18 ms


def test_business_metric_per_revision_reaches_prometheus(kit, namespace):
    """A canary annotated business-fail-rate=8 fails exactly 8 % of the JSON checks; the load
    generator's counter reaches Prometheus per revision, where a business-metric query sees it."""
    host = stable_and_canary(kit, namespace, (50, 50), replicas=(1, 1),
                             canary_ann=sim(business_fail_rate=8))

    async def main():
        metrics = BusinessMetrics()
        async with MetricsServer(metrics, 0, targets_dir=kit.state / "prometheus" / "targets"):
            report = await run_load(kit.gateway_url, host=host, model="llama", rate=50,
                                    requests=400, json_check=True, metrics=metrics)
            # One query, so the counts and the total come from the same scrape (two queries
            # could straddle one, pairing ratios from before the last requests with a total
            # from after them).
            query = (f'sum by (revision, result) (loadgen_business_checks_total'
                     f'{{namespace="{namespace}"}})')

            def scraped():
                counts: dict[str, dict[str, float]] = {}
                for r in kit.prom(query):
                    m = r["metric"]
                    counts.setdefault(m["revision"], {})[m["result"]] = float(r["value"][1])
                if sum(sum(c.values()) for c in counts.values()) != 400:
                    return None
                return {rev: c.get("pass", 0.0) / sum(c.values()) for rev, c in counts.items()}

            ratios = await asyncio.to_thread(
                wait_for, scraped, 20, "loadgen counters in Prometheus"
            )
            return report, ratios

    report, ratios = asyncio.run(main())
    assert report.failed == 0
    stable, canary = report.checks["stable"], report.checks["canary"]
    n_canary = canary["pass"] + canary["fail"]
    # 50/50 (Traefik's weighted round robin: about half)
    assert abs(n_canary - 200) <= 10
    assert stable["fail"] == 0
    assert canary["fail"] == n_canary * 8 // 100  # exactly 8 %, as the fault proxy counts
    assert ratios["stable"] == 1.0
    assert ratios["canary"] == pytest.approx(canary["pass"] / n_canary)
    assert ratios["canary"] / ratios["stable"] < 0.95  # the design's "5 % below stable" rollback


def test_route_status_and_backend_without_endpoints(kit, namespace):
    """The gateway reports Accepted/ResolvedRefs per parentRef with the observed generation; a
    backendRef to a missing Service keeps its share as HTTP 500 (Gateway API semantics)."""
    host = f"chat.{namespace}.example"
    kit.create(namespace, manifests.vllm_deployment("chat-stable", revision="stable"))
    kit.create(namespace, manifests.service("chat-stable", "chat", "stable"))
    kit.create(namespace, manifests.httproute("chat", [("chat-stable", 3), ("missing", 1)], [host]))
    kit.wait_serving(namespace, f"{LABEL_REVISION}=stable", 1)
    kit.wait_programmed(namespace, "chat", {"chat-stable": 1, "missing": 0})

    def status():
        route = kit.route(namespace, "chat")
        parents = route.get("status", {}).get("parents") or []
        conds = {c["type"]: c for p in parents for c in p["conditions"]}
        gen = route["metadata"]["generation"]
        return conds if conds.get("Accepted", {}).get("observedGeneration") == gen else None

    conds = wait_for(status, 20, "route status")
    assert conds["Accepted"]["status"] == "True"
    assert conds["ResolvedRefs"]["status"] == "False"
    assert conds["ResolvedRefs"]["reason"] == "BackendNotFound"
    report = asyncio.run(
        run_load(kit.gateway_url, host=host, model="llama", rate=0, requests=400, concurrency=16)
    )
    # a quarter answered 500 by the gateway itself (no pod), the rest served by stable
    assert set(report.errors) == {"http_500"} and abs(report.errors["http_500"] - 100) <= 10
    assert set(report.by_revision) == {"stable"} and report.unrouted == report.failed


def test_inference_pool_backend(kit, namespace):
    host = f"pool.{namespace}.example"
    for rev in ("a", "b"):
        kit.create(namespace, manifests.vllm_deployment(f"chat-{rev}", revision=rev))
    kit.create(namespace, manifests.inference_pool("chat-pool", {"app": "chat"}))
    kit.create(namespace, manifests.httproute("pool", [("chat-pool", 1)], [host],
                                              kind="InferencePool", parent=NGINX_PARENT["name"],
                                              parent_namespace=""))
    for rev in ("a", "b"):
        kit.wait_serving(namespace, f"{LABEL_REVISION}={rev}", 1)
    kit.wait_programmed(namespace, "pool", {"chat-pool": 2})
    t0 = time.monotonic()
    report = asyncio.run(run_load(kit.env["NGINX_GATEWAY_URL"], host=host, model="llama",
                                  rate=0, requests=200, concurrency=8))
    # Failed once in CI (8 of 200, kinds not recorded) and never in 25 local runs: the failures
    # name their kind, status, pod and instant, so the next one explains itself.
    assert report.failed == 0, [(r.error, r.status, r.pod, round(r.started, 3))
                                for r in report.results if r.error]
    assert time.monotonic() - t0 < 30
    # evenly (a reload for other tests' changes restarts nginx's round robin: about half)
    assert set(report.by_revision) == {"a", "b"} and abs(report.by_revision["a"] - 100) <= 5
