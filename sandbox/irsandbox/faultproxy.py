"""The shim in front of every simulator: vLLM's HTTP metrics, and the sandbox's "bad model".

The bridge starts one for every vLLM pod; traffic (the gateway's endpoint) and Prometheus' scrape
go to it, and it forwards everything to the simulator. Two jobs:

1. **HTTP metrics.** Every response it serves is counted as prometheus-fastapi-instrumentator
   counts it in a real vLLM server: ``http_requests_total{handler, method, status="2xx"|"4xx"|
   "5xx"}``, ``http_request_duration_seconds{handler, method}`` and
   ``http_request_duration_highr_seconds`` (:mod:`irsandbox.httpmetrics`). ``GET /metrics``
   fetches the simulator's own ``/metrics`` and appends these families, so a pod stays one
   scrape target. llm-d-inference-sim counts its injected failures in no metric; here a 503 it
   injects is a ``status="5xx"`` sample, as it would be on vLLM.
2. **Business failures.** For a pod with ``sim.inference.dev/business-fail-rate`` (percent), that
   share of successful chat and text completions comes back with prose before the answer
   (``Sure! Here is the JSON you asked for:`` + the model's text), as a model that has stopped
   following a "reply with JSON only" instruction does. A client that checks "the reply is the
   JSON I asked for" (``irsandbox.loadgen --json-check``) then fails exactly that share of its
   checks, while latency, status codes and the metrics stay those of a healthy server. The share
   is exact, not random: an error-diffusion counter corrupts response k when
   ``floor(k * rate / 100)`` steps up, so 8 % means 8 of every 100 responses. Rate 0 (no
   annotation) changes nothing.

3. **A bad LoRA adapter.** An adapter loaded through the shim (``POST /v1/load_lora_adapter``)
   whose source carries ``sim-failure-rate=P`` and/or ``sim-ttft-ms=T`` in its query string
   (``/adapters/support/v2?sim-failure-rate=100``) misbehaves for requests to its name only:
   P % of them (exactly, by the same error-diffusion counter) are answered 503 as the
   simulator's injected failures are, and each waits T ms before it is forwarded. The base
   model and other adapters are untouched, and loading the name again with a plain source
   heals it: a pod's adapter versions can be good or bad while the pod keeps running, which is
   what an adapter release changes (docs/adapters.md).

4. **Who answered.** Every forwarded response carries ``X-Serving-Pod`` (``namespace/name``) and,
   when the bridge knows them, ``X-Serving-Rollout`` and ``X-Serving-Revision``: set on the pod
   side, so a client can attribute an answer whatever gateway carried it (Traefik sets no such
   header; the sandbox's nginx translator adds its own ``X-Backend-*``).

It listens on ``127.0.0.1:<listen-port>`` (the nginx translator's endpoint and, today, the
Prometheus target) and, with ``--pod-address IP:PORT``, also on the pod's own address: the
address its EndpointSlice names, which a real gateway such as Traefik sends traffic to
(docs/sandbox.md, "Pods with addresses"). With ``--pod-netns NAME`` that listener is made inside
the sandbox's pod network namespace, the only place the pod range is local (:mod:`irsandbox.netns`).
SIGUSR1 closes the pod-address listener at once, and the connections made to it once their request
is answered: the bridge sends it when the pod object is gone, because KWOK hands a deleted pod's IP
to the next pod at once, and that pod's shim must be able to listen on it (and be the one a
gateway's or Prometheus' pooled connection to that address reaches) while this one still drains.

``GET /-/shim/config`` shows the rate and counters; ``POST /-/shim/config`` with
``{"business-fail-rate": 10}`` changes it (the bridge does that when the annotation changes).

    python -m irsandbox.faultproxy --listen-port 21001 --upstream-port 21000 --rate 8 --pod ns/name
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import web

from . import netns
from .httpmetrics import HttpMetrics, handler_of, merge

PREFIX = "Sure! Here is the JSON you asked for:\n"
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "content-length", "host",
}
CHECKED_PATHS = ("/v1/chat/completions", "/v1/completions")
#: How long the shim waits for its pod's address to be free (see :func:`listen_socket`).
POD_ADDRESS_PATIENCE = 30.0
#: Prometheus' text format, version 0.0.4: what the simulator serves and the shim appends to.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Corrupter:
    """Decides, response by response, which to corrupt so the share is exactly ``rate`` %."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.seen = 0
        self.corrupted = 0

    def next(self) -> bool:
        self.seen += 1
        target = int(self.seen * self.rate / 100.0 + 1e-9)
        if target > self.corrupted:
            self.corrupted += 1
            return True
        return False

    def set_rate(self, rate: float) -> None:
        # restart the sequence so the new share holds from now on
        self.rate = rate
        self.seen = 0
        self.corrupted = 0


