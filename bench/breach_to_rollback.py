"""Breach to rollback, end to end on the sandbox: from the moment a live canary's breach is visible
in Prometheus to the HTTPRoute holding 100 % stable, in analysis intervals (DESIGN §9: ≤ 2).

    .venv/bin/python bench/breach_to_rollback.py [--runs 6] [--interval 5s] [--rate 8]

Method: one namespace, the operator as a process watching only it.  ``--runs`` rollouts (1
replica, GPU limit 0, vLLM simulators, ``--rate`` req/s of background load each) are each
released to a *healthy* canary (TTFT 5 ms; SLO 100 ms, breach above 150 ms) held at 50 % with a
1 h pause, until the canary's ``slo-ttft-p99`` verdict is Pass.  Then, one rollout at a time, the
running canary pods are degraded live: annotated ``sim.inference.dev/ttft-ms=400``, which the
sandbox bridge applies through the simulator's /admin/config (no restart; a template change
would be a new release).  Meanwhile:

* Prometheus is queried every 250 ms with the operator's own PromQL for that canary (the
  ttft-p99 template over ``Revision(ns, rollout, canary).selector``, the same window, and the
  same sample-count guard), evaluated at the request's send time; the breach is *visible* at
  the first evaluation with p99 > threshold and enough samples;
* an observer LISTs the namespace's HTTPRoutes every 20 ms; the rollback is the first poll that
  shows 100 % stable (its return time).

Reported per run: (rollback − visible) / interval, and visible − annotation, and the failing
verdict's measuredAt − visible (how long the operator took to *look*).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from common import Bench, RouteObserver, parse_iso, percentile, save

from inference_rollout.api.duration import parse_duration
from inference_rollout.api.effective import effective_metrics
from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.metrics.measure import build_queries, window_seconds
from inference_rollout.metrics.promql import Revision, format_window
from irsandbox.harness import BackgroundLoad
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

METRIC = "slo-ttft-p99"
ANN_TTFT = "sim.inference.dev/ttft-ms"


@dataclass
class Run:
    rollout: str
    canary: str
    stable: str
    annotated_at: float
    pods: list[str]
    visible_at: float | None = None
    visible_value: float | None = None
    rollback_seen: float | None = None
    rollback_lo: float | None = None
    measured_at: float | None = None
    reason: str = ""
    value: float | None = None
    prom_polls: int = 0

    def intervals(self, interval: float) -> float | None:
        if self.visible_at is None or self.rollback_seen is None:
            return None
        return (self.rollback_seen - self.visible_at) / interval


def prom_query(url: str, query: str, at: float) -> float | None:
    """One instant query evaluated at ``at``; None for an empty result."""
    params = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=2) as r:
        data = json.loads(r.read())
    result = data.get("data", {}).get("result") or []
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value


def held_manifest(name: str, prometheus: str, interval: str) -> dict[str, Any]:
    return sandbox_rollout(name, replicas=1, gpus=0, prometheus=prometheus, metrics=[],
                           steps=[{"weight": 50, "pause": "1h"}, {"weight": 100}],
                           analysis={"slo": {"ttftP99": "100ms"}, "interval": interval})


@dataclass
class Probe:
    """The operator's own PromQL for one canary's breach: value and sample-count queries over the
    same window, with the metric's threshold and minimum samples."""

    metric: Any
    window: str
    min_samples: int

    @classmethod
    def of(cls, manifest: dict[str, Any], interval: float, name: str = METRIC) -> Probe:
        spec = InferenceRolloutSpec.parse(manifest["spec"])
        metric = next(m for m in effective_metrics(spec.analysis) if m.name == name)
        assert spec.analysis.prometheus is not None and metric.max is not None
        window = format_window(window_seconds(
            metric, interval, parse_duration(spec.analysis.prometheus.scrape_interval)))
        min_samples = spec.analysis.min_samples if metric.min_samples is None \
            else metric.min_samples
        return cls(metric, window, min_samples)

    def queries(self, ns: str, rollout: str, canary: str) -> Any:
        return build_queries(self.metric, Revision(ns, rollout, canary), self.window,
                             self.min_samples)

    def measure(self, prom: str, queries: Any, at: float) -> tuple[float | None, float | None]:
        """The canary's value and sample count evaluated at ``at`` (raises OSError)."""
        value = prom_query(prom, queries.value, at)
        samples = prom_query(prom, queries.samples, at) if queries.samples else math.inf
        return value, samples

    def breaches(self, value: float | None, samples: float | None) -> bool:
        return value is not None and value > self.metric.max \
            and (samples or 0) >= self.min_samples


