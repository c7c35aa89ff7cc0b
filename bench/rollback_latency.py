"""Rollback write latency: from a failed verdict to the HTTPRoute holding 100 % stable in the API
server (DESIGN §9: p50 ≤ 250 ms), over many rollbacks on the sandbox.

    .venv/bin/python bench/rollback_latency.py [--rollouts 3] [--rollbacks 36] [--rate 8]

Method: one namespace, the operator as a process watching only it (its own ports and log, the
package exported from the last commit: ``IR_BENCH_REF``).  ``--rollouts`` lanes run in parallel;
each lane creates a fresh InferenceRollout (1 replica, GPU limit 0, a vLLM simulator behind the
sandbox's Traefik), waits for it to be Healthy, starts ``--rate`` req/s of background load on its
host, and releases a canary whose time to first token is 400 ms against an SLO of 100 ms (breach
above 150 ms): step 50 % (pause 60 s), analysis interval 5 s, 1 s scrapes.  The release fails its
analysis and is rolled back; the lane deletes that rollout and starts the next one.  (A fresh
rollout per rollback, not a new template on the same one: a release that follows a rollback on
the same object keeps the old Fail verdict in ``status.analysis`` and waits at 0 % — see
docs/benchmarks.md.)

Two measurements per rollback:

(a) the operator's own histogram ``inference_rollout_decision_to_write_seconds``, scraped every
    ``--scrape-period`` (100 ms): a scrape that brings exactly one new observation gives its
    exact value (the increment of ``_sum``).  It is matched to the rollback whose verdict time
    and route change fit it (:func:`match_histogram`).  It spans from the core's decision until
    *all* of the decision's writes landed (route, events, scaling, status), on the operator's
    clock, and leaves out decide() itself.
(b) independently: the failing verdict's ``status.analysis.<metric>.measuredAt`` (taken after
    the measurement, just before the decision; milliseconds) to the first time an observer that
    LISTs the namespace's HTTPRoutes every 20 ms sees 100 % stable (the poll's return time: an
    upper bound; the lower bound is the send time of the last poll that did not see it), and
    the arrival of the change on a WATCH of the same routes.  The HTTPRoute's managedFields time
    is checked against those bounds, but it has whole seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from common import (
    Bench,
    HistogramStep,
    MetricsPoller,
    RouteChange,
    RouteObserver,
    RouteWatcher,
    fmt_ms,
    parse_iso,
    save,
    summary,
)
from kubernetes.client.exceptions import ApiException

from inference_rollout.core.revision import template_hash
from irsandbox.harness import BackgroundLoad, summary_line
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

HIST = "inference_rollout_decision_to_write_seconds"
METRIC = "slo-ttft-p99"
STEPS = [{"weight": 50, "pause": "60s"}, {"weight": 100}]


@dataclass
class Rollback:
    rollout: str
    canary: str
    stable: str
    reason: str
    measured_at: float | None  # epoch seconds of the failing verdict
    aborted_at: float | None
    value: float | None  # the failing TTFT p99
    # (b) observer
    seen_lo: float | None = None
    seen_hi: float | None = None
    managed_time: float | None = None
    watch_seen: float | None = None  # the WATCH event's arrival
    # (a) operator histogram
    decision_to_write: float | None = None
    attribution: str = ""

    @property
    def observed(self) -> float | None:
        if self.seen_hi is None or self.measured_at is None:
            return None
        return self.seen_hi - self.measured_at


def manifest(name: str, prometheus: str) -> dict[str, Any]:
    return sandbox_rollout(name, replicas=1, gpus=0, prometheus=prometheus, steps=STEPS,
                           metrics=[], analysis={"slo": {"ttftP99": "100ms"}})


def first_flip(rb: Rollback, changes: list[RouteChange]) -> RouteChange | None:
    """The first change of the rollout's route to 100 % stable / 0 % canary after the verdict."""
    stable, canary = f"{rb.rollout}-{rb.stable}", f"{rb.rollout}-{rb.canary}"
    assert rb.measured_at is not None
    for c in changes:
        if (c.route == rb.rollout and c.hi >= rb.measured_at - 0.5
                and c.before.get(canary, 0) > 0 and c.after.get(canary, 0) == 0
                and c.after.get(stable) == 100):
            return c
    return None


