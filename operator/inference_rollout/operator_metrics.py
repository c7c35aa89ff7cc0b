"""The operator's own Prometheus metrics, kept and rendered by ``prometheus_client``.

One :class:`Registry` (``REGISTRY``) wraps a ``prometheus_client.CollectorRegistry`` of its own
(never the library's global one), so the page shows exactly these series, and the library does
the text format: values as Go prints them (a counter of 1234567 is ``1.234567e+06``, every digit
kept), label escaping, histogram buckets.  Callers name a metric and its labels at the call
(``REGISTRY.set(name, value, **labels)``); a metric's label names are fixed by its first use.

* ``inference_rollout_info{namespace,name,phase}`` 1 per rollout (phase as a label, for alerts)
* ``inference_rollout_step`` / ``inference_rollout_canary_weight`` per rollout
* ``inference_rollout_analysis_verdicts_total{namespace,name,metric,verdict}``
* ``inference_rollout_analysis_value{namespace,name,metric,role}`` the latest measured value
* ``inference_rollout_rollbacks_total{namespace,name,reason}``
* ``inference_rollout_evaluation_runs_total{namespace,name,verdict}`` and
  ``inference_rollout_evaluation_score{namespace,name,revision,role}`` (the business gate)
* ``inference_rollout_release_cost{namespace,name,revision,quantity}`` the current (or last)
  release's ``status.releaseCost``: ``pod_seconds``, ``gpu_seconds``, ``pods_started``,
  ``canary_requests``, ``rolled_back_requests`` (core/cost.py)
* ``inference_rollout_decision_to_write_seconds`` histogram: a decision until its writes landed
* ``inference_rollout_reconcile_lag_seconds`` histogram: how late a due reconcile got its slot
* ``inference_rollout_reconcile_errors_total{kind}``
* ``inference_rollout_status_conflicts_total``, ``inference_rollout_notifications_total{kind,
  result}``

A deleted rollout's series go with it (:func:`forget_rollout`): its gauges and its counters.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, cast

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Counters as Prometheus' own clients export them in the text format: ``x_total`` only, without
# the OpenMetrics ``x_created`` gauge beside each series (the page keeps the series it had).
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: The ``# HELP`` line of each metric (any other name gets a generic one).
HELP = {
    "inference_rollout_info": "1 per rollout, its phase as a label",
    "inference_rollout_step": "the current step (1-based; -1 when none)",
    "inference_rollout_canary_weight": "the canary's traffic weight in percent",
    "inference_rollout_analysis_verdicts_total": "analysis verdicts per metric",
    "inference_rollout_analysis_value": "the latest measured value per metric and revision role",
    "inference_rollout_rollbacks_total": "rollbacks by reason",
    "inference_rollout_evaluation_runs_total": "evaluation set runs by verdict",
    "inference_rollout_evaluation_score": "the latest evaluation score per revision role",
    "inference_rollout_release_cost": "what the current or last release cost, by quantity",
    "inference_rollout_decision_to_write_seconds": "from a decision until its writes landed",
    "inference_rollout_reconcile_lag_seconds": "how late a due reconcile got its slot",
    "inference_rollout_reconcile_errors_total": "reconciles that failed, by error kind",
    "inference_rollout_status_conflicts_total": "status writes refused for a stale version",
    "inference_rollout_notifications_total": "notifications by kind and result",
}

LabelNames = tuple[str, ...]


class Registry:
    """Gauges, counters and unlabelled histograms by name, created on first use."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._gauges: dict[str, tuple[Gauge, LabelNames]] = {}
        self._counters: dict[str, tuple[Counter, LabelNames]] = {}
        self._histograms: dict[str, Histogram] = {}

    def _help(self, name: str) -> str:
        return HELP.get(name, name.replace("_", " "))

    def _labelled(self, store: dict[str, tuple[Any, LabelNames]], kind: type[Any], name: str,
                  labels: LabelNames) -> Any:
        """The metric ``name`` of ``kind`` (made on first use), always with the same labels."""
        with self._lock:
            if name not in store:
                store[name] = (kind(name, self._help(name), labels, registry=self.registry),
                               labels)
            metric, known = store[name]
        if known != labels:
            raise ValueError(f"{kind.__name__.lower()} {name}: labels {labels}, first used "
                             f"with {known}")
        return metric

    def _gauge(self, name: str, labels: LabelNames) -> Gauge:
        return cast(Gauge, self._labelled(self._gauges, Gauge, name, labels))

    def _counter(self, name: str, labels: LabelNames) -> Counter:
        if not name.endswith("_total"):  # the library would export it as name_total
            raise ValueError(f"counter {name}: a counter's name ends in _total")
        return cast(Counter, self._labelled(self._counters, Counter, name, labels))

    def set(self, metric: str, value: float, /, **labels: str) -> None:
        names = tuple(sorted(labels))
        gauge = self._gauge(metric, names)
        (gauge.labels(**labels) if names else gauge).set(value)

    def inc(self, metric: str, amount: float = 1.0, /, **labels: str) -> None:
        names = tuple(sorted(labels))
        counter = self._counter(metric, names)
        (counter.labels(**labels) if names else counter).inc(amount)

    def observe(self, name: str, value: float) -> None:
        with self._lock:
            if name not in self._histograms:
                self._histograms[name] = Histogram(name, self._help(name), buckets=BUCKETS,
                                                   registry=self.registry)
            histogram = self._histograms[name]
        histogram.observe(value)

    @staticmethod
    def _remove(series: Mapping[str, tuple[Gauge | Counter, LabelNames]],
                match: dict[str, str]) -> None:
        for metric, names in list(series.values()):
            if match and set(match) <= set(names):
                metric.remove_by_labels(match)

    def forget(self, **match: str) -> None:
        """Drop every gauge series carrying these labels (a rollout's gauges, rewritten on each
        reconcile so that an old phase or revision does not linger)."""
        self._remove(self._gauges, match)

    def forget_rollout(self, namespace: str, name: str) -> None:
        """Drop every series of one rollout, gauges and counters: it was deleted."""
        match = {"namespace": namespace, "name": name}
        self._remove(self._gauges, match)
        self._remove(self._counters, match)

    def render(self) -> str:
        """The text exposition format (``text/plain; version=0.0.4``)."""
        return generate_latest(self.registry).decode()


REGISTRY = Registry()


def forget_rollout(namespace: str, name: str) -> None:
    """The rollout ``namespace/name`` was deleted: its series leave the operator's page."""
    REGISTRY.forget_rollout(namespace, name)
