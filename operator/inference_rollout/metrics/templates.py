"""Built-in metric templates (DESIGN §5): PromQL over one revision's pods, for vLLM ≥ 0.9 (V1).

Each template has a value query and, where the value is a per-request statistic, a sample query
counting the requests in the same window (the minimum-sample guard).  Both take the revision's
label matchers (:attr:`Revision.selector`, already escaped) and a window (``"60s"``).

Renames across vLLM versions are handled with ``or`` *on the rate vectors*, before any
aggregation: ``rate()`` drops the metric name, so the new and old series of one pod share a
label set and ``or`` keeps the new one, falling back to the old one where only it exists.
Applying ``or`` after ``sum``/``histogram_quantile`` would not fall back per pod, and applying it
to the quantiles would hide the old series' buckets.  docs/metrics.md has the full text of every
query and what each counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..api.spec import BUILTIN_TEMPLATES, GATEWAY_TEMPLATES, PROBE_TEMPLATES
from .promql import counted_increase

Render = Callable[[str, str], str]  # (selector, window) -> PromQL


@dataclass(frozen=True)
class Template:
    name: str
    unit: str
    summary: str
    value: Render
    samples: Render | None  # None: a gauge, no per-request sample guard
    #: The Sequential rule's counts: one query returning a vector keyed by ``evidence_label``
    #: (``le`` for a histogram's buckets, ``part`` for the error-rate's four counts).
    evidence: Render | None = None
    evidence_label: str = ""


def _rate(metric: str, sel: str, w: str) -> str:
    return f"rate({metric}{{{sel}}}[{w}])"


def _p99(*bucket_metrics: str) -> Render:
    def render(sel: str, w: str) -> str:
        rates = " or ".join(_rate(m, sel, w) for m in bucket_metrics)
        return f"histogram_quantile(0.99, sum by (le) ({rates}))"

    return render


def _buckets(*bucket_metrics: str) -> Render:
    """Every bucket's increase in one vector (``sum by (le)``); the ``+Inf`` one counts all."""
    def render(sel: str, w: str) -> str:
        increases = " or ".join(f"increase({m}{{{sel}}}[{w}])" for m in bucket_metrics)
        return f"sum by (le) ({increases})"

    return render


def _count(metric: str) -> Render:
    """Observations of a per-request histogram in the window = requests."""
    return lambda sel, w: f"sum(increase({metric}{{{sel}}}[{w}]))"


_REQUESTS = _count("vllm:e2e_request_latency_seconds_count")  # finished requests


def _ratio_or_zero(bad: str, total: str) -> str:
    # `bad` may have no series at all (vLLM < 0.11 has no finished_reason="error"; the 5xx
    # series appears on the first error).  `0 * total` is a zero that exists only where the
    # revision has traffic series, so a revision with no series still yields NoData, never 0.
    return f"({bad} or 0 * {total}) / {total}"


def _labelled(expr: str, source: str) -> str:
    # Distinct labels so `or` keeps both one-element vectors and `max` can pick the larger.
    return f'label_replace({expr}, "source", "{source}", "", "")'


def _error_rate(sel: str, w: str) -> str:
    errors = sel + ',finished_reason="error"'
    http_5xx = sel + ',status=~"5.."'  # matches grouped "5xx" and exact "500", "503", ...
    # Counts, not rates: the ratio is the same, and only counts can include a series' birth.
    engine = _ratio_or_zero(
        f"sum({counted_increase('vllm:request_success_total', errors, w)})",
        f"sum({counted_increase('vllm:request_success_total', sel, w)})",
    )
    http = _ratio_or_zero(
        f"sum({counted_increase('http_requests_total', http_5xx, w)})",
        f"sum({counted_increase('http_requests_total', sel, w)})",
    )
    return f"max({_labelled(engine, 'engine')} or {_labelled(http, 'http')})"


def _error_rate_samples(sel: str, w: str) -> str:
    engine = f"sum({counted_increase('vllm:request_success_total', sel, w)})"
    http = f"sum({counted_increase('http_requests_total', sel, w)})"
    return f"max({_labelled(engine, 'engine')} or {_labelled(http, 'http')})"