def match_route(rb: Rollback, polled: list[RouteChange], watched: list[RouteChange]) -> None:
    c = first_flip(rb, polled)
    if c is not None:
        rb.seen_lo, rb.seen_hi = c.lo, c.hi
        rb.managed_time = parse_iso(c.managed_time)
    w = first_flip(rb, watched)
    if w is not None:
        rb.watch_seen = w.hi


def match_histogram(rollbacks: list[Rollback], steps: list[HistogramStep],
                    max_decide: float = 1.0) -> list[float]:
    """Attribute single-observation scrape increments to rollbacks.

    An increment of value v seen between scrapes sent at ``lo`` and returned at ``hi`` belongs to
    a decision made in (lo − v, hi − v].  For a rollback that decision came after its verdict's
    ``measuredAt`` (M) — by the core's decide() time, normally milliseconds — and the route write
    landed between the decision and the observation.  Pairs that satisfy this are assigned
    greedily, closest decision to M first, each increment and each rollback once; a rollback
    that two increments fit equally is left out.  Returns the decision − M gaps of the pairs."""
    pairs: list[tuple[float, int, int]] = []
    for i, rb in enumerate(rollbacks):
        if rb.measured_at is None or rb.seen_lo is None or rb.seen_hi is None:
            rb.attribution = "no verdict time or route change"
            continue
        m = rb.measured_at
        for j, s in enumerate(steps):
            if s.count != 1:
                continue
            d_lo, d_hi = s.lo - s.total, s.hi - s.total
            if d_hi < m - 0.005 or d_lo > m + max_decide:
                continue
            if rb.seen_hi < d_lo or rb.seen_lo > s.hi:
                continue
            pairs.append((abs((d_lo + d_hi) / 2 - m), i, j))
    pairs.sort()
    used_rb: set[int] = set()
    used_step: set[int] = set()
    gaps = []
    for gap, i, j in pairs:
        if i in used_rb or j in used_step:
            continue
        used_rb.add(i)
        used_step.add(j)
        rollbacks[i].decision_to_write = steps[j].total
        rollbacks[i].attribution = "single"
        gaps.append(gap)
    for i, rb in enumerate(rollbacks):
        if i in used_rb or rb.attribution:
            continue
        near = [s for s in steps if s.count > 1 and rb.measured_at is not None
                and s.hi >= rb.measured_at and s.lo <= rb.measured_at + 15]
        rb.attribution = "batched with another observation" if near else "not found"
    return gaps


@dataclass
class Slot:
    """One lane of the benchmark: a fresh rollout per rollback (v1, then a bad v2)."""

    index: int
    cycle: int = 0
    rel: Release | None = None
    load: BackgroundLoad | None = None
    expected: str = ""  # the bad canary's revision, once applied
    since: float = 0.0


