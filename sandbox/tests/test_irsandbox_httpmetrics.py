"""vLLM's HTTP metrics in the sandbox shim: irsandbox.httpmetrics (counting, rendering, merging
with the simulator's /metrics) and irsandbox.faultproxy serving them, against an in-process fake
simulator. No cluster."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from aioserver import echo_reply, serve

from irsandbox import faultproxy, loadgen
from irsandbox.httpmetrics import HttpMetrics, group_status, handler_of, merge

SIM_METRICS = (
    "# HELP vllm:request_success_total Count of successfully processed requests.\n"
    "# TYPE vllm:request_success_total counter\n"
    'vllm:request_success_total{finish_reason="stop",model_name="m"} 7\n'
)

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*\})? '
                     r"(\S+)$")


def parse(text: str) -> dict[str, float]:
    """A strict reading of the text format 0.0.4: every family's TYPE at most once and before its
    samples, every sample well formed and unique. Returns ``series -> value``."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    series: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, f"duplicate family {name}"
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"malformed sample line {line!r}"
        name = m.group(1)
        family = re.sub(r"_(bucket|count|sum)$", "", name)
        assert family in types or name in types, f"sample before its TYPE: {line!r}"
        key = name + (m.group(2) or "")
        assert key not in series, f"duplicate series {key}"
        series[key] = float(m.group(3))
    return series


def requests_total(series: dict[str, float], handler: str, method: str, status: str) -> float:
    return series.get(
        f'http_requests_total{{handler="{handler}",method="{method}",status="{status}"}}', 0.0)


# --- httpmetrics ---------------------------------------------------------------------------------


def test_handler_labels_as_vllm_instrumentator():
    assert handler_of("/v1/chat/completions") == "/v1/chat/completions"
    assert handler_of("/v1/completions") == "/v1/completions"
    assert handler_of("/v1/models") == "/v1/models"
    # vLLM's excluded_handlers, matched anywhere in the path (re.search)
    for path in ("/metrics", "/health", "/health/ready", "/load", "/ping", "/version",
                 "/server_info"):
        assert handler_of(path) is None, path
    # the sandbox's own control paths are not vLLM's: not counted
    for path in ("/-/shim/config", "/admin/config", "/fake_metrics"):
        assert handler_of(path) is None, path
    # a path no vLLM route matches: grouped as "none" (should_group_untemplated)
    assert handler_of("/v2/nope") == "none"


def test_status_codes_are_grouped():
    assert [group_status(c) for c in (200, 204, 400, 404, 429, 500, 502, 503)] == [
        "2xx", "2xx", "4xx", "4xx", "4xx", "5xx", "5xx", "5xx"]


def test_counts_and_histograms_render_as_prometheus_text():
    m = HttpMetrics()
    for _ in range(7):
        m.observe("/v1/chat/completions", "POST", 200, 0.05)
    m.observe("/v1/chat/completions", "POST", 200, 0.1)  # le is inclusive
    m.observe("/v1/chat/completions", "POST", 503, 0.7)
    m.observe("/v1/chat/completions", "POST", 500, 3.0)
    m.observe("/v1/models", "GET", 200, 0.001)
    s = parse(m.render())
    chat = "/v1/chat/completions"
    assert requests_total(s, chat, "POST", "2xx") == 8
    assert requests_total(s, chat, "POST", "5xx") == 2
    assert requests_total(s, "/v1/models", "GET", "2xx") == 1
    assert requests_total(s, chat, "POST", "4xx") == 0  # no series for what never happened
    b = 'http_request_duration_seconds_bucket{handler="/v1/chat/completions",method="POST",le='
    assert [s[f'{b}"{le}"}}'] for le in ("0.1", "0.5", "1.0", "+Inf")] == [8, 8, 9, 10]
    lbl = '{handler="/v1/chat/completions",method="POST"}'
    assert s[f"http_request_duration_seconds_count{lbl}"] == 10
    assert s[f"http_request_duration_seconds_sum{lbl}"] == pytest.approx(7 * 0.05 + 3.8)
    assert s['http_request_duration_highr_seconds_bucket{le="0.05"}'] == 8  # 7 + /v1/models
    assert s['http_request_duration_highr_seconds_bucket{le="+Inf"}'] == 11
    assert s["http_request_duration_highr_seconds_count"] == 11


def test_empty_metrics_still_declare_their_families():
    text = HttpMetrics().render()
    s = parse(text)
    assert "# TYPE http_requests_total counter" in text
    assert s["http_request_duration_highr_seconds_count"] == 0
    assert not any(k.startswith("http_requests_total{") for k in s)


