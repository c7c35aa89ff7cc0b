"""The sandbox's Traefik (``sandbox/build.sh`` ``patch_traefik_full_duplex``) against the real
binary: its HTTP/1 entry point in full duplex must neither die nor drop a keep-alive connection
when a request's body is left unread, and must not cut streamed responses (issue 34).

Full duplex (``http.ResponseController.EnableFullDuplex``) keeps Go's server from closing a
request's body once the response starts, which cut about one streamed response in 3,000
(traefik/traefik#10381). But with it on, Go's server (through Go 1.26, golang/go#68560) closes a
body left unread when the handler returns *after* stopping the connection's background read
(``response.finishRequest``); closing reads the body to its end, and that EOF starts a new
background read nothing stops. The next request on the connection then panics with "invalid
concurrent Body.Read call": recovered in the connection's goroutine (the connection is dropped
without an answer), or, when that next request was already read into the connection's buffer,
unrecovered in the transport goroutine that copies its body to the backend: Traefik exits.

A body is left unread whenever Traefik answers a POST itself (no router: 404; backend down: 502)
or the backend answers before the body arrives. Each case is below, on loopback ports: a file
provider configuration (no Kubernetes) and a Python backend on 127.0.0.1. The binary is the one
``build.sh traefik`` caches (``$IR_CACHE/bin/<TRAEFIK_BIN_NAME>-<TRAEFIK_VERSION>``, names read
from ``sandbox/lib.sh``), or ``$IR_TRAEFIK_BIN``. A missing binary FAILS the tests.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from irsandbox.common import SANDBOX_DIR, free_port, terminate

pytestmark = pytest.mark.integration

BUILD_HINT = "build it with `bash sandbox/build.sh traefik`"
IO_TIMEOUT = 5.0  # any single read or write; a request that waits longer has hung
BODY = b'{"model": "m", "prompt": "' + b"x" * 200 + b'"}'
STREAM_CHUNKS = 5  # data chunks after the first, then [DONE]


# --- the binary -------------------------------------------------------------------------------

def traefik_binary() -> Path:
    """``$IR_TRAEFIK_BIN``, else ``cached_bin "$TRAEFIK_BIN_NAME" "$TRAEFIK_VERSION"`` of
    sandbox/lib.sh (the name states the patch, so the path is the one build.sh writes)."""
    explicit = os.environ.get("IR_TRAEFIK_BIN")
    if explicit:
        return Path(explicit)
    out = subprocess.run(
        ["bash", "-c", 'source "$1" && cached_bin "${TRAEFIK_BIN_NAME}" "${TRAEFIK_VERSION}"',
         "_", str(SANDBOX_DIR / "lib.sh")],
        capture_output=True, text=True, timeout=30, check=True)
    return Path(out.stdout.strip())


# --- a backend that answers before it reads ---------------------------------------------------

class _BackendHandler(socketserver.StreamRequestHandler):
    """Raw HTTP/1.1, keep-alive. ``/echo`` reads the body, then answers; ``/early`` answers at once,
    before any of the body, and closes; ``/stream`` starts a chunked event stream at once, then
    reads the body, then streams the rest."""

    timeout = IO_TIMEOUT

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while self._one():
                pass

    def _one(self) -> bool:
        line = self.rfile.readline()
        if not line:
            return False
        path = line.split()[1].decode()
        length = 0
        while (h := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = h.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if path == "/early":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
                             b"early")
            self.connection.shutdown(socket.SHUT_WR)
            while self.rfile.read(65536):  # whatever comes, until Traefik closes (no RST)
                pass
            return False
        if path == "/stream":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(b"data: 0\n\n"))
            got = self.rfile.read(length)
            for i in range(1, STREAM_CHUNKS + 1):
                time.sleep(0.001)
                self.wfile.write(_chunk(b"data: %d %d\n\n" % (i, len(got))))
            self.wfile.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            return True
        got = self.rfile.read(length)
        reply = b"echo %d" % len(got)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))
        return True


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Backend(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def backend() -> Iterator[int]:
    server = _Backend(("127.0.0.1", 0), _BackendHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


# --- Traefik ----------------------------------------------------------------------------------

@dataclass
class Traefik:
    process: subprocess.Popen[bytes]
    web: int
    ping: int
    log_path: Path

    def log(self, lines: int = 30) -> str:
        """Traefik's log for a failure message: a fatal panic's first lines, else the first
        recovered panics ("http: panic serving", at debug level) and the last lines."""
        text = self.log_path.read_text(errors="replace").splitlines()
        fatal = next((i for i, ln in enumerate(text) if ln.startswith("panic: ")), None)
        if fatal is not None:
            return "\n".join(["Traefik's fatal panic:", *text[fatal:fatal + lines]])
        recovered = [ln for ln in text if "panic serving" in ln][:3]
        return "\n".join([f"recovered panics ({sum('panic serving' in ln for ln in text)}):",
                          *recovered, f"last {lines} lines of Traefik's log:", *text[-lines:]])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        terminate(self.process)


@pytest.fixture()
def traefik(backend: int, tmp_path: Path) -> Iterator[Traefik]:
    binary = traefik_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no Traefik binary at {binary}: {BUILD_HINT}", pytrace=False)
    dynamic = tmp_path / "dynamic.yaml"
    dynamic.write_text(yaml.safe_dump({"http": {
        "routers": {
            "ok": {"entryPoints": ["web"], "rule": "Host(`ok.test`)", "service": "backend"},
            "down": {"entryPoints": ["web"], "rule": "Host(`down.test`)", "service": "down"},
        },
        "services": {
            "backend": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{backend}"}]}},
            # nothing listens there: Traefik answers 502 without reading the body
            "down": {"loadBalancer": {"servers": [{"url": f"http://127.0.0.1:{free_port()}"}]}},
        },
    }}))
    last_log = ""
    for _attempt in range(3):  # a port taken between free_port() and bind: try others
        web, ping = free_port(), free_port()
        log_path = tmp_path / f"traefik-{web}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [str(binary), f"--entryPoints.web.address=127.0.0.1:{web}",
                 f"--entryPoints.traefik.address=127.0.0.1:{ping}",
                 "--ping=true", "--ping.entryPoint=traefik",
                 # as sandbox/up.d/65-traefik.sh: metrics put Traefik's capture middleware in the
                 # chain (the crash's stack goes through it)
                 "--metrics.prometheus=true", "--metrics.prometheus.entryPoint=traefik",
                 "--metrics.prometheus.addServicesLabels=true",
                 "--metrics.prometheus.addRoutersLabels=true",
                 f"--providers.file.filename={dynamic}", "--log.level=DEBUG", "--log.noColor=true",
                 "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        t = Traefik(proc, web, ping, log_path)
        if _wait_ready(t):
            try:
                yield t
            finally:
                t.stop()
            return
        t.stop()
        last_log = t.log()
        if "address already in use" not in last_log:
            break
    pytest.fail(f"Traefik ({binary}) did not become ready:\n{last_log}", pytrace=False)


def _wait_ready(t: Traefik, timeout: float = 30.0) -> bool:
    """Ping answers and the file provider's routes are in (a POST through ``ok.test`` works)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and t.alive():
        with contextlib.suppress(OSError, httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{t.ping}/ping", timeout=1).status_code == 200:
                r = httpx.post(f"http://127.0.0.1:{t.web}/echo", content=BODY,
                               headers={"Host": "ok.test"}, timeout=2)
                if r.status_code == 200:
                    return True
        time.sleep(0.1)
    return False


# --- a raw HTTP/1.1 client (pipelining, and a body sent after the response) -------------------

class ConnectionDropped(Exception):
    """The server closed the connection where a response should have begun."""


@dataclass
class Response:
    status: int
    body: bytes


def head(host: str, path: str, length: int = len(BODY)) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def connect(t: Traefik) -> tuple[socket.socket, io.BufferedReader]:
    sock = socket.create_connection(("127.0.0.1", t.web), timeout=IO_TIMEOUT)
    return sock, sock.makefile("rb")


def read_status(f: io.BufferedReader) -> int:
    line = f.readline()
    if not line:
        raise ConnectionDropped("connection closed before a response")
    return int(line.split()[1])


def read_rest(f: io.BufferedReader, status: int) -> Response:
    """The headers and body after the status line (Content-Length or chunked)."""
    length, chunked = 0, False
    while (h := f.readline()) not in (b"\r\n", b"\n"):
        if not h:
            raise ConnectionDropped("connection closed in the response's headers")
        name, _, value = h.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return Response(status, _read_exactly(f, length))
    body = b""
    while True:
        size_line = f.readline()
        if not size_line:
            raise ConnectionDropped(f"stream cut after {len(body)} bytes")
        size = int(size_line.split(b";")[0], 16)
        body += _read_exactly(f, size)
        _read_exactly(f, 2)
        if size == 0:
            return Response(status, body)


def _read_exactly(f: io.BufferedReader, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ConnectionDropped(f"connection closed after {len(data)} of {n} bytes")
    return bytes(data)


def read_response(f: io.BufferedReader) -> Response:
    return read_rest(f, read_status(f))


def expect(r: Response, status: int, what: str) -> None:
    assert r.status == status, f"{what}: HTTP {r.status}, wanted {status} ({r.body[:80]!r})"


# --- the tests --------------------------------------------------------------------------------

TRIGGERS = {  # a request Traefik answers before (or without) reading its body
    "no router (404)": ("nowhere.test", "/echo", 404),
    "backend down (502)": ("down.test", "/echo", 502),
}


def pipelined_pair(t: Traefik, trigger: str) -> None:
    """A request whose body Traefik never reads and a proxied POST, in one write."""
    host, path, status = TRIGGERS[trigger]
    sock, f = connect(t)
    with sock:
        sock.sendall(head(host, path) + BODY + head("ok.test", "/echo") + BODY)
        expect(read_response(f), status, trigger)
        expect(read_response(f), 200, f"the proxied POST pipelined after: {trigger}")


def body_after_the_answer(t: Traefik) -> None:
    """The backend answers before the body arrives; the body, and the next request right behind
    it, come once the answer is in: the proxy's transport still reads the body when the handler
    has returned. (The unfixed build answers the next request 499, its connection's context
    cancelled, until it dies.)"""
    sock, f = connect(t)
    with sock:
        sock.sendall(head("ok.test", "/early"))
        expect(read_response(f), 200, "an answer before the body")
        sock.sendall(BODY + head("ok.test", "/echo") + BODY)
        expect(read_response(f), 200, "the proxied POST after the late body")


def test_traefik_survives_bodies_it_does_not_read(traefik: Traefik) -> None:
    """Requests left unread, each followed on its connection by a proxied POST already sent:
    on the unfixed build the first one kills Traefik (panic in the transport's write loop)."""
    failures: list[str] = []
    cases = [*((f"pipelined after {k}", functools.partial(pipelined_pair, traefik, k))
               for k in TRIGGERS),
             ("body after the answer", functools.partial(body_after_the_answer, traefik))]
    for _round in range(20):
        for name, case in cases:
            try:
                case()
            except (OSError, ConnectionDropped, AssertionError) as e:
                failures.append(f"{name}: {type(e).__name__}: {e}")
        if not traefik.alive() or len(failures) >= 3:  # dead, or failing: no need for more
            break
    assert traefik.alive(), (
        f"Traefik exited (status {traefik.process.returncode}) after {len(failures)} failed "
        f"requests, first: {failures[:1]}\n{traefik.log()}")
    assert httpx.get(f"http://127.0.0.1:{traefik.ping}/ping", timeout=5).status_code == 200
    r = httpx.post(f"http://127.0.0.1:{traefik.web}/echo", content=BODY,
                   headers={"Host": "ok.test"}, timeout=5)
    assert (r.status_code, r.text) == (200, f"echo {len(BODY)}")
    assert not failures, f"{len(failures)} failed, first: {failures[:3]}\n{traefik.log()}"


def test_keep_alive_request_after_an_unread_body_is_answered(traefik: Traefik) -> None:
    """A request left unread, its answer read, then the next request on the same connection:
    on the unfixed build Traefik drops the connection instead of answering (recovered panic)."""
    dropped: list[str] = []
    for i in range(40):
        trigger = list(TRIGGERS)[i % len(TRIGGERS)]
        host, path, status = TRIGGERS[trigger]
        sock, f = connect(traefik)
        with sock:
            sock.sendall(head(host, path) + BODY)
            expect(read_response(f), status, trigger)
            try:
                sock.sendall(head("ok.test", "/echo") + BODY)
                expect(read_response(f), 200, f"the next request after: {trigger}")
            except (OSError, ConnectionDropped) as e:
                dropped.append(f"after {trigger}: {type(e).__name__}: {e}")
    assert traefik.alive(), f"Traefik exited\n{traefik.log()}"
    assert not dropped, (f"{len(dropped)} of 40 keep-alive requests dropped, first: "
                         f"{dropped[:2]}\n{traefik.log()}")


def _streams(t: Traefik, count: int, interactive: bool) -> list[str]:
    """``count`` streamed completions on one keep-alive connection; the cut ones. Interactive:
    the body is sent only once the stream has begun (needs full duplex); else with the headers,
    and the backend still starts the stream before reading it."""
    cut: list[str] = []
    sock, f = connect(t)
    with sock:
        for i in range(count):
            try:
                if interactive:
                    sock.sendall(head("ok.test", "/stream"))
                    status = read_status(f)
                    sock.sendall(BODY)
                else:
                    sock.sendall(head("ok.test", "/stream") + BODY)
                    status = read_status(f)
                r = read_rest(f, status)
                want = b"".join([b"data: 0\n\n",
                                 *(b"data: %d %d\n\n" % (n, len(BODY))
                                   for n in range(1, STREAM_CHUNKS + 1)),
                                 b"data: [DONE]\n\n"])
                if (r.status, r.body) != (200, want):
                    cut.append(f"stream {i}: HTTP {r.status}, {len(r.body)} of {len(want)} bytes")
            except (OSError, ConnectionDropped) as e:
                kind = "body sent once the stream began" if interactive else "body sent at once"
                cut.append(f"stream {i} ({kind}): {type(e).__name__}: {e}")
                break
    return cut


def test_streams_are_not_cut(traefik: Traefik) -> None:
    """Streams whose response starts before their request body is read arrive whole: 4
    connections x 50, half of them sending the body only once the stream has begun. Without
    full duplex those hang (Go's server reads the body before it lets the response out), and a
    body sent at once can lose the race of traefik/traefik#10381 (about 1 in 3,000)."""
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda k: _streams(traefik, 50, interactive=k % 2 == 0),
                                range(4)))
    cut = [c for r in results for c in r]
    assert traefik.alive(), f"Traefik exited\n{traefik.log()}"
    assert not cut, f"{len(cut)} streams cut, first: {cut[:3]}\n{traefik.log()}"