#: The error-rate's counts, by ``part``: each view's failed and all requests.
ERROR_PARTS = ("engine_errors", "engine_requests", "http_errors", "http_requests")


def _error_counts(sel: str, w: str) -> str:
    errors = sel + ',finished_reason="error"'
    http_5xx = sel + ',status=~"5.."'
    counts = zip(ERROR_PARTS, ("vllm:request_success_total", "vllm:request_success_total",
                               "http_requests_total", "http_requests_total"),
                 (errors, sel, http_5xx, sel), strict=True)
    return " or ".join(
        f'label_replace(sum({counted_increase(metric, s, w)}), "part", "{part}", "", "")'
        for part, metric, s in counts)


def _kv_cache_hit_rate(sel: str, w: str) -> str:
    hits = " or ".join(
        _rate(m, sel, w)
        for m in ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    )
    queries = " or ".join(
        _rate(m, sel, w)
        for m in ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
    )
    return f"sum({hits}) / sum({queries})"


def _preemptions(sel: str, w: str) -> str:
    # Per finished request, not per second: the canary carries a few percent of the traffic,
    # so a raw rate is always "better" than stable's and a relative check would be meaningless.
    return (
        f"sum({_rate('vllm:num_preemptions_total', sel, w)}) / "
        f"sum({_rate('vllm:e2e_request_latency_seconds_count', sel, w)})"
    )


def _kv_cache_usage(sel: str, w: str) -> str:
    return (
        f"max(max_over_time(vllm:kv_cache_usage_perc{{{sel}}}[{w}]) or "
        f"max_over_time(vllm:gpu_cache_usage_perc{{{sel}}}[{w}]))"
    )


def _gpu_temperature(sel: str, w: str) -> str:
    return f"max(max_over_time(DCGM_FI_DEV_GPU_TEMP{{{sel}}}[{w}]))"


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "ttft-p99", "seconds", "99th percentile time to first token",
            _p99("vllm:time_to_first_token_seconds_bucket"),
            _count("vllm:time_to_first_token_seconds_count"),
            _buckets("vllm:time_to_first_token_seconds_bucket"), "le",
        ),
        Template(
            "itl-p99", "seconds", "99th percentile inter-token latency (decode step time)",
            _p99("vllm:inter_token_latency_seconds_bucket",
                 "vllm:time_per_output_token_seconds_bucket"),
            _REQUESTS,  # ITL observations are per token; the guard counts requests
            _buckets("vllm:inter_token_latency_seconds_bucket",
                     "vllm:time_per_output_token_seconds_bucket"), "le",
        ),
        Template(
            "e2e-p99", "seconds", "99th percentile end-to-end request latency",
            _p99("vllm:e2e_request_latency_seconds_bucket"),
            _REQUESTS,
            _buckets("vllm:e2e_request_latency_seconds_bucket"), "le",
        ),
        Template(
            "error-rate", "ratio", "failed requests / all requests (engine errors or HTTP 5xx)",
            _error_rate, _error_rate_samples, _error_counts, "part",
        ),
        Template(
            "kv-cache-hit-rate", "ratio", "prefix-cache hits / prefix-cache queries (tokens)",
            _kv_cache_hit_rate, _REQUESTS,
        ),
        Template(
            "preemptions", "per request", "preemptions per finished request",
            _preemptions, _REQUESTS,
        ),
        Template(
            "kv-cache-usage", "ratio", "peak KV-cache usage of any pod in the window (0..1)",
            _kv_cache_usage, None,
        ),
        Template(
            "gpu-temperature", "°C", "peak GPU temperature of any GPU of the revision (DCGM)",
            _gpu_temperature, None,
        ),
    )
}

# The gateway's templates are rendered by .gateway_templates (they select backends, not pods);
# the probes' are measured by the operator's own requests (evaluation/probes.py), not queried.
_RENDERED_ELSEWHERE = GATEWAY_TEMPLATES | PROBE_TEMPLATES
if set(TEMPLATES) | _RENDERED_ELSEWHERE != set(BUILTIN_TEMPLATES):  # pragma: no cover
    raise RuntimeError(f"templates {sorted(TEMPLATES)} != api BUILTIN_TEMPLATES")
