"""A webhook receiver on loopback for the notification tests: records every POST (path, JSON
body) and answers from a script per path (e.g. 503 then 200, to prove the retry)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    base: str
    #: Statuses to answer per path, in order; past the end (or unscripted) 200.
    script: dict[str, list[int]] = field(default_factory=dict)
    received: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, path: str) -> list[Any]:
        with self.lock:
            return [b for p, b in self.received if p == path]

    def wait_for(self, path: str, count: int, timeout: float = 10.0) -> list[Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.bodies(path)
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{path}: {len(self.bodies(path))} requests, wanted {count}")


@contextmanager
def receiver(script: dict[str, list[int]] | None = None) -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = state["r"]
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            with rec.lock:
                rec.received.append((self.path, json.loads(raw or b"null")))
                answers = rec.script.get(self.path, [])
                status = answers.pop(0) if answers else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["r"] = Receiver(f"http://127.0.0.1:{server.server_address[1]}", dict(script or {}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["r"]
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":  # a receiver to try notifications by hand (docs/notifications.md)
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 18080

    class Printer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            print(self.path, raw.decode(errors="replace"), flush=True)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    ThreadingHTTPServer(("127.0.0.1", port), Printer).serve_forever()