class Lanes:
    """``--rollouts`` lanes driven in turn until ``--rollbacks`` rollbacks were seen."""

    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench, self.args = bench, args
        self.slots = [Slot(i) for i in range(args.rollouts)]
        self.launched = 0
        self.rollbacks: list[Rollback] = []
        self.stuck: list[str] = []
        self.loads_1m: list[float] = []

    def new_rollout(self, slot: Slot) -> None:
        slot.cycle += 1
        self.launched += 1
        slot.rel = self.bench.release(manifest(f"rb{slot.index}-{slot.cycle}",
                                               self.bench.env["PROMETHEUS_URL"]))
        slot.rel.apply()
        slot.expected, slot.since = "", time.monotonic()

    def retire(self, slot: Slot) -> None:
        if slot.load is not None:
            slot.load.stop()
            slot.load = None
        if slot.rel is not None:
            with contextlib.suppress(ApiException):
                self.bench.cluster.delete_rollout(self.bench.ns, slot.rel.name)
            slot.rel = None

    def release_bad_canary(self, slot: Slot, rel: Release) -> None:
        """v1 is Healthy: load on its host, then v2 with a 400 ms time to first token."""
        slot.load = BackgroundLoad(self.bench.env, rel.host, rate=self.args.rate, seconds=300)
        rel.apply(with_template(rel.manifest, version="v2", ttft_ms=400))
        slot.expected = template_hash(rel.manifest["spec"]["template"])
        slot.since = time.monotonic()

    def record_rollback(self, slot: Slot, rel: Release, st: dict[str, Any]) -> None:
        res = (st.get("analysis") or {}).get(METRIC) or {}
        rb = Rollback(rel.name, slot.expected, st.get("stableRevision", ""),
                      st.get("abortReason", ""), parse_iso(res.get("measuredAt")),
                      parse_iso(st.get("abortedAt")), res.get("value"))
        self.rollbacks.append(rb)
        print(f"  rollback {len(self.rollbacks):3d}: {rel.name} {rb.canary} "
              f"{rb.reason} ttft p99={rb.value}", flush=True)
        time.sleep(0.2)  # let the observers see the route before the rollout goes
        self.retire(slot)
        if self.launched < self.args.rollbacks:
            self.new_rollout(slot)

    def step(self, slot: Slot) -> None:
        """Move one lane on: release its canary, record its rollback, or give up on it."""
        rel = slot.rel
        if rel is None:
            return
        st = rel.status()
        if not slot.expected:  # v1 coming up
            if st.get("phase") == "Healthy" and not st.get("canaryRevision"):
                self.release_bad_canary(slot, rel)
        elif st.get("canaryRevision") == slot.expected and st.get("aborted"):
            self.record_rollback(slot, rel, st)
            return
        if time.monotonic() - slot.since > self.args.cycle_timeout:
            self.stuck.append(f"{rel.name}: {summary_line(st)} / {st.get('message')}")
            print(f"  stuck: {self.stuck[-1]}", flush=True)
            self.retire(slot)
            self.new_rollout(slot)

    def drive(self) -> None:
        for slot in self.slots:
            self.new_rollout(slot)
        deadline = time.monotonic() + self.args.timeout
        while len(self.rollbacks) < self.args.rollbacks and time.monotonic() < deadline:
            for slot in self.slots:
                self.step(slot)
            self.loads_1m.append(os.getloadavg()[0])
            time.sleep(0.3)
        time.sleep(1.5)  # the last observations reach the observers

    def stop_loads(self) -> None:
        for slot in self.slots:
            if slot.load is not None:
                slot.load.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench("rb", args)
    observer = RouteObserver(bench.observer_client(), bench.ns, period=0.02,
                             max_seconds=args.timeout + 60)
    watcher = RouteWatcher(bench.observer_client(), bench.ns, max_seconds=args.timeout + 60)
    poller = MetricsPoller(bench.op.metrics_port, HIST, period=args.scrape_period,
                           max_seconds=args.timeout + 60)
    lanes = Lanes(bench, args)
    try:
        bench.op.start()
        bench.info["operator_pid"] = bench.op.proc.pid if bench.op.proc else None
        observer.start()
        watcher.start()
        poller.start()
        lanes.drive()
    finally:
        observer.stop()
        watcher.stop()
        poller.stop()
        lanes.stop_loads()
        bench.finish(args.keep)
    return report(bench, lanes, observer, watcher, poller)


