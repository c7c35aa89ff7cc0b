"""Side by side: the same releases under Flagger and under our operator, on the running sandbox.

    .venv/bin/python -m bench.peers [--runs 3] [--scenarios bad-ttft,good] [--interval 10]
                                     [--rate 10]

Each controller gets a namespace of its own (``bench-peer-ours-*``, ``bench-peer-flagger-*``) and
a process watching only it: our operator (the last commit's export, as the other benchmarks) and
``flagger-v1.36.1`` (``-mesh-provider gatewayapi:v1``, the sandbox's Prometheus).  For every run
of every scenario both lanes run at the same time, each on a fresh object: a healthy release (the
same sandbox pod template: one simulated vLLM replica, 1 GPU), ``--rate`` req/s through the
sandbox gateway to its host, then a new pod template.  Steps 5/20/50/100 held one interval each
(Flagger: ``stepWeights`` [5, 20, 50], one check per interval; ours: a ``pause`` of one interval),
one metric with the same PromQL, threshold, window and sample guard, rollback at the first
failing check.  Measured from outside (docs/benchmarks.md §5):

* breach visible → route 100 % on stable: the breach as bench/breach_to_rollback.py sees it (our
  PromQL for the canary's pods, every 250 ms), the route from a 20 ms LIST of the namespace's
  HTTPRoutes;
* requests answered by the canary pods of a bad release (the load generator, by serving pod);
* wall time of a good release (to the controller's "done") against the sum of its holds;
* pods created (model loads) and pod-seconds beyond the steady replicas, from the release until
  the namespace is back to its replicas;
* each controller process's CPU seconds and peak RSS over the run (``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from breach_to_rollback import Probe
from common import OPERATOR_COMMIT, Bench, RouteObserver, machine, save

from irsandbox.common import wait_for

from . import flagger as fl
from .lanes import FlaggerLane, Lane, OursLane, Settings, our_manifest
from .measure import LoadRecorder, PodCounter, ProcSampler


@dataclass(frozen=True)
class Scenario:
    name: str
    bad: bool
    changes: dict[str, Any]  # irsandbox.manifests.with_template keywords
    metric: str  # the metric's name in our rollout
    analysis: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)


SCENARIOS = {
    # time to first token 400 ms against an SLO of 100 ms: 4x the limit on every request
    "bad-ttft": Scenario("bad-ttft", True, {"version": "v2", "ttft_ms": 400}, "slo-ttft-p99",
                         analysis={"slo": {"ttftP99": "100ms"}}),
    "good": Scenario("good", False, {"version": "v2"}, "slo-ttft-p99",
                     analysis={"slo": {"ttftP99": "100ms"}}),
    # 5 % of the requests fail (the simulator's failure injection) against 1 %
    "bad-errors": Scenario("bad-errors", True, {"version": "v2", "failure_rate": 5}, "errors",
                           metrics=[{"name": "errors", "template": "error-rate", "max": 0.01}]),
}


@dataclass
class Row:
    controller: str
    scenario: str
    run: int
    outcome: str = ""
    released_at: float = 0.0
    visible_at: float | None = None
    rollback_at: float | None = None
    done_at: float | None = None
    canary_answers: int = 0
    canary_errors: int = 0
    answers: int = 0
    pods_created: int = 0
    pod_seconds_extra: float = 0.0
    cpu_s: float = 0.0
    rss_max_mib: float = 0.0
    error: str = ""

    @property
    def breach_to_stable_s(self) -> float | None:
        """None unless rolled back (a promotion also ends with 100 % on ``<name>-primary``)."""
        if self.outcome != "rolled back" or self.visible_at is None or self.rollback_at is None:
            return None
        return self.rollback_at - self.visible_at

    @property
    def wall_s(self) -> float | None:
        return None if self.done_at is None else self.done_at - self.released_at


def run_lane(lane: Lane, sc: Scenario, i: int, s: Settings, observer: RouteObserver,
             prom: str) -> Row:
    row = Row(lane.kind, sc.name, i)
    # fl/ir + the scenario's last word's initial (t, g, e) + the run
    name = f"{'fl' if lane.kind == 'flagger' else 'ir'}{sc.name.split('-')[-1][0]}{i}"
    manifest = our_manifest(name, prom, s, sc.analysis, sc.metrics)
    probe = Probe.of(manifest, s.interval_s, sc.metric)
    lane.create(name, manifest, (probe.metric, probe.window, probe.min_samples))
    load = LoadRecorder(lane.bench.env["GATEWAY_URL"], lane.host, s.rate)
    pods = PodCounter(cluster=lane.cluster, namespace=lane.ns, prefix=f"{name}-",
                      max_seconds=900)
    proc = ProcSampler(pid=lane.pid(), max_seconds=900)
    load.start()
    try:
        time.sleep(2 * s.interval_s)  # the stable answers before the release
        pods.start()
        proc.start()
        wait_for(lambda: pods.polls > 0, 30, "the first LIST of pods", tolerate=())
        row.released_at = time.time()
        lane.release(sc.changes)
        watch(lane, sc, row, probe, prom, s)
        settle = time.monotonic() + 90
        while pods.current > s.replicas and time.monotonic() < settle:
            time.sleep(0.5)
        end = time.time()
    finally:
        load.stop()
        pods.stop()
        proc.stop()
    if row.outcome == "rolled back":
        row.rollback_at = rollback_seen(observer, name, lane.stable_backend, row.released_at)
    answered = load.between(row.released_at, end)
    row.answers = len(answered)
    canary = [a for a in answered if lane.is_canary_pod(a.pod)]
    row.canary_answers, row.canary_errors = len(canary), sum(1 for a in canary if a.error)
    row.pods_created = sum(1 for t in pods.seen.values() if t >= row.released_at)
    row.pod_seconds_extra = pods.pod_seconds - s.replicas * (end - row.released_at)
    row.cpu_s, row.rss_max_mib = proc.cpu, proc.rss_max_mib
    lane.delete()
    return row


def watch(lane: Lane, sc: Scenario, row: Row, probe: Probe, prom: str, s: Settings) -> None:
    """Every 250 ms until the controller reports the outcome: the breach in Prometheus (a bad
    release), the outcome once a second."""
    deadline = time.monotonic() + 4 * s.progress_deadline_s + 20 * s.interval_s
    last_status = 0.0
    queries = None
    while time.monotonic() < deadline:
        at = time.time()
        if sc.bad and row.visible_at is None:
            queries = queries or lane.canary_queries(probe.metric, probe.window,
                                                     probe.min_samples)
            if queries is not None:
                try:
                    if probe.breaches(*probe.measure(prom, queries, at)):
                        row.visible_at = at
                except OSError:
                    pass
        if at - last_status >= 1.0:
            last_status = at
            outcome = lane.outcome()
            if outcome:
                row.outcome, row.done_at = outcome, time.time()
                return
        time.sleep(max(0.0, 0.25 - (time.time() - at)))
    row.outcome = "timeout"
    raise TimeoutError(f"{lane.kind} {lane.name}: no outcome\n{lane.log_tail()}")


def rollback_seen(observer: RouteObserver, route: str, stable: str, since: float) -> float | None:
    """The first poll showing the route back at 100 % on ``stable`` after a canary weight."""
    for c in observer.snapshot():
        if (c.route == route and c.hi >= since and c.after.get(stable) == 100
                and any(w > 0 for b, w in c.before.items() if b != stable)):
            return c.hi
    return None


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def table(rows: list[Row], s: Settings) -> list[str]:
    """One line per scenario and figure: each controller's median and ours / Flagger."""
    holds = len(s.steps) * s.interval_s
    outcome_cells: dict[tuple[str, str], str] = {}
    figures: list[tuple[str, str, Any]] = [
        ("bad", "breach visible → 100 % stable (s)", lambda r: r.breach_to_stable_s),
        ("bad", "requests answered by the bad canary pods (until promoted, if promoted)",
         lambda r: r.canary_answers),
        ("bad", "release → controller reports rolled back (s)",
         lambda r: r.wall_s if r.outcome == "rolled back" else None),
        ("good", f"good release wall time (s; holds sum {holds} s)", lambda r: r.wall_s),
        ("all", "pods created (model loads)", lambda r: r.pods_created),
        ("all", "pod-seconds beyond the replicas", lambda r: r.pod_seconds_extra),
        ("all", "controller CPU seconds", lambda r: r.cpu_s),
        ("all", "controller peak RSS (MiB)", lambda r: r.rss_max_mib),
    ]
    for sc in dict.fromkeys(r.scenario for r in rows):
        for ctl in ("inference-rollout", "flagger"):
            mine = [r for r in rows if r.scenario == sc and r.controller == ctl]
            outcomes = {o: sum(1 for r in mine if r.outcome == o)
                        for o in dict.fromkeys(r.outcome for r in mine)}
            outcome_cells[(sc, ctl)] = ", ".join(f"{n} {o}" for o, n in outcomes.items())
    out = ["| scenario | figure | inference-rollout (median, each) | Flagger (median, each) "
           "| ours / Flagger |", "|---|---|---|---|---|"]
    for sc in dict.fromkeys(r.scenario for r in rows):
        bad = SCENARIOS[sc].bad
        out.append(f"| {sc} | outcomes | {outcome_cells[(sc, 'inference-rollout')]} | "
                   f"{outcome_cells[(sc, 'flagger')]} | |")
        for kind, label, get in figures:
            if (kind == "bad" and not bad) or (kind == "good" and bad):
                continue
            cells = []
            for ctl in ("inference-rollout", "flagger"):
                vals = [get(r) for r in rows if r.scenario == sc and r.controller == ctl
                        and not r.error]
                vals = [float(v) for v in vals if v is not None]
                cells.append((median(vals), vals))
            ratio = cells[0][0] / cells[1][0] if cells[1][0] else math.nan
            out.append(f"| {sc} | {label} | " + " | ".join(
                f"{m:.3g} ({', '.join(f'{v:.3g}' for v in vals)})" for m, vals in cells)
                + f" | {ratio:.2f} |")
    return out