def hold_healthy_canaries(bench: Bench, args: argparse.Namespace,
                          loads: list[BackgroundLoad]) -> list[tuple[Release, str, str]]:
    """``--runs`` rollouts, each Healthy, under load, with a healthy canary held at 50 % whose
    verdict is Pass; returns (release, stable, canary) for each."""
    prom = bench.env["PROMETHEUS_URL"]
    releases = [bench.release(held_manifest(f"br{i}", prom, args.interval))
                for i in range(args.runs)]
    for rel in releases:
        rel.apply()
    stables = [rel.wait_healthy(timeout=180)["stableRevision"] for rel in releases]
    loads += [BackgroundLoad(bench.env, rel.host, rate=args.rate, seconds=int(args.timeout) + 120)
              for rel in releases]
    for rel in releases:
        rel.apply(with_template(rel.manifest, version="v2"))  # healthy canary, 5 ms
    canaries = []
    for rel in releases:
        st = rel.wait(lambda s: s.get("canaryWeight") == 50
                      and (s.get("analysis") or {}).get(METRIC, {}).get("verdict") == "Pass",
                      240, f"canary at 50% with {METRIC} Pass")
        canaries.append(st["canaryRevision"])
    return list(zip(releases, stables, canaries, strict=True))


def degrade(bench: Bench, rel: Release, stable: str, canary: str) -> Run:
    """Annotate the running canary pods with a 400 ms time to first token (applied live)."""
    pods = bench.cluster.core.list_namespaced_pod(
        bench.ns, label_selector=f"rollouts.inference.dev/rollout={rel.name},"
        f"rollouts.inference.dev/revision={canary}").items
    r = Run(rel.name, canary, stable, time.time(), [p.metadata.name for p in pods])
    for p in pods:
        bench.cluster.core.patch_namespaced_pod(
            p.metadata.name, bench.ns, {"metadata": {"annotations": {ANN_TTFT: "400"}}})
    return r


def watch_breach_and_rollback(bench: Bench, r: Run, probe: Probe, queries: Any,
                              observer: RouteObserver, interval: float,
                              loads_1m: list[float]) -> None:
    """Every 250 ms until both are seen (or 6 intervals + 30 s): is the breach visible in
    Prometheus, and has the observer seen the route go 100 % stable?"""
    prom = bench.env["PROMETHEUS_URL"]
    run_deadline = time.monotonic() + 6 * interval + 30
    svc_c, svc_s = f"{r.rollout}-{r.canary}", f"{r.rollout}-{r.stable}"
    while time.monotonic() < run_deadline and (r.visible_at is None or r.rollback_seen is None):
        at = time.time()
        if r.visible_at is None:
            try:
                value, samples = probe.measure(prom, queries, at)
                r.prom_polls += 1
            except OSError:
                value = samples = None
            if probe.breaches(value, samples):
                r.visible_at, r.visible_value = at, value
        if r.rollback_seen is None:
            for c in observer.snapshot():
                if (c.route == r.rollout and c.hi >= r.annotated_at
                        and c.before.get(svc_c, 0) > 0 and c.after.get(svc_c, 0) == 0
                        and c.after.get(svc_s) == 100):
                    r.rollback_seen, r.rollback_lo = c.hi, c.lo
                    break
        loads_1m.append(os.getloadavg()[0])
        time.sleep(max(0.0, 0.25 - (time.time() - at)))


