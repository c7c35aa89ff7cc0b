"""PrometheusSource error mapping for answers a real Prometheus does not give.

A hung server, an ingress's HTML error page, an auth proxy's 401, Prometheus' own 503 timeout
and the bearer token header need a stub; everything a real Prometheus can produce (values, NaN,
empty vectors, parse errors, many series, refused connections) is proven against one in
tests/integration/test_prometheus_templates.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from tests.unit.hostile_server import flood, peak_rss_growth, respond, serve, trickle

from inference_rollout.bounded_http import MiB
from inference_rollout.core.types import MeasurementError
from inference_rollout.metrics.source import (
    BadQuery,
    MetricQueryError,
    NoData,
    PrometheusSource,
    Unreachable,
)

VECTOR = {"status": "success",
          "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "0.25"]}]}}
CASES: dict[str, tuple[int, str, Any]] = {
    "ok": (200, "application/json", VECTOR),
    "html503": (503, "text/html", "<html><body>503 Service Temporarily Unavailable</body></html>"),
    "auth401": (401, "text/plain", "Unauthorized"),
    "prom-timeout": (503, "application/json",
                     {"status": "error", "errorType": "timeout", "error": "query timed out"}),
    "ok-not-json": (200, "text/html", "<html>Grafana</html>"),
    "string": (200, "application/json",
               {"status": "success", "data": {"resultType": "string", "result": [1, "x"]}}),
}


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            case = self.path.strip("/").split("/")[0]
            form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
            seen.append({"case": case, "path": self.path, "form": form,
                         "auth": self.headers.get("Authorization")})
            if case == "hang":
                time.sleep(2)
                return
            status, ctype, body = CASES[case]
            data = (json.dumps(body) if not isinstance(body, str) else body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def query(base: str, case: str, **kw: Any) -> float:
    async def go() -> float:
        async with PrometheusSource(f"{base}/{case}/", **kw) as source:
            return await source.query("up", at=1700000000.5)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        ("html503", Unreachable, "not a Prometheus API response"),
        ("auth401", Unreachable, "HTTP 401"),
        ("prom-timeout", Unreachable, "query timed out"),
        ("ok-not-json", Unreachable, "not a Prometheus API response"),
        ("string", BadQuery, "returned a string"),
    ],
)
def test_error_mapping(stub: tuple[str, list[Any]], case: str, error: type[MetricQueryError],
                       message: str) -> None:
    with pytest.raises(error, match=message):
        query(stub[0], case)


def test_a_hung_prometheus_times_out_as_unreachable(stub: tuple[str, list[Any]]) -> None:
    start = time.monotonic()
    with pytest.raises(Unreachable, match=r"within 0\.3s"):
        query(stub[0], "hang", timeout_s=0.3)
    assert time.monotonic() - start < 1.5


def test_request_carries_query_time_timeout_and_bearer_token(
    stub: tuple[str, list[dict[str, Any]]]
) -> None:
    assert query(stub[0], "ok", bearer_token="s3cr3t", timeout_s=4) == 0.25
    req = stub[1][-1]
    assert req["path"] == "/ok/api/v1/query"  # address path prefix kept, trailing '/' ignored
    assert req["form"] == {"query": ["up"], "time": ["1700000000.500"], "timeout": ["4s"]}
    assert req["auth"] == "Bearer s3cr3t"


def test_no_token_no_authorization_header(stub: tuple[str, list[dict[str, Any]]]) -> None:
    query(stub[0], "ok")
    assert stub[1][-1]["auth"] is None


def test_error_kinds_are_the_measurement_errors() -> None:
    assert NoData("x").kind is MeasurementError.NO_DATA
    assert Unreachable("x").kind is MeasurementError.UNREACHABLE
    assert BadQuery("x").kind is MeasurementError.BAD_QUERY


# --- hostile answers (issue 9): bounded time, bounded memory, never an untyped exception -------

def query_at(base: str, **kw: Any) -> float:
    async def go() -> float:
        async with PrometheusSource(base, **kw) as source:
            return await source.query("up")

    return asyncio.run(go())


def test_a_trickling_prometheus_fails_at_the_timeout_not_per_read() -> None:
    # One byte every 0.5 s never trips a per-read timeout of 1 s; the whole request must stop
    # at 1 s (it took 19.1 s before the deadline covered the body).
    body = json.dumps(VECTOR).encode()
    with serve(trickle(body, 0.5)) as base:
        start = time.monotonic()
        with pytest.raises(Unreachable, match=r"within 1s"):
            query_at(base, timeout_s=1.0)
        elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"failed after {elapsed:.1f}s"


@pytest.mark.parametrize("declare_length", [False, True])
def test_a_300_mib_answer_is_refused_with_flat_memory(declare_length: bool) -> None:
    prefix = b'{"status":"success","data":{"resultType":"vector","result":[]'
    with (serve(flood(prefix, 300 * MiB, declare_length=declare_length)) as base,
          peak_rss_growth() as peak, pytest.raises(BadQuery, match="larger than 4096 KiB")):
        query_at(base, timeout_s=8.0)
    assert peak[0] < 24 * MiB, f"RSS grew by {peak[0] / MiB:.0f} MiB"


def _answer(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _data(result_type: Any, result: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}}


NESTED = b'{"status":"success","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ({"status": "success", "data": [1, 2]}, Unreachable, "data is not an object"),
        ({"status": "success", "data": "x"}, Unreachable, "data is not an object"),
        (_data("vector", {"a": 1}), Unreachable, "not a list"),
        (_data("vector", [1]), Unreachable, "series is not an object"),
        (_data("vector", [{"value": 5}]), Unreachable, "not \\[time"),
        (_data("vector", [{"value": [1, 2.5]}]), Unreachable, "not \\[time"),
        (_data("vector", [{"value": [1, "abc"]}]), Unreachable, "'abc' is not a number"),
        (_data("vector", [{"value": [1, "NaN"]}]), NoData, "NaN"),
        (_data("vector", [{"metric": [], "value": [1, "1"]}, {"metric": 3}]), BadQuery,
         "2 series"),
        (_data("scalar", "1"), Unreachable, "not \\[time"),
        (_data("scalar", [1]), Unreachable, "not \\[time"),
        (_data(["vector"], []), BadQuery, "returned a"),
        (_data("matrix", []), BadQuery, "returned a matrix"),
        ({"status": "error", "errorType": {"x": 1}, "error": "a\nb\x1b[31m" + "z" * 2000},
         Unreachable, "HTTP 200"),
        (b"[" * 100_000, Unreachable, "not a Prometheus API response"),
        (NESTED, Unreachable, "not a Prometheus API response"),
        (b"\xff\xfe{}", Unreachable, "not a Prometheus API response"),
    ],
)
def test_malformed_answers_are_typed_errors(body: Any, error: type[MetricQueryError],
                                            message: str) -> None:
    with serve(respond(_answer(body))) as base, pytest.raises(error, match=message) as caught:
        query_at(base, timeout_s=4.0)
    assert "\n" not in caught.value.message and "\x1b" not in caught.value.message
    assert len(caught.value.message) < 700


def test_an_address_httpx_cannot_use_is_unreachable_not_a_crash() -> None:
    with pytest.raises(Unreachable, match=r"InvalidURL|UnsupportedProtocol"):
        query_at("http://prometheus.monitoring:9090\n", timeout_s=1.0)


def vector_at(base: str, label: str = "pod", **kw: Any) -> dict[str, float]:
    async def go() -> dict[str, float]:
        async with PrometheusSource(base, **kw) as source:
            return await source.query_vector("up", label)

    return asyncio.run(go())


def test_query_vector_by_label_keeps_nan() -> None:
    body = _data("vector", [{"metric": {"pod": "a"}, "value": [1, "0.5"]},
                            {"metric": {"pod": "b"}, "value": [1, "NaN"]}])
    with serve(respond(_answer(body))) as base:
        got = vector_at(base)
    assert got["a"] == 0.5 and math.isnan(got["b"])


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (_data("vector", {"a": 1}), Unreachable, "not a list"),
        (_data("vector", ["x"]), Unreachable, "series is not an object"),
        (_data("vector", [{"metric": {"pod": 5}, "value": [1, "1"]}]), BadQuery,
         "without the label 'pod'"),
        (_data("vector", [{"metric": [], "value": [1, "1"]}]), BadQuery, "without the label"),
        (_data("vector", [{"metric": {"pod": "a"}, "value": [1, "x"]}]), Unreachable,
         "'x' is not a number"),
        (_data("vector", [{"metric": {"pod": "a"}, "value": 3}]), Unreachable, "not \\[time"),
        (_data("vector", []), NoData, "empty vector"),
        (_data("scalar", [1, "1"]), BadQuery, "expected a vector by pod"),
        (NESTED, Unreachable, "not a Prometheus API response"),
    ],
)
def test_malformed_vectors_are_typed_errors(body: Any, error: type[MetricQueryError],
                                            message: str) -> None:
    with serve(respond(_answer(body))) as base, pytest.raises(error, match=message):
        vector_at(base, timeout_s=4.0)
