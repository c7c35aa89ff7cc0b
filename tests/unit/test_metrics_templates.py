"""Template shapes: every series selector is scoped to the revision; renames are or-ed per pod."""

from __future__ import annotations

import re

import pytest

from inference_rollout.api.spec import BUILTIN_TEMPLATES, PROBE_TEMPLATES, MetricSpec
from inference_rollout.metrics.gateway_templates import GATEWAY_TEMPLATES
from inference_rollout.metrics.measure import build_queries, window_seconds
from inference_rollout.metrics.promql import Revision
from inference_rollout.metrics.templates import TEMPLATES

REV = Revision("prod", "chat", "7d9f8c6b5")
SEL = REV.selector
# A metric name followed by a selector: `vllm:foo_bucket{...}` / `DCGM_FI_DEV_GPU_TEMP{...}`.
SERIES = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")


def all_queries() -> list[tuple[str, str]]:
    out = []
    for name, t in TEMPLATES.items():
        out.append((name, t.value(SEL, "60s")))
        if t.samples:
            out.append((f"{name}/samples", t.samples(SEL, "60s")))
    return out


def test_one_template_per_builtin_name() -> None:
    together = [*TEMPLATES, *GATEWAY_TEMPLATES, *PROBE_TEMPLATES]
    assert sorted(together) == sorted(BUILTIN_TEMPLATES)


@pytest.mark.parametrize(("name", "query"), all_queries())
def test_every_series_is_scoped_to_the_revision(name: str, query: str) -> None:
    series = SERIES.findall(query)
    assert series, query
    for metric, matchers in series:
        assert matchers.startswith(SEL), (name, metric, matchers)
    # No bare metric name outside a selector (which would read every pod in Prometheus).
    bare = re.sub(SERIES, "", query)
    assert not re.search(r"vllm:|DCGM_|http_requests_total", bare), (name, bare)
    assert query.count("(") == query.count(")")


def test_latency_quantile_ors_renamed_rates_before_summing() -> None:
    q = TEMPLATES["itl-p99"].value(SEL, "60s")
    assert q == (
        "histogram_quantile(0.99, sum by (le) ("
        f"rate(vllm:inter_token_latency_seconds_bucket{{{SEL}}}[60s]) or "
        f"rate(vllm:time_per_output_token_seconds_bucket{{{SEL}}}[60s])))"
    )


def test_error_rate_counts_engine_errors_and_http_5xx_without_double_counting() -> None:
    q = TEMPLATES["error-rate"].value(SEL, "60s")
    assert 'finished_reason="error"' in q and 'status=~"5.."' in q
    assert "abort" not in q  # client cancellations are not the canary's errors
    assert q.startswith("max(label_replace(")  # the larger of the two views, not their sum


def test_gauges_have_no_sample_guard() -> None:
    assert TEMPLATES["kv-cache-usage"].samples is None
    assert TEMPLATES["gpu-temperature"].samples is None


def metric(**kw: object) -> MetricSpec:
    return MetricSpec.model_validate({"name": "m", "max": 1, **kw})


def test_window_defaults_to_interval_and_is_raised_to_four_scrapes() -> None:
    assert window_seconds(metric(template="ttft-p99"), 60, 15) == 60
    assert window_seconds(metric(template="ttft-p99", window="2m"), 60, 15) == 120
    assert window_seconds(metric(template="ttft-p99", window="10s"), 60, 15) == 60  # 4 × 15s
    assert window_seconds(metric(template="ttft-p99"), 30.4, 1) == 30


def test_sample_guard_off_when_min_samples_is_zero() -> None:
    assert build_queries(metric(template="ttft-p99"), REV, "60s", 0).samples is None
    assert build_queries(metric(template="ttft-p99"), REV, "60s", 20).samples is not None


def test_custom_query_guard_only_with_explicit_min_samples() -> None:
    q = "sum(rate(x{{{selector}}}[{{window}}]))"
    assert build_queries(metric(query=q), REV, "60s", 20).samples is None
    guarded = build_queries(metric(query=q, minSamples=50), REV, "60s", 20)
    assert guarded.value == f"sum(rate(x{{{SEL}}}[60s]))"
    assert guarded.samples == (
        f"sum(increase(vllm:e2e_request_latency_seconds_count{{{SEL}}}[60s]))"
    )


def test_docs_show_every_template_query_as_sent() -> None:
    from pathlib import Path

    doc = re.sub(r"\s+", "", (Path(__file__).parents[2] / "docs" / "metrics.md").read_text())
    for name, t in TEMPLATES.items():
        assert re.sub(r"\s+", "", t.value("SEL", "W")) in doc, name
        if t.samples:
            assert re.sub(r"\s+", "", t.samples("SEL", "W")) in doc, f"{name} samples"
        if t.evidence:
            assert re.sub(r"\s+", "", t.evidence("SEL", "P")) in doc, f"{name} evidence"
