"""vLLM's HTTP metrics on the sandbox: every pod's shim counts the responses it serves as
``http_requests_total{handler, method, status="2xx"|"5xx"}`` (prometheus-fastapi-instrumentator's
names in a real vLLM server), and the real Prometheus scrapes them, merged with the simulator's
own metrics, under the pod's one target."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from irsandbox import manifests
from irsandbox.common import wait_for
from irsandbox.loadgen import LoadReport, run_load
from irsandbox.podspec import LABEL_REVISION

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(240)]

CHAT = "/v1/chat/completions"


def test_injected_failures_are_http_5xx_in_prometheus(kit, namespace):
    """A pod with failure-rate 30 and a healthy one, 50/50 behind the gateway, ~200 requests
    (half streamed): Prometheus' 5xx ratio for the failing pod is about 0.3, for the healthy one
    0, and each pod's counters in Prometheus equal what the clients saw from it."""
    host = f"chat.{namespace}.example"
    for rev, ann in (("healthy", {}), ("failing", {"sim.inference.dev/failure-rate": "30"})):
        kit.create(namespace, manifests.vllm_deployment(f"chat-{rev}", revision=rev,
                                                      annotations=ann))
        kit.create(namespace, manifests.service(f"chat-{rev}", "chat", rev))
    kit.create(namespace, manifests.httproute(
        "chat", [("chat-healthy", 50), ("chat-failing", 50)], [host]))
    pods = {}
    for rev in ("healthy", "failing"):
        (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}={rev}", 1)
        pods[rev] = key.split("/", 1)[1]
    kit.wait_programmed(namespace, "chat", {"chat-healthy": 1, "chat-failing": 1})
    endpoints = kit.endpoints()
    for pod in pods.values():
        ep = endpoints[f"{namespace}/{pod}"]
        # traffic and the scrape go to the shim (on the pod's own address), not to the simulator
        assert ep["shim_port"] and ep["port"] == ep["shim_port"] != ep["sim_port"], ep
        sel = f'namespace="{namespace}",pod="{pod}"'
        up = wait_for(lambda sel=sel: kit.prom(f"up{{{sel}}} == 1"), 30, f"target {sel}")
        assert up[0]["metric"]["instance"] == ep["pod_address"]

    # ~8 s of load so that several 1 s scrapes see the counters rise
    async def load() -> list[LoadReport]:
        return list(await asyncio.gather(*(
            run_load(kit.gateway_url, host=host, model="llama", rate=12, requests=100,
                     stream=stream, concurrency=16, max_tokens=8)
            for stream in (False, True))))

    reports = asyncio.run(load())
    seen: Counter[tuple[str, str]] = Counter()  # (pod, "2xx"|"5xx") as the clients saw them
    for report in reports:
        assert report.unrouted == 0
        assert set(report.errors) <= {"http_503"}, report.errors
        for r in report.results:
            seen[(r.pod.split("/", 1)[1], f"{str(r.status)[0]}xx")] += 1
    print({f"{p[:40]} {s}": n for (p, s), n in sorted(seen.items())})
    assert seen[(pods["healthy"], "5xx")] == 0
    assert 15 <= seen[(pods["failing"], "5xx")] <= 50  # 30 % of ~100, a coin per request

    for rev, pod in pods.items():
        sel = f'namespace="{namespace}",pod="{pod}"'
        # the last scrape has every response: Prometheus' counters equal the clients' counts
        for status in ("2xx", "5xx"):
            want = seen[(pod, status)]
            q = (f'sum(http_requests_total{{{sel},handler="{CHAT}",method="POST",'
                 f'status="{status}"}}) or vector(0)')
            wait_for(lambda q=q, want=want: kit.prom_value(q) == want, 20,
                             f"{q} == {want} (last {kit.prom_value(q)})")
        total = f"sum(rate(http_requests_total{{{sel}}}[1m]))"
        errors = f'sum(rate(http_requests_total{{{sel},status="5xx"}}[1m]))'
        ratio = kit.prom_value(f"({errors} or 0 * {total}) / {total}")
        print(f"{rev}: 5xx ratio in Prometheus {ratio}")
        assert ratio is not None
        if rev == "failing":
            assert 0.15 <= ratio <= 0.45, ratio
        else:
            assert ratio == 0
            assert kit.prom_value(errors) is None  # no 5xx series at all
        # the duration histogram, and the simulator's own metrics on the same target
        count = kit.prom_value(
            f'sum(http_request_duration_seconds_count{{{sel},handler="{CHAT}"}})')
        assert count == seen[(pod, "2xx")] + seen[(pod, "5xx")]
        ok = f"sum(vllm:request_success_total{{{sel}}})"
        wait_for(lambda ok=ok, pod=pod: kit.prom_value(ok) == seen[(pod, "2xx")], 10, ok)
        assert {r["metric"]["instance"] for r in kit.prom(f"vllm:num_requests_running{{{sel}}}")
                } == {endpoints[f"{namespace}/{pod}"]["pod_address"]}


def test_shim_metrics_page_has_the_simulators_metrics_and_the_http_counters(kit, namespace):
    kit.create(namespace, manifests.vllm_deployment("chat-page", revision="page"))
    (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}=page", 1)
    ep = kit.endpoints()[key]
    base = f"http://{ep['address']}"
    with httpx.Client(trust_env=False, timeout=10) as c:
        r = c.post(f"{base}{CHAT}", json={"model": "llama", "max_tokens": 4,
                                          "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        assert c.get(f"{base}/health").status_code == 200  # not counted, as in vLLM
        page = c.get(f"{base}/metrics")
        sim_page = c.get(f"http://127.0.0.1:{ep['sim_port']}/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = page.text
    assert "# TYPE vllm:request_success_total counter" in text
    assert f'http_requests_total{{handler="{CHAT}",method="POST",status="2xx"}} 1.0' in text
    assert 'handler="/health"' not in text
    assert text.count("# TYPE http_requests_total ") == 1
    # the simulator itself still has no HTTP metrics: they are the shim's
    assert "http_requests_total" not in sim_page.text
