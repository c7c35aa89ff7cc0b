"""A tiny HTTP server that serves vLLM-style /metrics for several simulated pods.

Each pod has a :class:`PodProfile`; every scrape of ``/pods/<namespace>/<pod>/metrics`` first
advances that pod's counters by one "tick" (``requests`` finished requests, each observed at
fixed latencies), then renders the Prometheus text format.  Driving the counters from scrapes
makes rates independent of wall-clock jitter: per tick, bucket ratios and error ratios are exact.

Prometheus attaches ``namespace`` and ``pod`` as target labels (see :func:`scrape_configs`), as a
kube-prometheus PodMonitor does; the exposition itself carries vLLM's ``model_name``/``engine``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# vLLM V1 bucket boundaries (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKENS_PER_REQUEST = 4  # inter-token observations per request


def bucket_bounds(buckets: tuple[float, ...], value: float) -> tuple[float, float]:
    """(lower, upper] of the bucket an observation of ``value`` lands in."""
    lower = 0.0
    for b in buckets:
        if value <= b:
            return lower, b
        lower = b
    return lower, float("inf")


@dataclass
class PodProfile:
    """What one simulated vLLM pod reports per scrape tick."""

    namespace: str
    pod: str
    requests: int = 10  # finished requests per tick; 0 = a quiet pod (series exist, never move)
    ttft: float = 0.08
    itl: float = 0.03
    e2e: float = 1.2
    new_names: bool = True  # vLLM ≥ 0.11 names; False: the older 0.9/0.10 names
    old_itl: float | None = None  # also expose the deprecated TPOT histogram at this value
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 1})  # ratio per tick
    http: dict[str, int] | None = None  # HTTP status class → ratio per tick (None: no series)
    prefix_hits: int = 50
    prefix_queries: int = 100
    preemptions: int = 0
    kv_usage: float = 0.5
    gpu_temp: float | None = 70.0
    labels: str = 'model_name="m",engine="0"'
    #: Request series only from the first request on (the sandbox's simulator does this; vLLM
    #: creates them at start, at 0): a lazy pod with ``requests=0`` exposes only its gauges.
    lazy: bool = False
    state: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def tick(self) -> None:
        s, n = self.state, self.requests
        s["ttft"] += n
        s["itl"] += n * TOKENS_PER_REQUEST
        s["e2e"] += n
        total = sum(self.finished.values())
        for reason, share in self.finished.items():
            s[f"finished:{reason}"] += n * share / total
        if self.http:
            http_total = sum(self.http.values())
            for status, share in self.http.items():
                s[f"http:{status}"] += n * share / http_total
        s["hits"] += self.prefix_hits if n else 0
        s["queries"] += self.prefix_queries if n else 0
        s["preemptions"] += self.preemptions if n else 0

    def render(self) -> str:
        s, lb = self.state, self.labels
        out: list[str] = []
        if self.lazy and not s["e2e"]:
            return self._gauges()
        out += _histogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS, self.ttft,
                          s["ttft"], lb)
        itl_name = ("vllm:inter_token_latency_seconds" if self.new_names
                    else "vllm:time_per_output_token_seconds")
        out += _histogram(itl_name, ITL_BUCKETS, self.itl, s["itl"], lb)
        if self.old_itl is not None:
            out += _histogram("vllm:time_per_output_token_seconds", ITL_BUCKETS, self.old_itl,
                              s["itl"], lb)
        out += _histogram("vllm:e2e_request_latency_seconds", E2E_BUCKETS, self.e2e, s["e2e"], lb)
        out.append("# TYPE vllm:request_success_total counter")
        for reason in self.finished:
            out.append(
                f'vllm:request_success_total{{{lb},finished_reason="{reason}"}} '
                f'{s[f"finished:{reason}"]}'
            )
        if self.http:
            out.append("# TYPE http_requests_total counter")
            for status in self.http:
                out.append(
                    f'http_requests_total{{handler="/v1/chat/completions",method="POST",'
                    f'status="{status}"}} {s[f"http:{status}"]}'
                )
        prefix = "vllm:prefix_cache" if self.new_names else "vllm:gpu_prefix_cache"
        out += [f"# TYPE {prefix}_hits_total counter", f"{prefix}_hits_total{{{lb}}} {s['hits']}",
                f"# TYPE {prefix}_queries_total counter",
                f"{prefix}_queries_total{{{lb}}} {s['queries']}"]
        out += ["# TYPE vllm:num_preemptions_total counter",
                f"vllm:num_preemptions_total{{{lb}}} {s['preemptions']}"]
        return "\n".join(out) + "\n" + self._gauges()

    def _gauges(self) -> str:
        lb = self.labels
        usage = "vllm:kv_cache_usage_perc" if self.new_names else "vllm:gpu_cache_usage_perc"
        out = [f"# TYPE {usage} gauge", f"{usage}{{{lb}}} {self.kv_usage}",
               "# TYPE vllm:num_requests_running gauge",
               f"vllm:num_requests_running{{{lb}}} {min(self.requests, 3)}"]
        if self.gpu_temp is not None:
            out += ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
                    f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-{self.pod}"}} {self.gpu_temp}']
        return "\n".join(out) + "\n"


def _histogram(
    name: str, buckets: tuple[float, ...], value: float, count: float, labels: str
) -> list[str]:
    """All ``count`` observations equal ``value``: cumulative buckets jump at its bucket."""
    lines = [f"# TYPE {name} histogram"]
    for b in buckets:
        lines.append(f'{name}_bucket{{{labels},le="{b}"}} {count if value <= b else 0.0}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')
    lines += [f"{name}_sum{{{labels}}} {count * value}", f"{name}_count{{{labels}}} {count}"]
    return lines


class LoopbackServer:
    """An HTTP server on 127.0.0.1 (random port) in a daemon thread, for a ``with`` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def send_metrics(handler: BaseHTTPRequestHandler, body: bytes) -> None:
    """Answer 200 with a Prometheus text exposition."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class FakeVllmExporter(LoopbackServer):
    """Serves every profile at ``/pods/<namespace>/<pod>/metrics`` on 127.0.0.1 (random port)."""

    def __init__(self, profiles: list[PodProfile]) -> None:
        self.profiles = {(p.namespace, p.pod): p for p in profiles}
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                key = (parts[1], parts[2]) if len(parts) == 4 and parts[0] == "pods" else None
                profile = exporter.profiles.get(key) if key else None
                if profile is None:
                    self.send_error(404)
                    return
                with exporter.lock:
                    profile.tick()
                    body = profile.render().encode()
                send_metrics(self, body)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        super().__init__(Handler)

    def scrape_configs(self) -> list[dict[str, Any]]:
        """One job per pod, with the ``namespace``/``pod`` target labels a PodMonitor sets."""
        return [
            {
                "job_name": f"{ns}/{pod}",
                "metrics_path": f"/pods/{ns}/{pod}/metrics",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{self.port}"], "labels": {"namespace": ns, "pod": pod}}
                ],
            }
            for ns, pod in self.profiles
        ]