def test_merge_appends_to_the_simulators_text():
    m = HttpMetrics()
    m.observe("/v1/completions", "POST", 503, 0.01)
    merged = merge(SIM_METRICS, m)
    assert merged.startswith(SIM_METRICS)
    s = parse(merged)
    assert s['vllm:request_success_total{finish_reason="stop",model_name="m"}'] == 7
    assert requests_total(s, "/v1/completions", "POST", "5xx") == 1
    # no trailing newline upstream: still one sample per line
    assert parse(merge(SIM_METRICS.rstrip("\n"), m)) == s
    # a family the simulator already exposes is not exposed twice
    own = ("# HELP http_requests_total x\n# TYPE http_requests_total counter\n"
           'http_requests_total{handler="/x",method="GET",status="2xx"} 1\n')
    s2 = parse(merge(own, m))
    assert s2['http_requests_total{handler="/x",method="GET",status="2xx"}'] == 1
    assert requests_total(s2, "/v1/completions", "POST", "5xx") == 0
    assert "http_request_duration_seconds_count" in merge(own, m)


# --- the shim serving them ---------------------------------------------------------------------


def fake_sim(fail_every: int = 0) -> web.Application:
    """Echoes like llm-d-inference-sim --mode echo; every ``fail_every``-th completion is answered
    503 before anything else, as the simulator's failure injection does; serves /metrics."""
    state = {"n": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state["n"] += 1
        if fail_every and state["n"] % fail_every == 0:
            return web.json_response(
                {"error": {"message": "The server is overloaded or not ready yet.",
                           "code": 503}}, status=503)
        return await echo_reply(request, body["messages"][-1]["content"])

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=SIM_METRICS, content_type="text/plain")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app


async def shim_for(upstream_url: str, rate: float = 0) -> tuple[web.AppRunner, str]:
    app = web.Application()
    faultproxy.add_routes(app, faultproxy.FaultProxy(upstream_url, rate, "ns/pod"))
    return await serve(app)


@pytest.mark.parametrize("stream", [False, True])
def test_shim_counts_every_response_it_serves(stream):
    async def main() -> tuple[loadgen.LoadReport, str, list[int]]:
        sim, sim_url = await serve(fake_sim(fail_every=5))
        shim, url = await shim_for(sim_url, rate=10)
        try:
            report = await loadgen.run_load(url, model="m", rate=0, requests=100, stream=stream,
                                            json_check=True, concurrency=8)
            async with httpx.AsyncClient(trust_env=False) as c:
                others = [(await c.get(f"{url}/health")).status_code,   # not counted (vLLM)
                          (await c.get(f"{url}/nowhere")).status_code,  # handler "none"
                          (await c.get(f"{url}/-/shim/config")).status_code]
                page = await c.get(f"{url}/metrics")
                assert page.status_code == 200
                assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
            return report, page.text, others
        finally:
            await shim.cleanup()
            await sim.cleanup()

    report, text, others = asyncio.run(main())
    assert others == [200, 404, 200]
    assert report.errors == {"http_503": 20}
    # business corruption as before: 10 % of the successful completions
    assert [c["fail"] for c in report.checks.values()] == [8]
    assert text.startswith(SIM_METRICS)
    s = parse(text)
    chat = "/v1/chat/completions"
    assert requests_total(s, chat, "POST", "2xx") == 80
    assert requests_total(s, chat, "POST", "5xx") == 20
    assert requests_total(s, "none", "GET", "4xx") == 1
    # /metrics, /health and /-/shim/config are not counted
    assert sum(v for k, v in s.items() if k.startswith("http_requests_total{")) == 101
    lbl = '{handler="/v1/chat/completions",method="POST"}'
    assert s[f"http_request_duration_seconds_count{lbl}"] == 100


def test_shim_counts_its_own_502_and_fails_the_scrape_when_the_simulator_is_gone():
    async def main() -> tuple[int, int, str]:
        sim, sim_url = await serve(fake_sim())
        shim, url = await shim_for(sim_url)
        await sim.cleanup()  # the simulator stops
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                r = await c.post(f"{url}/v1/chat/completions",
                                 json={"model": "m", "messages": [{"role": "user",
                                                                   "content": "hi"}]})
                scrape = await c.get(f"{url}/metrics")
            return r.status_code, scrape.status_code, scrape.text
        finally:
            await shim.cleanup()

    status, scrape_status, _ = asyncio.run(main())
    assert status == 502
    assert scrape_status == 502  # Prometheus: up == 0 for the pod, as for a dead vLLM server


