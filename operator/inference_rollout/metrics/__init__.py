"""The metrics layer: PromQL for one revision, instant queries against Prometheus, measurements.

It only measures; verdicts are computed by :mod:`inference_rollout.core.verdicts`.
See docs/metrics.md.
"""

from .measure import build_queries, measure, window_seconds
from .promql import Revision, quote, regex_escape, substitute
from .source import BadQuery, MetricQueryError, MetricSource, NoData, PrometheusSource, Unreachable
from .templates import TEMPLATES, Template

__all__ = [
    "TEMPLATES",
    "BadQuery",
    "MetricQueryError",
    "MetricSource",
    "NoData",
    "PrometheusSource",
    "Revision",
    "Template",
    "Unreachable",
    "build_queries",
    "measure",
    "quote",
    "regex_escape",
    "substitute",
    "window_seconds",
]