def record_verdict(rel: Release, r: Run) -> None:
    """The failing verdict as the status holds it (the route is written before the status: give
    the status a moment to follow)."""
    st = rel.status()
    settle = time.monotonic() + 15
    while not st.get("aborted") and r.rollback_seen and time.monotonic() < settle:
        time.sleep(0.2)
        st = rel.status()
    res = (st.get("analysis") or {}).get(METRIC) or {}
    r.reason, r.value = st.get("abortReason") or "", res.get("value")
    r.measured_at = parse_iso(res.get("measuredAt"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench("br", args)
    interval = parse_duration(args.interval)
    bench.info["interval_s"] = interval
    observer = RouteObserver(bench.observer_client(), bench.ns, period=0.02,
                             max_seconds=args.timeout + 60)
    loads: list[BackgroundLoad] = []
    runs: list[Run] = []
    loads_1m: list[float] = []
    try:
        bench.op.start()
        held = hold_healthy_canaries(bench, args, loads)
        observer.start()
        probe = Probe.of(held[0][0].manifest, interval)
        bench.info.update(threshold=probe.metric.max, window=probe.window,
                          min_samples=probe.min_samples)
        deadline = time.monotonic() + args.timeout
        for rel, stable, canary in held:
            if time.monotonic() > deadline:
                break
            queries = probe.queries(bench.ns, rel.name, canary)
            if not runs:
                bench.info["promql"] = {"value": queries.value, "samples": queries.samples}
            time.sleep(interval * args.phase)  # spread the breach over the analysis cycle
            r = degrade(bench, rel, stable, canary)
            watch_breach_and_rollback(bench, r, probe, queries, observer, interval, loads_1m)
            record_verdict(rel, r)
            runs.append(r)
            n = r.intervals(interval)
            print(f"  run {len(runs)}: {rel.name} visible +"
                  f"{(r.visible_at or math.nan) - r.annotated_at:.2f}s after annotation, "
                  f"rollback {n if n is None else round(n, 2)} intervals after visible "
                  f"({r.reason})", flush=True)
    finally:
        observer.stop()
        for load in loads:
            load.stop()
        bench.finish(args.keep)
    return report(bench, runs, interval, loads_1m)


def report(bench: Bench, runs: list[Run], interval: float,
           loads_1m: list[float]) -> dict[str, Any]:
    done = [r for r in runs if r.intervals(interval) is not None]
    ivals = [r.intervals(interval) or 0.0 for r in done]
    return {
        **bench.info,
        "duration_s": bench.elapsed(),
        "runs": len(runs),
        "complete_runs": len(done),
        "loadavg_1m_during_runs": {"mean": sum(loads_1m) / len(loads_1m) if loads_1m else None,
                                   "max": max(loads_1m, default=None)},
        "rollback_minus_visible_intervals": {
            "n": len(ivals), "p50": percentile(ivals, 50), "max": max(ivals, default=math.nan),
            "mean": sum(ivals) / len(ivals) if ivals else math.nan},
        "visible_minus_annotation_s": [round((r.visible_at or math.nan) - r.annotated_at, 3)
                                       for r in runs],
        "verdict_minus_visible_s": [round((r.measured_at or math.nan) - (r.visible_at or math.nan),
                                          3) for r in runs],
        "route_minus_verdict_ms": [round(((r.rollback_seen or math.nan)
                                          - (r.measured_at or math.nan)) * 1000) for r in runs],
        "per_run": [asdict(r) | {"intervals": r.intervals(interval)} for r in runs],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=6, help="rollouts, each degraded once (≥ 5)")
    p.add_argument("--interval", default="5s", help="analysis interval")
    p.add_argument("--rate", type=float, default=8, help="background load per rollout, req/s")
    p.add_argument("--phase", type=float, default=0.37,
                   help="pause between runs, in intervals (de-synchronises breach and cycle)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    result = run(args)
    path = save("breach_to_rollback", result)
    s = result["rollback_minus_visible_intervals"]
    print()
    print(f"runs: {result['complete_runs']}/{result['runs']} complete, interval "
          f"{result['interval_s']:g}s, window {result.get('window')}, threshold "
          f"{result.get('threshold')} s")
    print(f"(rollback − visible) / interval: p50 {s['p50']:.2f}, mean {s['mean']:.2f}, "
          f"max {s['max']:.2f}  (each: "
          f"{[round(r['intervals'], 2) for r in result['per_run'] if r['intervals'] is not None]})")
    print(f"load average (1 min) during the runs: {result['loadavg_1m_during_runs']}")
    print(f"visible − annotation (s): {result['visible_minus_annotation_s']}")
    print(f"failing verdict − visible (s): {result['verdict_minus_visible_s']}")
    print(f"route 100% stable − failing verdict (ms): {result['route_minus_verdict_ms']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
