"""The operator's own Prometheus metrics, in the text exposition format.

A deliberately tiny registry (gauges, counters, one kind of histogram) instead of another
dependency: the operator exports a handful of series, and alerts read them.

* ``inference_rollout_info{namespace,name,phase}`` 1 per rollout (phase as a label, for alerts)
* ``inference_rollout_step`` / ``inference_rollout_canary_weight`` per rollout
* ``inference_rollout_analysis_verdicts_total{namespace,name,metric,verdict}``
* ``inference_rollout_analysis_value{namespace,name,metric,role}`` the latest measured value
* ``inference_rollout_rollbacks_total{namespace,name,reason}``
* ``inference_rollout_evaluation_runs_total{namespace,name,verdict}`` and
  ``inference_rollout_evaluation_score{namespace,name,revision,role}`` (the business gate)
* ``inference_rollout_decision_to_write_seconds`` histogram: a decision until its writes landed
* ``inference_rollout_reconcile_lag_seconds`` histogram: how late a due reconcile got its slot
* ``inference_rollout_reconcile_errors_total{kind}``
"""

from __future__ import annotations

import bisect
from collections import defaultdict

Labels = tuple[tuple[str, str], ...]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _fmt(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels)
    return "{" + inner + "}"


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.samples: list[float] = []  # recent values, for benchmarks' percentiles

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.sum += value
        self.samples.append(value)
        if len(self.samples) > 10_000:
            del self.samples[:5_000]


class Registry:
    def __init__(self) -> None:
        self.gauges: dict[str, dict[Labels, float]] = defaultdict(dict)
        self.counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.histograms: dict[str, Histogram] = defaultdict(Histogram)

    def set(self, metric: str, value: float, /, **labels: str) -> None:
        self.gauges[metric][tuple(sorted(labels.items()))] = value

    def inc(self, metric: str, amount: float = 1.0, /, **labels: str) -> None:
        self.counters[metric][tuple(sorted(labels.items()))] += amount

    def observe(self, name: str, value: float) -> None:
        self.histograms[name].observe(value)

    def forget(self, **match: str) -> None:
        """Drop every gauge series of one rollout (it was deleted)."""
        for series in self.gauges.values():
            for key in [k for k in series if set(match.items()) <= set(k)]:
                del series[key]

    def render(self) -> str:
        lines: list[str] = []
        for name, series in sorted(self.gauges.items()):
            lines.append(f"# TYPE {name} gauge")
            lines += [f"{name}{_fmt(k)} {v:g}" for k, v in sorted(series.items())]
        for name, series in sorted(self.counters.items()):
            lines.append(f"# TYPE {name} counter")
            lines += [f"{name}{_fmt(k)} {v:g}" for k, v in sorted(series.items())]
        for name, h in sorted(self.histograms.items()):
            lines.append(f"# TYPE {name} histogram")
            running = 0
            for bound, count in zip(BUCKETS, h.counts, strict=False):
                running += count
                lines.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
            lines.append(f'{name}_bucket{{le="+Inf"}} {sum(h.counts)}')
            lines.append(f"{name}_sum {h.sum:g}")
            lines.append(f"{name}_count {sum(h.counts)}")
        return "\n".join(lines) + "\n"


REGISTRY = Registry()
