"""The metrics an analysis actually measures: the explicit ones plus those the SLO implies.

Pure and I/O-free so both the core (verdicts) and the metrics layer (queries) derive the same
list from the same spec; it lives in ``api`` because ``core`` may not import ``metrics``.
"""

from __future__ import annotations

from .duration import parse_duration
from .spec import AnalysisSpec, MetricSpec, SloSpec

#: SLO field → built-in template.  The implied metric is named ``slo-<template>``.
SLO_TEMPLATES = (("ttft_p99", "ttft-p99"), ("itl_p99", "itl-p99"), ("e2e_p99", "e2e-p99"))


def slo_metric_name(template: str) -> str:
    return f"slo-{template}"


def slo_metrics(slo: SloSpec) -> list[MetricSpec]:
    """One metric per SLO target: breach when the revision's p99 > ``factor`` × target seconds.

    Window and minimum samples are left unset, so the analysis defaults apply.
    """
    out = []
    for field, template in SLO_TEMPLATES:
        target = getattr(slo, field)
        if target is not None:
            limit = round(slo.factor * parse_duration(target), 6)  # 1.5 × 0.3 must print as 0.45
            out.append(MetricSpec(name=slo_metric_name(template), template=template, max=limit))
    return out


#: The metrics ``spec.analysis.probes`` implies.
PROBE_ERRORS, PROBE_TTFT = "probe-errors", "probe-ttft-p99"


def probe_metrics(analysis: AnalysisSpec) -> list[MetricSpec]:
    """With probes: their error rate (``max: probes.maxErrorRate``), and their time to first
    token against the same breach line as ``slo-ttft-p99`` when ``slo.ttftP99`` is set."""
    if analysis.probes is None:
        return []
    out = [MetricSpec(name=PROBE_ERRORS, template="probe-error-rate",
                      max=analysis.probes.max_error_rate)]
    if analysis.slo is not None and analysis.slo.ttft_p99 is not None:
        limit = round(analysis.slo.factor * parse_duration(analysis.slo.ttft_p99), 6)
        out.append(MetricSpec(name=PROBE_TTFT, template="probe-ttft-p99", max=limit))
    return out


def effective_metrics(analysis: AnalysisSpec) -> list[MetricSpec]:
    """The explicit metrics in spec order, then the SLO-implied ones, then the probes' ones.

    An explicit metric with the same name (``slo-ttft-p99``) replaces the implied one, so a user
    can tighten, relax or re-window it.  An explicit ``ttft-p99`` metric under another name does
    not: it is a different check (often relative to stable) and both apply.
    """
    explicit = {m.name for m in analysis.metrics}
    implied = (slo_metrics(analysis.slo) if analysis.slo else []) + probe_metrics(analysis)
    return list(analysis.metrics) + [m for m in implied if m.name not in explicit]