def corrupt_choice(choice: dict[str, Any], delta: bool) -> bool:
    """Prefix the first text of a choice. Returns True if something was changed."""
    holder = choice.get("delta" if delta else "message")
    if isinstance(holder, dict) and isinstance(holder.get("content"), str):
        if delta and not holder["content"]:
            return False
        holder["content"] = PREFIX + holder["content"]
        return True
    if isinstance(choice.get("text"), str):
        if delta and not choice["text"]:
            return False
        choice["text"] = PREFIX + choice["text"]
        return True
    return False


def corrupt_body(body: bytes) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    changed = False
    for choice in doc.get("choices") or []:
        changed = corrupt_choice(choice, delta=False) or changed
    return json.dumps(doc).encode() if changed else body


def corrupt_sse_line(line: bytes) -> tuple[bytes, bool]:
    """One SSE line; corrupt its first content delta. Returns (line, changed)."""
    if not line.startswith(b"data: {"):
        return line, False
    ending = line[len(line.rstrip(b"\r\n")):]
    try:
        doc = json.loads(line[6:])
    except ValueError:
        return line, False
    for choice in doc.get("choices") or []:
        if corrupt_choice(choice, delta=True):
            return b"data: " + json.dumps(doc).encode() + ending, True
    return line, False


@dataclass(frozen=True)
class AdapterFault:
    """How requests to one adapter misbehave, from the ``sim-*`` query of its source."""

    failure_rate: float = 0.0
    ttft_ms: float = 0.0

    @staticmethod
    def of(source: str) -> AdapterFault | None:
        query = parse_qs(urlsplit(source).query)

        def number(key: str) -> float:
            try:
                return max(0.0, float(query.get(key, ["0"])[0]))
            except ValueError:
                return 0.0
        fault = AdapterFault(min(100.0, number("sim-failure-rate")), number("sim-ttft-ms"))
        return fault if fault.failure_rate or fault.ttft_ms else None


LORA_LOAD, LORA_UNLOAD = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"


