"""A loopback HTTP server that answers badly on purpose (one byte at a time, or hundreds of MiB),
or plainly while recording what reached it.

Real sockets, because the point is what the client does with a real TCP stream (httpx's
MockTransport hands over a body already in memory).  ``http.server`` would buffer and frame the
answer its own way; here every byte is written by hand, so the pace and the framing are exact.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = Callable[[socket.socket], None]


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@contextmanager
def serve(answer: Answer, requests: list[bytes] | None = None) -> Iterator[str]:
    """Run ``answer(conn)`` for every connection (after reading the request, appended to
    ``requests`` when given); yields the base URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                if requests is not None:
                    requests.append(request)
                answer(conn)
            except OSError:
                pass  # the client hung up: what a bounded client does

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        listener.close()


def respond(body: bytes) -> Answer:
    """A plain 200 with ``body`` as JSON, all at once."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return answer


def trickle(body: bytes, every_s: float) -> Answer:
    """Headers at once (with the full Content-Length), then one body byte every ``every_s``."""

    def answer(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        for i in range(len(body)):
            conn.sendall(body[i:i + 1])
            time.sleep(every_s)
    return answer


def flood(prefix: bytes, total_bytes: int, *, declare_length: bool = False) -> Answer:
    """``prefix`` then spaces up to ``total_bytes`` (JSON whitespace), sent as fast as the client
    reads.  Without ``declare_length`` the body ends when the connection closes (no
    Content-Length), so the client cannot refuse it up front: it must stop reading."""
    block = b" " * (1024 * 1024)

    def answer(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        head += (b"Content-Length: %d\r\n" % total_bytes if declare_length
                 else b"Connection: close\r\n")
        conn.sendall(head + b"\r\n" + prefix)
        sent = len(prefix)
        while sent < total_bytes:
            n = min(len(block), total_bytes - sent)
            conn.sendall(block[:n])
            sent += n
    return answer


def rss_bytes() -> int:
    """This process's resident set size now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def peak_rss_growth() -> Iterator[list[int]]:
    """Samples RSS every 5 ms while the block runs; the list holds the peak growth in bytes."""
    base = rss_bytes()
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes() - base)
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        peak[0] = max(peak[0], rss_bytes() - base)
