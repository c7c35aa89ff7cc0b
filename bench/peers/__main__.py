"""Side by side: the same releases under our operator, Flagger and Argo Rollouts, on the running
sandbox.

    .venv/bin/python -m bench.peers [--runs 3] [--scenarios bad-ttft,good] [--interval 10]
        [--rate 10] [--controllers inference-rollout,flagger,argo-rollouts]

Each controller gets a namespace of its own (``bench-peer-ours-*``, ``bench-peer-flagger-*``,
``bench-peer-argo-*``) and a process watching only it: our operator (the last commit's export, as
the other benchmarks), ``flagger-v1.36.1`` (``-mesh-provider gatewayapi:v1``) and
``argo-rollouts-controller-v1.10.1`` (``--namespaced``, the Gateway API plugin from a local file).
For every run of every scenario the lanes run at the same time, each on a fresh object: a healthy
release (the same sandbox pod template: one simulated vLLM replica, 1 GPU), ``--rate`` req/s
(a scenario may set its own) through the sandbox gateway to its host, then a new pod template.
Steps 5/20/50/100 held one interval each (Flagger: ``stepWeights`` [5, 20, 50], one check per
interval; Argo: ``setWeight`` + ``pause`` of one interval, background analysis every interval;
ours: a ``pause`` of one interval), one metric with the same PromQL, threshold, window and sample
guard, rollback at the first failing check.  Measured from outside (docs/benchmarks.md §5):

* breach visible → route 100 % on stable: the breach as bench/breach_to_rollback.py sees it (our
  PromQL for the canary's pods, every 250 ms), the route from a 20 ms LIST of the namespace's
  HTTPRoutes;
* requests answered by the canary pods of a bad release (the load generator, by serving pod);
* wall time of a good release (to the controller's "done") against the sum of its holds;
* pods created (model loads) and pod-seconds beyond the steady replicas, from the release until
  the namespace is back to its replicas;
* each controller process's CPU seconds and peak RSS over the run (``/proc``; Argo's with its
  plugin process);
* the API-server requests each controller made from the release until settled: each runs with
  a client certificate of its own, counted in the sandbox's audit log
  (:mod:`identity`; a sandbox started before the audit policy has none, and the figure is left
  out).
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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from breach_to_rollback import Probe
from common import OPERATOR_COMMIT, Bench, RouteObserver, machine, save

from irsandbox.common import wait_for

from . import argo
from . import flagger as fl
from .identity import kubeconfig_for, requests_by_user
from .lanes import ArgoLane, FlaggerLane, Lane, OursLane, Settings, our_manifest
from .measure import LoadRecorder, PodCounter, ProcSampler


@dataclass(frozen=True)
class Scenario:
    name: str
    code: str  # in the objects' names: <lane prefix><code><run>
    bad: bool
    changes: dict[str, Any]  # irsandbox.manifests.with_template keywords
    metric: str  # the metric's name in our rollout
    analysis: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    rate: float | None = None  # req/s per lane; None: --rate
    max_s: float | None = None  # no verdict by then (from the release): "no verdict"
    lanes: tuple[str, ...] = ()  # only these controllers (default: all)
    # ours with its analysis at the product's defaults (interval, rule, minimum samples), only the
    # SLO given: what a user who writes nothing more gets (the peers keep the common settings)
    ours_defaults: bool = False


TTFT_SLO = {"slo": {"ttftP99": "100ms"}}
SCENARIOS = {s.name: s for s in (
    # time to first token 400 ms against an SLO of 100 ms: 4x the limit on every request
    Scenario("bad-ttft", "t", True, {"version": "v2", "ttft_ms": 400}, "slo-ttft-p99",
             analysis=TTFT_SLO),
    Scenario("good", "g", False, {"version": "v2"}, "slo-ttft-p99", analysis=TTFT_SLO),
    # 5 % of the requests fail (the simulator's failure injection) against 1 %
    Scenario("bad-errors", "e", True, {"version": "v2", "failure_rate": 5}, "errors",
             metrics=[{"name": "errors", "template": "error-rate", "max": 0.01}]),
    # bad-ttft at 4 req/s: the 5 % canary gets 0.2 req/s, 2 requests per 10 s window (fewer
    # than the guard's 3). Ours with its default, Sequential (evidence since the step began) ...
    Scenario("low-ttft", "l", True, {"version": "v2", "ttft_ms": 400}, "slo-ttft-p99",
             analysis=TTFT_SLO, rate=4, max_s=240, ours_defaults=True),
    # ... and with Window, as the peers (one window at a time): ours alone, the peers are above
    Scenario("low-ttft-window", "w", True, {"version": "v2", "ttft_ms": 400}, "slo-ttft-p99",
             analysis=TTFT_SLO, rate=4, max_s=240, lanes=("inference-rollout",)),
    # ... and with the operator's own probes (1/s to each side, the first weight held for 3
    # answered canary probes): ours alone, the physical limit of evidence on demand
    Scenario("low-ttft-probes", "p", True, {"version": "v2", "ttft_ms": 400}, "slo-ttft-p99",
             analysis={**TTFT_SLO, "probes": {"ratePerSecond": 1, "timeout": "10s",
                                              "warmupRequests": 3}},
             rate=4, max_s=240, lanes=("inference-rollout",), ours_defaults=True),
    # a good release at that rate: which controller promotes a canary it could not judge?  Ours
    # at its defaults has 8 minutes (issue 30's target for a healthy release at 0.2 req/s)
    Scenario("low-good", "h", False, {"version": "v2"}, "slo-ttft-p99",
             analysis=TTFT_SLO, rate=4, max_s=480, ours_defaults=True),
    # a good release that fails 1 % of its requests against a limit of 5 %: which controller
    # rolls back a canary that meets its limit?  A window of a few requests holding one error
    # is "over 5 %"; ours with its default (Sequential: a stated 1 % false-rollback rate)
    Scenario("noisy-good", "n", False, {"version": "v2", "failure_rate": 1}, "errors",
             analysis={"verdicts": "Sequential"},
             metrics=[{"name": "errors", "template": "error-rate", "max": 0.05}], max_s=240),
)}


OURS = "inference-rollout"
CONTROLLERS = (OURS, "flagger", "argo-rollouts")
NAMES = {OURS: "inference-rollout", "flagger": "Flagger", "argo-rollouts": "Argo Rollouts"}
LANES: dict[str, type[Lane]] = {OURS: OursLane, "flagger": FlaggerLane, "argo-rollouts": ArgoLane}
BENCH_KIND = {OURS: "peer-ours", "flagger": "peer-flagger", "argo-rollouts": "peer-argo"}


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
    api_requests: int | None = None
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

    @property
    def release_to_stable_s(self) -> float | None:
        """Release → route 100 % on stable (a rollback; also when the breach never showed)."""
        if self.outcome != "rolled back" or self.rollback_at is None:
            return None
        return self.rollback_at - self.released_at


def run_lane(lane: Lane, sc: Scenario, i: int, s: Settings, observer: RouteObserver,
             prom: str) -> Row:
    row = Row(lane.kind, sc.name, i)
    name = f"{lane.prefix}{sc.code}{i}"
    # the peers' queries (and the breach "visible") keep the common window and guard, whatever ours
    probe = Probe.of(our_manifest(name, prom, s, sc.analysis, sc.metrics), s.interval_s,
                     sc.metric)
    manifest = our_manifest(name, prom, s, sc.analysis, sc.metrics, defaults=sc.ours_defaults)
    lane.create(name, manifest, (probe.metric, probe.window, probe.min_samples))
    load = LoadRecorder(lane.bench.env["GATEWAY_URL"], lane.host, sc.rate or s.rate)
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
        settle = time.monotonic() + (0 if row.outcome == "no verdict" else 90)
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
    audit = lane.bench.env.get("IR_AUDIT_LOG")
    if audit:
        row.api_requests = requests_by_user(audit, row.released_at, end)[lane.user]
    lane.delete()
    return row


def watch(lane: Lane, sc: Scenario, row: Row, probe: Probe, prom: str, s: Settings) -> None:
    """Every 250 ms until the controller reports the outcome: the breach in Prometheus (a bad
    release), the outcome once a second."""
    deadline = time.monotonic() + (sc.max_s or 4 * s.progress_deadline_s + 20 * s.interval_s)
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
    if sc.max_s:
        row.outcome = "no verdict"
        return
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
    """One line per scenario and figure: each controller's median (each run in brackets) and
    ours / each peer."""
    holds = len(s.steps) * s.interval_s
    figures: list[tuple[str, str, Any]] = [
        ("bad", "breach visible → 100 % stable (s)", lambda r: r.breach_to_stable_s),
        ("bad", "release → 100 % stable (s)", lambda r: r.release_to_stable_s),
        ("bad", "requests answered by the bad canary pods (until promoted, if promoted)",
         lambda r: r.canary_answers),
        ("bad", "release → controller reports rolled back (s)",
         lambda r: r.wall_s if r.outcome == "rolled back" else None),
        ("good", f"good release wall time to promoted (s; holds sum {holds} s)",
         lambda r: r.wall_s if r.outcome == "promoted" else None),
        ("all", "pods created (model loads)", lambda r: r.pods_created),
        ("all", "pod-seconds beyond the replicas", lambda r: r.pod_seconds_extra),
        ("all", "controller CPU seconds", lambda r: r.cpu_s),
        ("all", "controller peak RSS (MiB)", lambda r: r.rss_max_mib),
        ("all", "API-server requests (audit log)", lambda r: r.api_requests),
    ]
    ctls = [c for c in CONTROLLERS if any(r.controller == c for r in rows)]
    peers = [c for c in ctls if c != OURS]
    out = ["| scenario | figure | " + " | ".join(f"{NAMES[c]} (median, each)" for c in ctls)
           + "".join(f" | ours / {NAMES[p]}" for p in peers) + " |",
           "|---|---|" + "---|" * (len(ctls) + len(peers))]
    for sc in dict.fromkeys(r.scenario for r in rows):
        mine = {c: [r for r in rows if r.scenario == sc and r.controller == c] for c in ctls}
        cells = []
        for c in ctls:
            outcomes = Counter(r.outcome for r in mine[c])
            cells.append(", ".join(f"{n} {o}" for o, n in outcomes.items()) or "–")
        out.append(f"| {sc} | outcomes | " + " | ".join(cells) + " |" + " |" * len(peers))
        bad = SCENARIOS[sc].bad
        for kind, label, get in figures:
            if (kind == "bad" and not bad) or (kind == "good" and bad):
                continue
            stats = {}
            for c in ctls:
                vals = [get(r) for r in mine[c] if not r.error]
                vals = [float(v) for v in vals if v is not None]
                stats[c] = (median(vals), vals)
            if all(not v for _, v in stats.values()):
                continue
            ratios = [stats[OURS][0] / stats[p][0] if stats[p][0] else math.nan for p in peers]
            out.append(f"| {sc} | {label} | " + " | ".join(
                f"{m:.3g} ({', '.join(f'{v:.3g}' for v in vals)})" if vals else "–"
                for m, vals in stats.values())
                + "".join(" | –" if math.isnan(x) else f" | {x:.2f}" for x in ratios) + " |")
    return out


def saved_table(paths: list[str]) -> list[str]:
    """The table of one or more saved runs, their rows pooled (their settings must agree),
    after a line saying what ran, when, and how loaded the machine was."""
    saved = [json.loads(Path(p).read_text()) for p in paths]
    if any(d["settings"] != saved[0]["settings"] for d in saved):
        raise SystemExit("these runs have different settings: " + ", ".join(paths))
    names = {f.name for f in fields(Row)}
    rows = [Row(**{k: v for k, v in r.items() if k in names}) for d in saved for r in d["rows"]]
    s = saved[0]["settings"]
    return [summary(saved, rows), "", *table(rows, Settings(**{**s, "steps": tuple(s["steps"])}))]


def summary(saved: list[dict[str, Any]], rows: list[Row]) -> str:
    """Operator commit(s), peer versions, the runs' time span (UTC), the count of runs and the
    machine's 1-minute load average at the start of each run (lowest–highest)."""
    def utc(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))
    commits = ", ".join(dict.fromkeys(d["operator_commit"][:10] for d in saved))
    loads = [x for d in saved for x in d.get("loadavg_1m_at_runs", [])]
    started = [r.released_at for r in rows if r.released_at]
    span = f"{utc(min(started))}–{utc(max(started))[11:]} UTC" if started else "no run started"
    load = f"{min(loads):.1f}–{max(loads):.1f}" if loads else "not recorded"
    first = saved[0]
    return (f"Operator {commits}; Flagger {first['flagger']}, Argo Rollouts "
            f"{first['argo_rollouts']} (Gateway API plugin {first['argo_gatewayapi_plugin']}); "
            f"{len(rows)} lane runs, {span}; load average (1 min) at each run's start "
            f"{load} on {first['machine']['cpus']} cores.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each scenario")
    p.add_argument("--scenarios", default="bad-ttft,good",
                   help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--interval", type=int, default=10, help="analysis interval = step hold, s")
    p.add_argument("--rate", type=float, default=10, help="load per lane, req/s")
    p.add_argument("--controllers", default=",".join(CONTROLLERS),
                   help=f"comma-separated, of {', '.join(CONTROLLERS)}")
    p.add_argument("--keep", action="store_true", help="keep the namespaces")
    p.add_argument("--out", metavar="JSON", help="also write the results here (to keep them: "
                   "bench/results/<date>-<commit>/peers-<scenarios>.json)")
    p.add_argument("--table", metavar="JSON", nargs="+",
                   help="print the table of saved results (same settings, rows pooled) and exit")
    args = p.parse_args()
    if args.table:
        print("\n".join(saved_table(args.table)))
        return
    scenarios = [SCENARIOS[n] for n in args.scenarios.split(",")]
    s = Settings(interval_s=args.interval, steps=(5, 20, 50), rate=args.rate, replicas=1, gpus=1)
    tag = f"{int(time.time()) % 100000}"
    probing = any("probes" in sc.analysis for sc in scenarios)  # ours must reach Services
    lanes: list[Lane] = [LANES[c](Bench(BENCH_KIND[c], args, tag=tag,
                                        service_proxy=probing and c == OURS), s)
                         for c in args.controllers.split(",")]
    env = lanes[0].bench.env
    for lane in lanes:  # a client identity of its own (this run's), for the audit log's count
        lane.user = f"{lane.user}-{tag}"
        lane.use_kubeconfig(str(kubeconfig_for(Path(env["IR_STATE"]), env["KUBECONFIG"],
                                               lane.user)))
    if not env.get("IR_AUDIT_LOG"):
        print("no audit log (restart a sandbox older than its audit policy): API-server requests "
              "per controller are not counted", flush=True)
    prom = env["PROMETHEUS_URL"]
    observers = {lane.kind: RouteObserver(lane.bench.observer_client(), lane.ns, period=0.02,
                                          max_seconds=7200) for lane in lanes}
    rows: list[Row] = []
    loads: list[float] = []
    started = time.time()
    try:
        for lane in lanes:
            lane.start()
            print(f"{lane.kind} log {lane.controller().log_path}", flush=True)
        for o in observers.values():
            o.start()
        for sc in scenarios:
            these = [lane for lane in lanes if not sc.lanes or lane.kind in sc.lanes]
            for i in range(args.runs):
                loads.append(os.getloadavg()[0])
                with ThreadPoolExecutor(len(these)) as pool:
                    futures = {lane.kind: pool.submit(guarded_run, lane, sc, i, s,
                                                      observers[lane.kind], prom)
                               for lane in these}
                for kind, fut in futures.items():
                    row = fut.result()
                    rows.append(row)
                    print(f"  {sc.name} #{i} {kind}: {row.outcome} "
                          f"breach→stable {fmt(row.breach_to_stable_s)} s, release→stable "
                          f"{fmt(row.release_to_stable_s)} s, canary answered "
                          f"{row.canary_answers} ({row.canary_errors} errors), wall "
                          f"{fmt(row.wall_s)} s, pods {row.pods_created}, extra pod-s "
                          f"{row.pod_seconds_extra:.0f}, cpu {row.cpu_s:.2f} s, rss "
                          f"{row.rss_max_mib:.0f} MiB, api {row.api_requests} "
                          f"{row.error[:200]}", flush=True)
    finally:
        for o in observers.values():
            o.stop()
        for lane in lanes:
            if lane.kind != OURS:
                lane.controller().stop()
            lane.bench.finish(args.keep)
    lines = table(rows, s)
    result = {"operator_commit": OPERATOR_COMMIT, "flagger": fl.VERSION, "argo_rollouts":
              argo.VERSION, "argo_gatewayapi_plugin": argo.PLUGIN_VERSION, "machine": machine(),
              "settings": asdict(s), "args": vars(args), "duration_s": time.time() - started,
              "loadavg_1m_at_runs": loads, "table": lines,
              "rows": [asdict(r) | {"breach_to_stable_s": r.breach_to_stable_s,
                                    "release_to_stable_s": r.release_to_stable_s,
                                    "wall_s": r.wall_s} for r in rows]}
    path = save("peers", result)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(path.read_text())
    print()
    print(f"operator {OPERATOR_COMMIT[:12]}, flagger {fl.VERSION}, argo-rollouts {argo.VERSION} "
          f"(gatewayAPI plugin {argo.PLUGIN_VERSION}), interval {s.interval_s}s, "
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
