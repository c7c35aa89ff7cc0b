"""Load generator: OpenAI chat completions through the sandbox gateway at a set rate.

    python -m irsandbox.loadgen --url $GATEWAY_URL --host chat.example --model llama \\
        --rate 20 --duration 30 [--stream] [--json-check] [--metrics-port 0] [--json]

Open loop: request i starts at ``i / rate`` seconds (``--concurrency`` caps the requests in
flight; a request that had to wait for a slot counts as "late"). Each response is attributed to
the pod that served it through the pod's own ``X-Serving-Pod`` / ``X-Serving-Revision`` headers
(set by its shim, whatever gateway carried the request), else the nginx translator's
``X-Backend-*`` (InferencePool routes), else ``X-Upstream-Addr`` looked up in the bridge's
endpoint map. The report gives per-pod and per-revision counts, errors by kind, TTFT and
inter-token latency (streaming) and end-to-end latency, as a short summary or as JSON
(``--json``).

Business check (``--json-check``): the user message is a small JSON object and the system prompt
asks for exactly that object back (``response_format: json_object``); a response passes if its
text parses as JSON and equals the object. The simulator runs in echo mode, so a healthy backend
always passes; a pod annotated ``sim.inference.dev/business-fail-rate: "8"`` fails 8 % (see
:mod:`irsandbox.faultproxy`). Results are counted in
``loadgen_business_checks_total{namespace, rollout, revision, result="pass|fail"}``, served for
Prometheus on ``--metrics-port`` and registered as a file_sd target (``job="loadgen"``) while the
load generator runs.

As a library: ``report = await run_load(url, host=..., model=..., rate=50, requests=2000)``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import ssl
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .common import read_json, sandbox_env, state_dir, write_json_atomic
from .gateway_log import failures_between
from .podspec import revision_of

SYSTEM_PROMPT = "Reply with exactly the JSON object in the user message, and nothing else."


# --- results ---------------------------------------------------------------------------------


@dataclass
class RequestResult:
    index: int
    started: float  # seconds since the run began
    status: int = 0
    error: str = ""  # "" = success
    pod: str = ""  # namespace/name
    rollout: str = ""
    revision: str = ""
    latency: float = 0.0
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    check: bool | None = None  # business check result, None if not checked
    late: bool = False
    retried: bool = False  # the first attempt's connection closed before any response

    @property
    def namespace(self) -> str:
        return self.pod.split("/", 1)[0] if "/" in self.pod else ""


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


def _stats_ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    return {"count": len(values), "mean": 1000 * sum(values) / len(values),
            "p50": 1000 * _pct(values, 0.5), "p90": 1000 * _pct(values, 0.9),
            "p99": 1000 * _pct(values, 0.99), "max": 1000 * max(values)}


@dataclass
class LoadReport:
    requests: int
    succeeded: int
    failed: int
    duration_s: float
    achieved_rate: float
    late: int
    retried: int
    errors: dict[str, int]
    by_pod: dict[str, int]
    by_revision: dict[str, int]
    unrouted: int
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    latency_ms: dict[str, float]
    checks: dict[str, dict[str, int]]  # revision -> {"pass": n, "fail": n}
    results: list[RequestResult] = field(default_factory=list, repr=False)
    #: The gateway's own account of the failures it answered (:mod:`irsandbox.gateway_log`).
    gateway_failures: dict[str, int] = field(default_factory=dict)
    #: Wall-clock time (epoch seconds) of the run's start: a result's ``started`` is after it.
    started_at: float = 0.0

    def share(self, revision: str) -> float:
        """Fraction of routed responses that the revision served."""
        total = sum(self.by_revision.values())
        return self.by_revision.get(revision, 0) / total if total else 0.0

    def check_pass_rate(self, revision: str) -> float:
        c = self.checks.get(revision) or {}
        n = c.get("pass", 0) + c.get("fail", 0)
        return c.get("pass", 0) / n if n else math.nan

    def to_dict(self, with_results: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_results:
            d.pop("results")
        return d

    def summary(self) -> str:
        lines = [
            f"{self.requests} requests in {self.duration_s:.1f}s ({self.achieved_rate:.1f}/s, "
            f"{self.late} late, {self.retried} retried): {self.succeeded} ok, {self.failed} failed"
            + (f" {dict(self.errors)}" if self.errors else ""),
        ]
        total = sum(self.by_revision.values())
        for rev, n in sorted(self.by_revision.items()):
            lines.append(f"  revision {rev or '?'}: {n} ({100 * n / total:.1f}%)")
        for pod, n in sorted(self.by_pod.items()):
            lines.append(f"    pod {pod or '?'}: {n}")
        if self.unrouted:
            lines.append(f"  not attributed to a pod: {self.unrouted}")
        for what, n in sorted(self.gateway_failures.items()):
            lines.append(f"    the gateway's access log: {n} x {what}")
        for name, st in (("TTFT", self.ttft_ms), ("ITL", self.itl_ms),
                         ("latency", self.latency_ms)):
            if st.get("count"):
                lines.append(f"  {name} ms: p50 {st['p50']:.1f}  p90 {st['p90']:.1f}  "
                             f"p99 {st['p99']:.1f}  max {st['max']:.1f}  (n={st['count']})")
        for rev, c in sorted(self.checks.items()):
            n = c.get("pass", 0) + c.get("fail", 0)
            lines.append(f"  business check, revision {rev or '?'}: {c.get('pass', 0)}/{n} pass")
        return "\n".join(lines)


def build_report(results: list[RequestResult], duration: float) -> LoadReport:
    errors = Counter(r.error for r in results if r.error)
    by_pod = Counter(r.pod for r in results if r.pod)
    by_rev = Counter(r.revision for r in results if r.pod)
    checks: dict[str, dict[str, int]] = {}
    for r in results:
        if r.check is not None:
            c = checks.setdefault(r.revision, {"pass": 0, "fail": 0})
            c["pass" if r.check else "fail"] += 1
    ok = [r for r in results if not r.error]
    return LoadReport(
        requests=len(results), succeeded=len(ok), failed=len(results) - len(ok),
        duration_s=duration, achieved_rate=len(results) / duration if duration > 0 else 0.0,
        late=sum(1 for r in results if r.late), retried=sum(1 for r in results if r.retried),
        errors=dict(errors), by_pod=dict(by_pod),
        by_revision=dict(by_rev), unrouted=sum(1 for r in results if not r.pod),
        ttft_ms=_stats_ms([r.ttft for r in ok if r.ttft is not None]),
        itl_ms=_stats_ms([x for r in ok for x in r.itls]),
        latency_ms=_stats_ms([r.latency for r in ok]),
        checks=checks, results=results,
    )


# --- business metric exporter ----------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class BusinessMetrics:
    """Counters in Prometheus text format (no client library needed)."""

    def __init__(self) -> None:
        self.checks: Counter[tuple[str, str, str, str]] = Counter()
        self.requests: Counter[tuple[str, str, str, str]] = Counter()

    def observe(self, r: RequestResult) -> None:
        key = (r.namespace, r.rollout, r.revision)
        code = str(r.status) if r.status else "none"
        self.requests[(*key, code)] += 1
        if r.check is not None:
            self.checks[(*key, "pass" if r.check else "fail")] += 1

    def render(self) -> str:
        out = [
            "# HELP loadgen_business_checks_total Responses checked by the load generator's "
            "business check (valid JSON when JSON was asked for), by serving revision.",
            "# TYPE loadgen_business_checks_total counter",
        ]
        for (ns, ro, rev, res), n in sorted(self.checks.items()):
            out.append(f'loadgen_business_checks_total{{namespace="{_escape(ns)}",'
                       f'rollout="{_escape(ro)}",revision="{_escape(rev)}",result="{res}"}} {n}')
        out += [
            "# HELP loadgen_requests_total Requests sent through the gateway, by serving "
            "revision and HTTP status (code=\"none\": no response).",
            "# TYPE loadgen_requests_total counter",
        ]
        for (ns, ro, rev, code), n in sorted(self.requests.items()):
            out.append(f'loadgen_requests_total{{namespace="{_escape(ns)}",'
                       f'rollout="{_escape(ro)}",revision="{_escape(rev)}",code="{code}"}} {n}')
        return "\n".join(out) + "\n"


class MetricsServer:
    """Serves ``BusinessMetrics`` on 127.0.0.1:port/metrics; registers it with Prometheus by
    writing a file_sd target file while running (``register=True``)."""

    def __init__(self, metrics: BusinessMetrics, port: int = 0, register: bool = True,
                 targets_dir: Path | None = None) -> None:
        self.metrics = metrics
        self.port = port
        self.register = register
        self.targets_dir = targets_dir or state_dir() / "prometheus" / "targets"
        self._server: asyncio.base_events.Server | None = None
        self.target_file: Path | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b"/"
            if path.startswith(b"/metrics"):
                body, status = self.metrics.render().encode(), "200 OK"
            else:
                body, status = b"see /metrics\n", "404 Not Found"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    async def start(self) -> MetricsServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.register:
            self.target_file = self.targets_dir / f"loadgen_{self.port}.json"
            write_json_atomic(self.target_file, [{
                "targets": [f"127.0.0.1:{self.port}"],
                "labels": {"job": "loadgen", "__irsandbox_owner": "loadgen"},
            }])
        return self

    async def stop(self) -> None:
        if self.target_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.target_file.unlink()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> MetricsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# --- attribution -----------------------------------------------------------------------------


class Attribution:
    """Maps a response to (pod, rollout, revision): the gateway's headers, else the bridge's
    endpoint map (re-read when it changes) keyed by the upstream address."""

    def __init__(self, endpoints_file: Path | None) -> None:
        self.file = endpoints_file
        self._mtime = -1.0
        self._by_addr: dict[str, dict[str, Any]] = {}

    def _refresh(self) -> None:
        if self.file is None:
            return
        try:
            mtime = self.file.stat().st_mtime
        except OSError:
            return
        if mtime != self._mtime:
            self._mtime = mtime
            doc = read_json(self.file, {}) or {}
            self._by_addr = {p.get("address"): {"key": k, **p}
                             for k, p in (doc.get("pods") or {}).items()}

    def __call__(self, headers: httpx.Headers) -> tuple[str, str, str]:
        # the nginx translator's view first (its X-Backend-*), then the pod's own (the shim's
        # X-Serving-*, whatever gateway carried the request, e.g. Traefik): the two agree
        prefix = "x-backend-" if headers.get("x-backend-pod") else "x-serving-"
        pod = headers.get(prefix + "pod", "")
        if pod:
            rollout = headers.get(prefix + "rollout", "")
            revision = headers.get(prefix + "revision", "")
            if not (rollout and revision):
                guess = revision_of({}, pod.split("/", 1)[-1])
                rollout, revision = rollout or guess[0], revision or guess[1]
            return pod, rollout, revision
        addr = headers.get("x-upstream-addr", "").split(",")[-1].strip()
        if not addr:
            return "", "", ""
        self._refresh()
        info = self._by_addr.get(addr)
        if not info:
            return "", "", ""
        return str(info["key"]), str(info.get("rollout") or ""), str(info.get("revision") or "")


# --- the load --------------------------------------------------------------------------------


def make_payload(model: str, index: int, stream: bool, json_check: bool, max_tokens: int,
                 rng: random.Random) -> tuple[dict[str, Any], Any]:
    """(request body, the JSON object expected back, or None)."""
    if json_check:
        expected = {"request": index, "nonce": f"{rng.getrandbits(32):08x}", "ok": True}
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": json.dumps(expected, separators=(",", ":"))}]
    else:
        expected = None
        messages = [{"role": "user", "content": f"Request {index}: tell me about gray releases."}]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream,
                            "max_tokens": max_tokens}
    if json_check:
        body["response_format"] = {"type": "json_object"}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body, expected


def check_json(text: str, expected: Any) -> bool:
    try:
        return json.loads(text.strip()) == expected
    except ValueError:
        return False


class ClientPool:
    """Several small ``httpx.AsyncClient``s instead of one large one: httpcore's connection pool
    scans all its connections for every request, so one client with 32 connections serves about a
    third of the requests per second that 16 clients with 2 connections each do. Clients are made
    on demand (each request takes the least busy one; a new one only when all are full) and share
    one TLS context (httpx builds one per client otherwise: ~0.1 s each)."""

    PER_CLIENT = 2

    def __init__(self, concurrency: int, timeout: float) -> None:
        self.max_clients = max(1, math.ceil(concurrency / self.PER_CLIENT))
        self.timeout = httpx.Timeout(timeout, connect=5.0)
        self.limits = httpx.Limits(max_connections=self.PER_CLIENT,
                                   max_keepalive_connections=self.PER_CLIENT)
        self.ssl = ssl.create_default_context()
        self.clients: list[httpx.AsyncClient] = []
        self.inflight: list[int] = []

    @contextlib.asynccontextmanager
    async def client(self) -> Any:
        i = min(range(len(self.clients)), key=self.inflight.__getitem__, default=-1)
        if (i < 0 or self.inflight[i] >= self.PER_CLIENT) and len(self.clients) < self.max_clients:
            self.clients.append(httpx.AsyncClient(timeout=self.timeout, limits=self.limits,
                                                  verify=self.ssl, trust_env=False))
            self.inflight.append(0)
            i = len(self.clients) - 1
        self.inflight[i] += 1
        try:
            yield self.clients[i]
        finally:
            self.inflight[i] -= 1

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients))


#: The server closed a (kept-alive) connection before sending any byte of a response: what a
#: client sees when nginx's old workers close idle keep-alive connections on a reload just as a
#: request goes out. Retried once, as the OpenAI SDK retries connection errors.
CLOSED_BEFORE_RESPONSE = ("exc_RemoteProtocolError", "exc_ReadError", "exc_WriteError")


async def _one(client: httpx.AsyncClient, url: str, headers: dict[str, str],
               body: dict[str, Any], expected: Any, result: RequestResult,
               attribute: Attribution, t0: float | None = None) -> None:
    t0 = time.perf_counter() if t0 is None else t0
    text_parts: list[str] = []
    try:
        if body.get("stream"):
            async with client.stream("POST", url, json=body, headers=headers) as resp:
                result.status = resp.status_code
                result.pod, result.rollout, result.revision = attribute(resp.headers)
                if resp.status_code >= 400:
                    await resp.aread()
                    result.error = f"http_{resp.status_code}"
                    return
                last, done = None, False
                async for line in resp.aiter_lines():
                    # after [DONE], read the stream to its end, as the OpenAI SDK does: leaving
                    # mid-body drops the connection, which the gateway sees as an aborted request
                    if done or not line.startswith("data: "):
                        continue
                    data = line[6:].strip()
                    if data == "[DONE]":
                        done = True
                        continue
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        result.error = "bad_sse"
                        return
                    if chunk.get("error"):
                        result.error = "stream_error"
                        return
                    for choice in chunk.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            now = time.perf_counter()
                            if last is None:
                                result.ttft = now - t0
                            else:
                                result.itls.append(now - last)
                            last = now
                            text_parts.append(content)
        else:
            resp = await client.post(url, json=body, headers=headers)
            result.status = resp.status_code
            result.pod, result.rollout, result.revision = attribute(resp.headers)
            if resp.status_code >= 400:
                result.error = f"http_{resp.status_code}"
                return
            doc = resp.json()
            for choice in doc.get("choices") or []:
                text_parts.append((choice.get("message") or {}).get("content") or "")
    except httpx.HTTPError as e:
        result.error = f"exc_{type(e).__name__}"
        return
    except ValueError:
        result.error = "bad_json_response"
        return
    finally:
        result.latency = time.perf_counter() - t0
    if expected is not None:
        result.check = check_json("".join(text_parts), expected)


async def run_load(
    url: str,
    *,
    model: str,
    host: str | None = None,
    extra_headers: dict[str, str] | None = None,
    rate: float = 20.0,
    duration: float | None = None,
    requests: int | None = None,
    stream: bool = False,
    json_check: bool = False,
    concurrency: int = 256,
    max_tokens: int = 64,
    timeout: float = 60.0,
    endpoints_file: Path | None = None,
    metrics: BusinessMetrics | None = None,
    stop: asyncio.Event | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
    seed: int | None = None,
    retry: bool = True,
) -> LoadReport:
    """Send chat completions to ``url`` (the gateway) at ``rate`` per second (0: as fast as
    ``concurrency`` allows) until ``duration`` seconds or ``requests`` requests (or ``stop``).
    ``retry``: send a request again, once, if the connection closed before any response byte
    (counted in ``LoadReport.retried``)."""
    if duration is None and requests is None and stop is None:
        raise ValueError("give duration, requests or stop: the load must be bounded")
    endpoint = url.rstrip("/") + "/v1/chat/completions"
    headers = {**({"Host": host} if host else {}), **(extra_headers or {})}
    if endpoints_file is None:
        candidate = state_dir() / "bridge" / "endpoints.json"
        endpoints_file = candidate if candidate.exists() else None
    attribute = Attribution(endpoints_file)
    rng = random.Random(seed)
    results: list[RequestResult] = []
    sem = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    pool = ClientPool(concurrency, timeout)
    try:
        tasks: set[asyncio.Task[None]] = set()
        t0, wall_start = loop.time(), time.time()
        i = 0
        while True:
            if requests is not None and i >= requests:
                break
            due = t0 + (i / rate if rate > 0 else 0.0)
            if duration is not None and due - t0 >= duration:
                break
            if stop is not None and stop.is_set():
                break
            delay = due - loop.time()
            if delay > 0:
                if stop is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), delay)
                    if stop.is_set():
                        break
                else:
                    await asyncio.sleep(delay)
            await sem.acquire()
            started = loop.time()
            result = RequestResult(index=i, started=started - t0,
                                   late=rate > 0 and started - due > 0.1)
            results.append(result)
            body, expected = make_payload(model, i, stream, json_check, max_tokens, rng)

            async def go(result: RequestResult = result, body: dict[str, Any] = body,
                         expected: Any = expected) -> None:
                try:
                    t_first = time.perf_counter()
                    async with pool.client() as client:
                        await _one(client, endpoint, headers, body, expected, result,
                                   attribute, t_first)
                    if retry and result.status == 0 and result.error in CLOSED_BEFORE_RESPONSE:
                        result.error, result.retried = "", True
                        async with pool.client() as client:
                            await _one(client, endpoint, headers, body, expected, result,
                                       attribute, t_first)
                finally:
                    sem.release()
                    if metrics is not None:
                        metrics.observe(result)
                    if on_result is not None:
                        on_result(result)

            task = asyncio.create_task(go())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        if tasks:
            await asyncio.gather(*tasks)
        elapsed = loop.time() - t0
    finally:
        await pool.aclose()
    report = build_report(results, elapsed)
    report.started_at = wall_start
    if report.failed:
        report.gateway_failures = failures_between(host, wall_start, time.time())
    return report


# --- CLI -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = sandbox_env()
    parser = argparse.ArgumentParser(prog="python -m irsandbox.loadgen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=env.get("GATEWAY_URL") or "http://127.0.0.1:18081",
                        help="gateway base URL (default: GATEWAY_URL from .sandbox/env)")
    parser.add_argument("--host", default=None, help="Host header: selects the HTTPRoute")
    parser.add_argument("--model", required=True, help="model name in the request")
    parser.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="a header on every request (repeatable), e.g. X-Canary:always")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="requests per second (0: as fast as --concurrency allows)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--duration", type=float, default=None, help="seconds (default 30)")
    group.add_argument("--requests", type=int, default=None, help="number of requests")
    parser.add_argument("--stream", action="store_true", help="stream responses (SSE)")
    parser.add_argument("--json-check", action="store_true",
                        help="business check: ask for a JSON object, check the reply is it")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve loadgen_business_checks_total on this port (0: any free)")
    parser.add_argument("--no-register", action="store_true",
                        help="do not register the metrics endpoint as a Prometheus target")
    parser.add_argument("--linger", type=float, default=0.0,
                        help="keep serving metrics this many seconds after the load ends")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-retry", action="store_true",
                        help="do not resend a request whose connection closed before any "
                             "response (default: resend once, as the OpenAI SDK does)")
    args = parser.parse_args(argv)
    if args.duration is None and args.requests is None:
        args.duration = 30.0
    if args.rate < 0 or args.concurrency < 1:
        parser.error("--rate must be >= 0 and --concurrency >= 1")
    if any(":" not in h for h in args.header):
        parser.error("--header takes NAME:VALUE")
    args.headers = dict(h.split(":", 1) for h in args.header)
    return args


async def amain(args: argparse.Namespace) -> LoadReport:
    metrics = BusinessMetrics()
    server: MetricsServer | None = None
    if args.metrics_port is not None:
        server = await MetricsServer(metrics, args.metrics_port,
                                     register=not args.no_register).start()
        print(f"metrics on http://127.0.0.1:{server.port}/metrics"
              + (f" (Prometheus target {server.target_file})" if server.target_file else ""),
              file=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        report = await run_load(
            args.url, model=args.model, host=args.host, extra_headers=args.headers,
            rate=args.rate, duration=args.duration,
            requests=args.requests, stream=args.stream, json_check=args.json_check,
            concurrency=args.concurrency, max_tokens=args.max_tokens, timeout=args.timeout,
            metrics=metrics, stop=stop, seed=args.seed, retry=not args.no_retry)
        if server is not None and args.linger > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.linger)
    finally:
        if server is not None:
            await server.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(amain(args))
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        print(report.summary())
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
