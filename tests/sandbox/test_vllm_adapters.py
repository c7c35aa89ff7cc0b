"""The LoRA adapter client (workloads/lora.py) against a real llm-d-inference-sim (the sandbox's
model server, which implements vLLM's runtime load/unload endpoints and lists adapters in
/v1/models as vLLM does: ``parent`` the base model, ``root`` the path), then the answers a real
vLLM gives that the simulator does not (400 "already been loaded" from a vLLM without
``load_inplace``; a refused source) from a scripted transport.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from inference_rollout.workloads.lora import AdapterCallError, PodServer, VLLMAdapters
from irsandbox import faultproxy
from irsandbox.common import free_port, simulator


@pytest.fixture()
def sim() -> Iterator[PodServer]:
    lora = json.dumps({"name": "support", "path": "/adapters/support/v1"})
    with simulator("--max-loras=2", "--lora-modules", lora) as url:
        host, _, port = url.removeprefix("http://").rpartition(":")
        yield PodServer(host, int(port))


def chat(pod: PodServer, model: str) -> int:
    return httpx.post(f"{pod.url}/v1/chat/completions", timeout=10, json={
        "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    ).status_code


def test_a_real_server_lists_loads_in_place_and_unloads(sim: PodServer) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient() as client:
            lora = VLLMAdapters(client)
            # the adapter named at start, not the base model
            assert await lora.loaded(sim) == {"support": "/adapters/support/v1"}
            # a new version under the same name: clients keep asking for "support"
            await lora.load(sim, "support", "/adapters/support/v2")
            await lora.load(sim, "code", "/adapters/code/v1")
            assert await lora.loaded(sim) == {"support": "/adapters/support/v2",
                                              "code": "/adapters/code/v1"}
            assert chat(sim, "support") == 200
            await lora.unload(sim, "support")
            assert await lora.loaded(sim) == {"code": "/adapters/code/v1"}
            assert chat(sim, "support") == 404  # gone: not found, never another version
    asyncio.run(scenario())


def test_a_real_server_counts_its_requests_in_flight_for_the_drain() -> None:
    """``in_flight`` (what an adapter drain waits on) from a real simulator's ``/metrics``:
    two slow requests on a one-seat server are 2 (one running, one waiting), then 1, then 0."""
    with simulator("--max-num-seqs=1", "--time-to-first-token=2s") as url:
        host, _, port = url.removeprefix("http://").rpartition(":")
        pod = PodServer(host, int(port))

        async def scenario() -> list[int | None]:
            async with httpx.AsyncClient() as client:
                lora = VLLMAdapters(client)
                seen = [await lora.in_flight(pod)]
                slow = [asyncio.create_task(client.post(
                    f"{url}/v1/chat/completions", timeout=20, json={
                        "model": "m", "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}]})) for _ in range(2)]
                while not all(t.done() for t in slow):
                    await asyncio.sleep(0.25)
                    seen.append(await lora.in_flight(pod))
                assert [t.result().status_code for t in slow] == [200, 200]
                seen.append(await lora.in_flight(pod))
                return seen

        seen = asyncio.run(scenario())
    assert seen[0] == 0 and seen[-1] == 0, seen
    assert 2 in seen and 1 in seen, seen  # both counted, then the second alone
    assert None not in seen, seen


def test_in_flight_is_none_when_the_page_does_not_count_requests() -> None:
    """A ``/metrics`` without the gauges, or no answer: unknown (the least drain), never 0."""
    pages = {"/metrics": "# TYPE other gauge\nother 1\n"}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=pages[request.url.path])

    async def scenario() -> tuple[int | None, int | None]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            without = await VLLMAdapters(client).in_flight(PodServer("10.0.0.1", 8000))
        async with httpx.AsyncClient() as client:
            closed = await VLLMAdapters(client).in_flight(PodServer("127.0.0.1", free_port()))
        return without, closed

    assert asyncio.run(scenario()) == (None, None)


def test_a_pod_that_does_not_answer_is_unreachable() -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient() as client:
            with pytest.raises(AdapterCallError) as e:
                await VLLMAdapters(client).loaded(PodServer("127.0.0.1", free_port()))
            assert e.value.kind == "unreachable"
    asyncio.run(scenario())


class ScriptedVLLM:
    """A vLLM that has no ``load_inplace`` (it answers 400 for a loaded name, as vLLM < 0.11
    does), and refuses one source."""

    def __init__(self) -> None:
        self.loaded: dict[str, str] = {"support": "/v1"}
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.calls.append(f"{request.url.path} {body.get('lora_name', '')}")
        if request.url.path == "/v1/models":
            data = [{"id": "base", "root": "base", "parent": None}] + [
                {"id": k, "root": v, "parent": "base"} for k, v in self.loaded.items()]
            return httpx.Response(200, json={"object": "list", "data": data})
        name = body["lora_name"]
        if request.url.path == "/v1/unload_lora_adapter":
            if self.loaded.pop(name, None) is None:
                return httpx.Response(404, text=f"The lora adapter '{name}' cannot be found.")
            return httpx.Response(200, text="Success")
        if body["lora_path"].startswith("s3://no-such-bucket"):
            return httpx.Response(400, text="Loading lora failed: No adapter found for s3://…")
        if name in self.loaded:
            return httpx.Response(400, text=f"The lora adapter '{name}' has already been loaded.")
        self.loaded[name] = body["lora_path"]
        return httpx.Response(200, text="Success")


def test_a_server_without_load_inplace_is_unloaded_then_loaded_and_a_bad_source_refused(
) -> None:
    vllm = ScriptedVLLM()
    pod = PodServer("10.244.0.7", 8000)

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(vllm)) as client:
            lora = VLLMAdapters(client)
            await lora.load(pod, "support", "/v2")
            assert vllm.loaded == {"support": "/v2"}
            assert vllm.calls == ["/v1/load_lora_adapter support",
                                  "/v1/unload_lora_adapter support",
                                  "/v1/load_lora_adapter support"]
            with pytest.raises(AdapterCallError) as e:
                await lora.load(pod, "code", "s3://no-such-bucket/code")
            assert e.value.kind == "refused" and "HTTP 400" in e.value.detail
            assert await lora.loaded(pod) == {"support": "/v2"}
    asyncio.run(scenario())


def test_an_answer_that_is_not_vllms_is_malformed() -> None:
    def odd(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>gateway login</html>")

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(odd)) as client:
            with pytest.raises(AdapterCallError) as e:
                await VLLMAdapters(client).loaded(PodServer("::1", 8000))
            assert e.value.kind == "malformed"
    asyncio.run(scenario())
    assert PodServer("::1", 8000).url == "http://[::1]:8000"


def test_the_sandbox_shim_makes_one_adapter_version_bad_and_a_plain_reload_heals_it(
        sim: PodServer) -> None:
    """The sandbox's "bad adapter" (irsandbox.faultproxy, item 3): a source with
    ``sim-failure-rate`` / ``sim-ttft-ms`` in its query fails or slows requests to that adapter's
    name only, on a running pod; loading the name again from a plain source heals it."""
    from aiohttp import web

    async def scenario() -> None:
        app = web.Application()
        faultproxy.add_routes(app, faultproxy.FaultProxy(sim.url, 0, "ns/pod-0"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        pod = PodServer("127.0.0.1", port)
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                lora = VLLMAdapters(client)

                async def ask(model: str) -> tuple[int, float]:
                    began = time.monotonic()
                    r = await client.post(f"{pod.url}/v1/chat/completions", json={
                        "model": model, "max_tokens": 4,
                        "messages": [{"role": "user", "content": "hi"}]})
                    return r.status_code, time.monotonic() - began

                await lora.load(pod, "support", "/adapters/support/v2?sim-failure-rate=50")
                statuses = [(await ask("support"))[0] for _ in range(10)]
                assert statuses.count(503) == 5 and statuses.count(200) == 5, statuses
                assert [(await ask("m"))[0] for _ in range(5)] == [200] * 5
                await lora.load(pod, "support", "/adapters/support/v3?sim-ttft-ms=300")
                status, took = await ask("support")
                assert status == 200 and took >= 0.3, (status, took)
                assert (await ask("m"))[1] < 0.3
                await lora.load(pod, "support", "/adapters/support/v4")
                assert [(await ask("support"))[0] for _ in range(5)] == [200] * 5
                # the simulator holds the source as given: the pod says which version it serves
                assert await lora.loaded(pod) == {"support": "/adapters/support/v4"}
        finally:
            await runner.cleanup()
    asyncio.run(scenario())
