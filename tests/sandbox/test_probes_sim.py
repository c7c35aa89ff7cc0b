"""The operator's probes (evaluation/probes.py) against real model servers: llm-d-inference-sim
processes (streamed chat completions, TTFT and failure injection as the sandbox's pods run
them), and a server that cuts its stream after the 200, as stock Traefik does to about one
streamed answer in 3,000 (docs/traffic.md): the one failure no counter sees."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from aiohttp import web

from inference_rollout.api.spec import ProbesSpec
from inference_rollout.evaluation.probes import Probers, ProbeTarget, probe_once
from irsandbox.common import simulator

CHAT = "/v1/chat/completions"


@pytest.fixture()
def sims() -> Iterator[Callable[..., str]]:
    with contextlib.ExitStack() as stack:
        def start(ttft_ms: int = 0, failure_rate: int = 0) -> str:
            url = stack.enter_context(simulator(
                f"--time-to-first-token={ttft_ms}ms", f"--failure-injection-rate={failure_rate}",
                "--failure-types", "server_error"))
            return url + CHAT
        yield start


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_probe_times_the_first_token_and_sees_a_failure(sims: Callable[..., str]) -> None:
    spec = ProbesSpec(timeout="5s")
    slow, failing = sims(ttft_ms=300), sims(failure_rate=100)

    async def scenario() -> None:
        async with httpx.AsyncClient() as client:
            ok = await probe_once(client, slow, "m", spec, "canary")
            assert ok.ok and ok.ttft is not None and 0.3 <= ok.ttft < 2, ok
            bad = await probe_once(client, failing, "m", spec, "canary")
            assert not bad.ok and bad.problem.startswith("HTTP 5"), bad
    run(scenario())


def test_a_stream_cut_after_its_200_is_a_failed_probe() -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"content":"O"}}]}\n\n')
        request.transport.close()  # type: ignore[union-attr]
        return resp

    async def scenario() -> None:
        app = web.Application()
        app.router.add_post(CHAT, cut)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with httpx.AsyncClient() as client:
                s = await probe_once(client, f"http://127.0.0.1:{port}{CHAT}", "m",
                                     ProbesSpec(timeout="5s"), "canary")
        finally:
            await runner.cleanup()
        assert not s.ok and s.ttft is not None, s  # a token arrived, then the cut
        assert "cut" in s.problem or "RemoteProtocolError" in s.problem or "ReadError" in \
            s.problem, s
    run(scenario())


def test_probers_probe_both_sides_at_the_rate_within_the_bound_and_stop(
        sims: Callable[..., str]) -> None:
    canary, stable = sims(ttft_ms=200), sims()
    spec = ProbesSpec(ratePerSecond=5, maxRequests=10, timeout="5s")
    target = ProbeTarget("ns", "chat", "c0ffee0000", canary, stable, "m", spec)

    async def scenario() -> None:
        probers = Probers()
        try:
            running = probers.ensure(target)
            # the same canary: the same probing
            assert running is not None and probers.ensure(target) is running
            began = time.monotonic()
            while len(running.samples) < 10 and time.monotonic() - began < 10:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            assert running.sent == 10 and len(running.samples) == 10  # maxRequests
            assert running.canary_answered == sum(
                1 for s in running.samples if s.side == "canary" and s.ok) > 0
            sides = {s.side for s in running.samples}
            assert sides == {"canary", "stable"}
            slow = [s.ttft for s in running.samples if s.side == "canary"]
            fast = [s.ttft for s in running.samples if s.side == "stable"]
            assert min(slow) >= 0.2 > max(fast), (slow, fast)  # type: ignore[type-var,operator]
            # a new canary starts afresh; stop() ends it
            other = probers.ensure(ProbeTarget("ns", "chat", "0ther00000", canary, stable, "m",
                                               spec))
            assert other is not running and running.task is not None
            await asyncio.sleep(0)
            assert running.task.cancelled() or running.task.done()
            probers.stop("ns", "chat")
            assert probers.get("ns", "chat", "0ther00000") is None
        finally:
            await probers.aclose()
    run(scenario())


def test_the_operator_probes_a_bounded_number_of_rollouts() -> None:
    from inference_rollout.evaluation import probes as mod

    spec = ProbesSpec(ratePerSecond=0.05)

    async def scenario() -> None:
        probers = Probers()
        try:
            for i in range(mod.MAX_PROBING_ROLLOUTS):
                assert probers.ensure(ProbeTarget("ns", f"r{i}", "c", "http://127.0.0.1:1",
                                                  "http://127.0.0.1:1", "m", spec)) is not None
            extra = ProbeTarget("ns", "one-more", "c", "http://127.0.0.1:1",
                                "http://127.0.0.1:1", "m", spec)
            assert probers.ensure(extra) is None  # its metrics say why (not_probing)
            probers.stop("ns", "r0")
            assert probers.ensure(extra) is not None  # a slot freed by a release that ended
        finally:
            await probers.aclose()
    run(scenario())