class FaultProxy:
    def __init__(self, upstream: str, rate: float, pod: str = "", rollout: str = "",
                 revision: str = "") -> None:
        self.upstream = upstream.rstrip("/")
        self.corrupter = Corrupter(rate)
        self.pod = pod
        self.identity = {k: v for k, v in (("X-Serving-Pod", pod), ("X-Serving-Rollout", rollout),
                                           ("X-Serving-Revision", revision)) if v}
        self.metrics = HttpMetrics()
        self.session: aiohttp.ClientSession | None = None
        #: Adapter name → its fault and the counter that spreads its failures exactly.
        self.adapter_faults: dict[str, tuple[AdapterFault, Corrupter]] = {}

    async def start(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
        )

    async def stop(self, app: web.Application) -> None:
        if self.session:
            await self.session.close()

    async def config(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                body = await request.json()
                rate = float(body["business-fail-rate"])
                if not 0 <= rate <= 100:
                    raise ValueError(rate)
            except (ValueError, KeyError, TypeError) as e:
                return web.json_response({"error": f"bad body: {e}"}, status=400)
            self.corrupter.set_rate(rate)
        c = self.corrupter
        return web.json_response({"pod": self.pod, "business-fail-rate": c.rate,
                                  "seen": c.seen, "corrupted": c.corrupted})

    async def metrics_page(self, request: web.Request) -> web.Response:
        """The simulator's ``/metrics`` with the shim's HTTP metrics appended. If the simulator
        does not answer, neither does this (Prometheus records ``up`` = 0 for the pod, as for a
        vLLM server that is down)."""
        assert self.session is not None
        try:
            async with self.session.get(
                self.upstream + "/metrics",
                headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"},
                timeout=aiohttp.ClientTimeout(total=5),
            ) as upstream:
                text = await upstream.text()
                if upstream.status != 200:
                    return web.Response(status=502, text=f"upstream /metrics: {upstream.status}")
        except (TimeoutError, aiohttp.ClientError) as e:
            return web.Response(status=502, text=f"upstream /metrics: {e!r}")
        return web.Response(body=merge(text, self.metrics).encode(),
                            headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """Forward one request; count the response it served (status as sent, duration until
        its last byte), unless nothing was sent (the client went away first)."""
        start = time.perf_counter()
        handler = handler_of(request.path)
        served: dict[str, int] = {}  # "status": the status line sent, or about to be
        try:
            return await self._forward(request, served)
        except asyncio.CancelledError:
            raise
        except Exception:
            # before a status line went out, aiohttp answers the error with a 500; after it, the
            # client has the status it was sent (and a body cut short)
            served.setdefault("status", 500)
            raise
        finally:
            if handler is not None and served.get("status"):
                self.metrics.observe(handler, request.method, served["status"],
                                     time.perf_counter() - start)

    async def _forward(self, request: web.Request, served: dict[str, int]) -> web.StreamResponse:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        data = await request.read()
        if self.adapter_faults and request.method == "POST" and request.path in CHECKED_PATHS:
            failed = await self._adapter_fault(data)
            if failed is not None:
                served["status"] = failed.status
                return failed
        url = self.upstream + request.path_qs
        try:
            upstream = await self.session.request(request.method, url, headers=headers, data=data)
        except aiohttp.ClientError as e:
            served["status"] = 502
            return web.json_response({"error": f"upstream: {e}"}, status=502)
        async with upstream:
            if request.method == "POST" and request.path in (LORA_LOAD, LORA_UNLOAD) and (
                    200 <= upstream.status < 300):
                self._adapter_changed(request.path, data)
            checked = (
                request.method == "POST"
                and request.path in CHECKED_PATHS
                and 200 <= upstream.status < 300
            )
            out_headers = {k: v for k, v in upstream.headers.items()
                           if k.lower() not in HOP_BY_HOP}
            out_headers.update(self.identity)
            streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
            if not streaming:
                body = await upstream.read()
                if checked and self.corrupter.next():
                    body = corrupt_body(body)
                served["status"] = upstream.status
                return web.Response(status=upstream.status, headers=out_headers, body=body)
            corrupt = checked and self.corrupter.next()
            resp = web.StreamResponse(status=upstream.status, headers=out_headers)
            await resp.prepare(request)
            served["status"] = upstream.status
            if corrupt:  # line by line up to the first content delta, which gets the prefix
                async for line in upstream.content:
                    line, changed = corrupt_sse_line(line)
                    await resp.write(line)
                    if changed:
                        break
            async for chunk in upstream.content.iter_any():  # the rest: bytes as they arrive
                await resp.write(chunk)
            await resp.write_eof()
            return resp


    def _adapter_changed(self, path: str, data: bytes) -> None:
        """The simulator loaded or unloaded an adapter: its fault is the new source's."""
        try:
            body = json.loads(data)
            name = str(body["lora_name"])
        except (ValueError, KeyError, TypeError):
            return
        fault = AdapterFault.of(str(body.get("lora_path", ""))) if path == LORA_LOAD else None
        if fault is None:
            self.adapter_faults.pop(name, None)
        else:
            self.adapter_faults[name] = (fault, Corrupter(fault.failure_rate))

    async def _adapter_fault(self, data: bytes) -> web.Response | None:
        """A request to a faulty adapter: its delay, then its share of 503s."""
        try:
            model = json.loads(data).get("model")
        except (ValueError, AttributeError):
            return None
        entry = self.adapter_faults.get(model) if isinstance(model, str) else None
        if entry is None:
            return None
        fault, counter = entry
        if fault.ttft_ms:
            await asyncio.sleep(fault.ttft_ms / 1000)
        if counter.next():
            return web.json_response(
                {"error": {"message": f"sandbox: adapter {model} failed (sim-failure-rate)",
                           "type": "server_error", "code": 503}},
                status=503, headers=self.identity)
        return None


def add_routes(app: web.Application, proxy: FaultProxy) -> None:
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.router.add_route("*", "/-/shim/config", proxy.config)
    app.router.add_get("/metrics", proxy.metrics_page, allow_head=False)
    app.router.add_route("*", "/{tail:.*}", proxy.forward)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m irsandbox.faultproxy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.0, help="percent of responses to corrupt")
    parser.add_argument("--pod", default="", help="namespace/name, for logs and /-/shim/config")
    parser.add_argument("--rollout", default="", help="for the X-Serving-Rollout header")
    parser.add_argument("--revision", default="", help="for the X-Serving-Revision header")
    parser.add_argument("--pod-address", default="", metavar="IP:PORT",
                        help="also listen on the pod's own address (its EndpointSlice's)")
    parser.add_argument("--pod-netns", default="", metavar="NAME",
                        help="make the --pod-address listener inside this network namespace "
                             "(the sandbox's pod network, IR_POD_NETNS)")
    args = parser.parse_args(argv)
    proxy = FaultProxy(f"http://127.0.0.1:{args.upstream_port}", args.rate, args.pod,
                       args.rollout, args.revision)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    add_routes(app, proxy)
    loopback = listen_socket("127.0.0.1", args.listen_port)
    pod = None
    if args.pod_address:
        host, _, port = args.pod_address.rpartition(":")
        pod = pod_listener(host, int(port), args.pod_netns)
    asyncio.run(serve(app, loopback, pod))


def pod_listener(host: str, port: int, netns_name: str) -> socket.socket:
    """The listener on the pod's own address, inside the pod network namespace when one is
    named (the host's namespace has no address of the pod range)."""
    def make() -> socket.socket:
        return listen_socket(host, port, patience=POD_ADDRESS_PATIENCE)
    if not netns_name:
        return make()
    try:
        return netns.run_in(netns_name, make)
    except OSError as e:
        raise SystemExit(f"faultproxy: cannot enter network namespace {netns_name!r} for "
                         f"{host}:{port}: {e} (is the sandbox up? `ip netns list`)") from e


def listen_socket(host: str, port: int, patience: float = 0.0) -> socket.socket:
    """A bound, listening TCP socket; an address the machine does not own fails here, at start,
    with the address in the message (not later, on the first connection). An address in use is
    tried again for ``patience`` seconds: KWOK hands a deleted pod's IP to the next pod while the
    old pod's shim may still be draining on it."""
    deadline = time.monotonic() + patience
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            break
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise SystemExit(f"faultproxy: cannot listen on {host}:{port}: {e}") from e
    sock.listen(512)
    return sock


def close_connections_to(runner: web.AppRunner, address: tuple[str, int]) -> int:
    """Close the kept-alive connections made to ``address`` (each after the request it is
    serving). Closing the listener alone leaves them open: Traefik and Prometheus pool idle
    connections by address, and would send the next pod given this IP to this shim, whose pod is
    gone (its answers, or its metrics under the new pod's labels). Returns how many."""
    server = runner.server
    closed = 0
    for handler in list(server.connections) if server is not None else []:
        transport = handler.transport
        if transport is None or transport.get_extra_info("sockname")[:2] != address:
            continue
        # close() ends a connection after the request it serves; an idle one waits for the next
        # request and ignores it (aiohttp 3.14), so that one is closed now.
        if getattr(handler, "_request_in_progress", True):
            handler.close()
        else:
            handler.force_close()
        closed += 1
    return closed


async def serve(app: web.Application, loopback: socket.socket,
                pod: socket.socket | None) -> None:
    """Serve ``app`` on both sockets until SIGTERM or SIGINT, then shut down gracefully (what
    ``web.run_app`` does for one address). SIGUSR1 closes the pod-address listener only."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, loopback).start()
    loop = asyncio.get_running_loop()
    if pod is not None:
        pod_site = web.SockSite(runner, pod)
        await pod_site.start()

        released: list[asyncio.Task[None]] = []

        pod_address = pod.getsockname()

        def release() -> None:
            loop.remove_signal_handler(signal.SIGUSR1)
            released.append(loop.create_task(pod_site.stop()))
            close_connections_to(runner, pod_address)
        loop.add_signal_handler(signal.SIGUSR1, release)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    main()