def test_shim_counts_a_stream_cut_short_with_the_status_it_sent():
    async def main() -> str:
        async def broken(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
            request.transport.close()  # the simulator dies mid-stream
            return resp

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=SIM_METRICS)

        up = web.Application()
        up.router.add_post("/v1/chat/completions", broken)
        up.router.add_get("/metrics", metrics)
        sim, sim_url = await serve(up)
        shim, url = await shim_for(sim_url)
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                with pytest.raises(httpx.HTTPError):
                    async with c.stream("POST", f"{url}/v1/chat/completions", json={}) as r:
                        assert r.status_code == 200
                        async for _ in r.aiter_bytes():
                            pass
                await asyncio.sleep(0.05)
                return (await c.get(f"{url}/metrics")).text
        finally:
            await shim.cleanup()
            await sim.cleanup()

    s = parse(asyncio.run(main()))
    assert requests_total(s, "/v1/chat/completions", "POST", "2xx") == 1
    assert requests_total(s, "/v1/chat/completions", "POST", "5xx") == 0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def test_shim_process_serves_on_its_pod_address_and_names_the_pod_that_answered():
    """The shim as the bridge starts it: on loopback and on the pod's own address (127.0.0.2
    stands in for a pod IP: all of 127/8 is local, as the pod range is in the pod namespace),
    every forwarded answer naming pod, rollout and revision; the load generator attributes by
    them when no gateway header is there; SIGTERM ends it cleanly."""
    async def main() -> tuple[list[dict[str, str]], loadgen.LoadReport, int]:
        sim, sim_url = await serve(fake_sim())
        port, pod_port = _free_port("127.0.0.1"), _free_port("127.0.0.2")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "irsandbox.faultproxy", f"--listen-port={port}",
            f"--upstream-port={sim_url.rsplit(':', 1)[1]}", "--pod=ns/chat-b-7d9-x",
            "--rollout=chat", "--revision=b", f"--pod-address=127.0.0.2:{pod_port}",
            env={**os.environ, "PYTHONPATH": str(Path(faultproxy.__file__).parent.parent)})
        try:
            urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.2:{pod_port}"]
            headers = []
            async with httpx.AsyncClient(trust_env=False) as c:
                for url in urls:
                    for _ in range(100):
                        try:
                            r = await c.post(f"{url}/v1/chat/completions", json={
                                "model": "m", "messages": [{"role": "user", "content": "hi"}]})
                            break
                        except httpx.TransportError:
                            await asyncio.sleep(0.05)
                    assert r.status_code == 200, r.text
                    headers.append({k: r.headers.get(k, "") for k in (
                        "x-serving-pod", "x-serving-rollout", "x-serving-revision")})
            report = await loadgen.run_load(urls[1], model="m", rate=0, requests=5)
            proc.terminate()
            return headers, report, await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
            await sim.cleanup()

    headers, report, code = asyncio.run(main())
    want = {"x-serving-pod": "ns/chat-b-7d9-x", "x-serving-rollout": "chat",
            "x-serving-revision": "b"}
    assert headers == [want, want]
    assert report.by_pod == {"ns/chat-b-7d9-x": 5}
    assert code == 0


def test_shim_refuses_an_address_the_machine_does_not_own():
    r = subprocess.run(
        [sys.executable, "-m", "irsandbox.faultproxy", "--listen-port=0", "--upstream-port=1",
         "--pod-address=198.51.100.7:8000"],  # TEST-NET-2: documentation only, never local
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(Path(faultproxy.__file__).parent.parent)})
    assert r.returncode != 0
    assert "cannot listen on 198.51.100.7:8000" in r.stderr


def test_shim_waits_for_its_pod_address_to_be_free():
    """A new pod may get the IP of one whose shim is still draining: the shim binds once the
    address is free, within its patience, and gives up naming the address after it."""
    holder = faultproxy.listen_socket("127.0.0.2", 0)
    port = holder.getsockname()[1]
    threading.Timer(0.5, holder.close).start()
    t0 = time.monotonic()
    sock = faultproxy.listen_socket("127.0.0.2", port, patience=10)
    waited = time.monotonic() - t0
    sock.close()
    assert 0.4 <= waited < 10
    holder = faultproxy.listen_socket("127.0.0.2", port)
    try:
        with pytest.raises(SystemExit, match=f"cannot listen on 127.0.0.2:{port}"):
            faultproxy.listen_socket("127.0.0.2", port, patience=0.3)
    finally:
        holder.close()
