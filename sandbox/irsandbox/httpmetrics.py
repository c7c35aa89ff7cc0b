"""vLLM's HTTP metrics for a simulator pod, counted from the responses its shim serves.

A real vLLM server instruments its FastAPI app with prometheus-fastapi-instrumentator
(``vllm/entrypoints/serve/instrumentator/metrics.py``; earlier releases in ``mount_metrics``
of ``vllm/entrypoints/openai/api_server.py``)::

    Instrumentator(excluded_handlers=["/metrics", "/health", "/load", "/ping", "/version",
                                      "/server_info"], registry=registry).add().instrument(app)

whose default instrumentation exports, among others,

- ``http_requests_total{handler, method, status}``: a counter; ``status`` is grouped
  (``should_group_status_codes=True``: ``"2xx"``, ``"4xx"``, ``"5xx"``), ``handler`` is the route
  template (``/v1/chat/completions``), or ``"none"`` for a path no route matches
  (``should_group_untemplated=True``);
- ``http_request_duration_seconds{handler, method}``: a histogram with buckets 0.1, 0.5, 1 s
  (time until the last byte of the response, streamed or not);
- ``http_request_duration_highr_seconds``: the same without labels, with 21 buckets.

llm-d-inference-sim has none of them, and answers its injected failures
(``--failure-injection-rate``) before any of its own metrics sees the request. This module keeps
the same series, counted by the fault proxy in front of the simulator (``irsandbox.faultproxy``),
and renders them in Prometheus' text format (0.0.4) to be appended to the simulator's ``/metrics``.

Pure: no I/O. The fault proxy calls :meth:`HttpMetrics.observe` once per response.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable

#: vLLM's ``excluded_handlers`` (matched with ``re.search``, as the instrumentator does) plus the
#: sandbox's own control paths, which a real vLLM does not have: the simulator's
#: ``/admin/config`` and ``/fake_metrics``, and the shim's ``/-/shim/...``.
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
SANDBOX_PATHS = ("/-/", "/admin/", "/fake_metrics")
_EXCLUDED = re.compile("|".join(re.escape(p) for p in EXCLUDED_HANDLERS))

#: Routes of a vLLM OpenAI server that llm-d-inference-sim v0.10 also serves (its
#: ``pkg/communication/http.go``): a request to one of them is labelled with the path, any other
#: path with ``handler="none"`` (vLLM answers 404 there).
VLLM_ROUTES = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/chat/completions/render",
    "/v1/completions/render", "/v1/responses", "/v1/messages", "/inference/v1/generate",
    "/v1/embeddings", "/v1/models", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
    "/tokenize", "/detokenize", "/sleep", "/wake_up", "/is_sleeping",
})

#: prometheus-fastapi-instrumentator's default ``latency_lowr_buckets`` and
#: ``latency_highr_buckets`` (+Inf is implicit).
LOWR_BUCKETS = (0.1, 0.5, 1.0)
HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5,
                 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0)

REQUESTS = "http_requests_total"
DURATION = "http_request_duration_seconds"
DURATION_HIGHR = "http_request_duration_highr_seconds"


def handler_of(path: str) -> str | None:
    """The ``handler`` label for a request path, or None if the request is not counted."""
    if any(path.startswith(p) for p in SANDBOX_PATHS) or _EXCLUDED.search(path):
        return None
    return path if path in VLLM_ROUTES else "none"


def group_status(code: int) -> str:
    """``503`` -> ``"5xx"`` (``should_group_status_codes=True``)."""
    return f"{str(int(code))[0]}xx"


def _fmt(value: float) -> str:
    """A sample value or bucket bound as prometheus_client writes it (``1.0``, ``+Inf``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return f"{{{inner}}}" if inner else ""


class _Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; last: > max bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name: str, labels: tuple[tuple[str, str], ...]) -> list[str]:
        out = []
        cumulative = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += n
            out.append(f"{name}_bucket{_labels((*labels, ('le', _fmt(bound))))} "
                       f"{_fmt(cumulative)}")
        out.append(f"{name}_count{_labels(labels)} {_fmt(cumulative)}")
        out.append(f"{name}_sum{_labels(labels)} {_fmt(self.sum)}")
        return out


class HttpMetrics:
    """Counters of served responses, by (handler, method, grouped status)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = {}
        self.duration: dict[tuple[str, str], _Histogram] = {}
        self.duration_highr = _Histogram(HIGHR_BUCKETS)

    def observe(self, handler: str, method: str, status: int, seconds: float) -> None:
        key = (handler, method, group_status(status))
        self.requests[key] = self.requests.get(key, 0) + 1
        hist = self.duration.get((handler, method))
        if hist is None:
            hist = self.duration[(handler, method)] = _Histogram(LOWR_BUCKETS)
        hist.observe(seconds)
        self.duration_highr.observe(seconds)

    def families(self) -> dict[str, list[str]]:
        """Metric family name -> its lines (HELP, TYPE, samples), in the text format."""
        req = [f"# HELP {REQUESTS} Total number of requests by method, status and handler.",
               f"# TYPE {REQUESTS} counter"]
        for (handler, method, status), n in sorted(self.requests.items()):
            req.append(f"{REQUESTS}"
                       f"{_labels((('handler', handler), ('method', method), ('status', status)))}"
                       f" {_fmt(n)}")
        dur = [f"# HELP {DURATION} Latency with only few buckets by handler. Made to be only used "
               "if aggregation by handler is important. ",
               f"# TYPE {DURATION} histogram"]
        for (handler, method), hist in sorted(self.duration.items()):
            dur += hist.lines(DURATION, (("handler", handler), ("method", method)))
        highr = [f"# HELP {DURATION_HIGHR} Latency with many buckets but no API specific labels. "
                 "Made for more accurate percentile calculations. ",
                 f"# TYPE {DURATION_HIGHR} histogram"]
        highr += self.duration_highr.lines(DURATION_HIGHR, ())
        return {REQUESTS: req, DURATION: dur, DURATION_HIGHR: highr}

    def render(self) -> str:
        return "".join(line + "\n" for lines in self.families().values() for line in lines)


_FAMILY = re.compile(r"^# (?:TYPE|HELP) (\S+)", re.MULTILINE)


def merge(upstream: str, metrics: HttpMetrics) -> str:
    """The simulator's ``/metrics`` text with the shim's families appended (a family the upstream
    already exposes is left out: one name may appear only once in a scrape)."""
    present = set(_FAMILY.findall(upstream))
    own = "".join(line + "\n" for name, lines in metrics.families().items()
                  if name not in present for line in lines)
    if upstream and not upstream.endswith("\n"):
        upstream += "\n"
    return upstream + own