def report(bench: Bench, lanes: Lanes, observer: RouteObserver, watcher: RouteWatcher,
           poller: MetricsPoller) -> dict[str, Any]:
    """Match every AnalysisFailed rollback to what the observers saw, and summarise."""
    rollbacks = lanes.rollbacks
    failed = [rb for rb in rollbacks if rb.reason == "AnalysisFailed" and rb.measured_at]
    changes, watched = observer.snapshot(), watcher.snapshot()
    for rb in failed:
        match_route(rb, changes, watched)
    gaps = match_histogram(failed, poller.steps)
    observed = [rb.observed for rb in failed if rb.observed is not None]
    lower = [max(0.0, rb.seen_lo - rb.measured_at) for rb in failed
             if rb.seen_lo is not None and rb.measured_at is not None]
    by_watch = [rb.watch_seen - rb.measured_at for rb in failed
                if rb.watch_seen is not None and rb.measured_at is not None]
    own = [rb.decision_to_write for rb in failed if rb.decision_to_write is not None]
    every = [s.total for s in poller.steps if s.count == 1]
    managed_ok = sum(1 for rb in failed if rb.managed_time is not None
                     and rb.seen_hi is not None and rb.seen_lo is not None
                     and rb.managed_time <= rb.seen_hi and rb.seen_lo < rb.managed_time + 1)
    rtts = sorted(observer.rtts)
    loads_1m = lanes.loads_1m
    return {
        **bench.info,
        "duration_s": bench.elapsed(),
        "rollbacks": len(rollbacks),
        "analysis_failed_rollbacks": len(failed),
        "other_reasons": [rb.reason for rb in rollbacks if rb not in failed],
        "stuck": lanes.stuck,
        "observed_verdict_to_route_ms": summary(observed),
        "observed_lower_bound_ms": summary(lower),
        "watch_verdict_to_route_ms": summary(by_watch),
        "watch_errors": watcher.errors,
        "operator_decision_to_write_ms": summary(own),
        "operator_all_setweights_decisions_ms": summary(every),
        "decision_minus_measured_at_ms": summary(gaps),
        "loadavg_1m_during_run": {"mean": sum(loads_1m) / len(loads_1m) if loads_1m else None,
                                  "max": max(loads_1m, default=None)},
        "histogram_attribution": {a: sum(1 for rb in failed if rb.attribution == a)
                                  for a in sorted({rb.attribution for rb in failed})},
        "managed_fields_consistent": f"{managed_ok}/{len(failed)}",
        "observer": {"polls": observer.polls, "errors": observer.errors,
                     "rtt_p50_ms": rtts[len(rtts) // 2] * 1000 if rtts else None,
                     "rtt_p99_ms": rtts[int(len(rtts) * 0.99)] * 1000 if rtts else None,
                     "period_ms": observer.period * 1000},
        "metrics_poller": {"increments": len(poller.steps),
                           "multi": sum(1 for s in poller.steps if s.count > 1),
                           "errors": poller.errors},
        "per_rollback": [asdict(rb) | {"observed_s": rb.observed} for rb in rollbacks],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", type=int, default=3, help="lanes driven in parallel")
    p.add_argument("--rollbacks", type=int, default=36, help="rollbacks to measure (≥ 30)")
    p.add_argument("--rate", type=float, default=8, help="background load per rollout, req/s")
    p.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    p.add_argument("--scrape-period", type=float, default=0.1,
                   help="seconds between scrapes of the operator's /metrics (each scrape costs "
                   "the operator's event loop a little)")
    p.add_argument("--cycle-timeout", type=float, default=150,
                   help="give up on one rollout after this many seconds in one state")
    p.add_argument("--keep", action="store_true", help="keep the namespace (debugging)")
    args = p.parse_args()
    result = run(args)
    path = save("rollback_latency", {k: v for k, v in result.items()})
    print()
    print(f"rollbacks: {result['rollbacks']} ({result['analysis_failed_rollbacks']} on "
          f"AnalysisFailed) in {result['duration_s']} s")
    print(f"(b) measuredAt → route 100% stable seen (upper bound): "
          f"{fmt_ms(result['observed_verdict_to_route_ms'])}")
    print(f"    lower bound (last poll without it was sent):       "
          f"{fmt_ms(result['observed_lower_bound_ms'])}")
    print(f"    by a WATCH (event arrival):                        "
          f"{fmt_ms(result['watch_verdict_to_route_ms'])}")
    print(f"(a) operator decision_to_write (rollbacks):            "
          f"{fmt_ms(result['operator_decision_to_write_ms'])}")
    print(f"    attribution: {result['histogram_attribution']}")
    print(f"    every SetWeights decision seen:                    "
          f"{fmt_ms(result['operator_all_setweights_decisions_ms'])}")
    print(f"    matched decisions were made {fmt_ms(result['decision_minus_measured_at_ms'])} "
          f"after measuredAt")
    print(f"load average (1 min) during the run: {result['loadavg_1m_during_run']}")
    print(f"managedFields time consistent with the poll bounds: "
          f"{result['managed_fields_consistent']}")
    print(f"observer: {result['observer']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