def saved_table(paths: list[str]) -> list[str]:
    """The table of one or more saved runs, their rows pooled (their settings must agree)."""
    saved = [json.loads(Path(p).read_text()) for p in paths]
    if any(d["settings"] != saved[0]["settings"] for d in saved):
        raise SystemExit("these runs have different settings: " + ", ".join(paths))
    names = {f.name for f in fields(Row)}
    rows = [Row(**{k: v for k, v in r.items() if k in names}) for d in saved for r in d["rows"]]
    s = saved[0]["settings"]
    return table(rows, Settings(**{**s, "steps": tuple(s["steps"])}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each scenario")
    p.add_argument("--scenarios", default="bad-ttft,good",
                   help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--interval", type=int, default=10, help="analysis interval = step hold, s")
    p.add_argument("--rate", type=float, default=10, help="load per lane, req/s")
    p.add_argument("--keep", action="store_true", help="keep the namespaces")
    p.add_argument("--table", metavar="JSON", nargs="+",
                   help="print the table of saved results (same settings, rows pooled) and exit")
    args = p.parse_args()
    if args.table:
        print("\n".join(saved_table(args.table)))
        return
    scenarios = [SCENARIOS[n] for n in args.scenarios.split(",")]
    s = Settings(interval_s=args.interval, steps=(5, 20, 50), rate=args.rate, replicas=1, gpus=1)
    tag = f"{int(time.time()) % 100000}"
    ours = OursLane(Bench("peer-ours", args, tag=tag), s)
    flg = FlaggerLane(Bench("peer-flagger", args, tag=tag), s)
    lanes: list[Lane] = [ours, flg]
    prom = ours.bench.env["PROMETHEUS_URL"]
    observers = {lane.kind: RouteObserver(lane.bench.observer_client(), lane.ns, period=0.02,
                                          max_seconds=7200) for lane in lanes}
    rows: list[Row] = []
    loads: list[float] = []
    started = time.time()
    try:
        ours.start()
        flg.start()
        print(f"flagger log {flg.proc.log_path}", flush=True)
        for o in observers.values():
            o.start()
        for sc in scenarios:
            for i in range(args.runs):
                loads.append(os.getloadavg()[0])
                with ThreadPoolExecutor(2) as pool:
                    futures = {lane.kind: pool.submit(guarded_run, lane, sc, i, s,
                                                      observers[lane.kind], prom)
                               for lane in lanes}
                for kind, fut in futures.items():
                    row = fut.result()
                    rows.append(row)
                    print(f"  {sc.name} #{i} {kind}: {row.outcome} "
                          f"breach→stable {fmt(row.breach_to_stable_s)} s, canary answered "
                          f"{row.canary_answers} ({row.canary_errors} errors), wall "
                          f"{fmt(row.wall_s)} s, pods {row.pods_created}, extra pod-s "
                          f"{row.pod_seconds_extra:.0f}, cpu {row.cpu_s:.2f} s, rss "
                          f"{row.rss_max_mib:.0f} MiB {row.error[:200]}", flush=True)
    finally:
        for o in observers.values():
            o.stop()
        flg.stop()
        for lane in lanes:
            lane.bench.finish(args.keep)
    lines = table(rows, s)
    result = {"operator_commit": OPERATOR_COMMIT, "flagger": fl.VERSION, "machine": machine(),
              "settings": asdict(s), "args": vars(args), "duration_s": time.time() - started,
              "loadavg_1m_at_runs": loads, "table": lines,
              "rows": [asdict(r) | {"breach_to_stable_s": r.breach_to_stable_s,
                                    "wall_s": r.wall_s} for r in rows]}
    path = save("peers", result)
    print()
    print(f"operator {OPERATOR_COMMIT[:12]}, flagger {fl.VERSION}, interval {s.interval_s}s, "
          f"steps {list(s.steps)}, {s.rate:g} req/s, load avg {loads}")
    print("\n".join(lines))
    print(f"results: {path}")


def guarded_run(lane: Lane, sc: Scenario, i: int, s: Settings, observer: RouteObserver,
                prom: str) -> Row:
    """A run whose failure becomes a row with the error, so the other lane's run still counts."""
    try:
        return run_lane(lane, sc, i, s, observer, prom)
    except Exception as e:
        traceback.print_exc()
        with contextlib.suppress(Exception):
            lane.delete()
        return Row(lane.kind, sc.name, i, outcome="error", error=f"{type(e).__name__}: {e}")


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    main()
