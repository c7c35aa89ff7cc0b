"""Calibration on real parts (issue 30, item 5): short releases through Traefik and the sandbox's
Prometheus, decided by the production rule, counted where users meet them.

    .venv/bin/python bench/calibration.py [--lanes 3] [--releases 6] [--minutes M] [--rate 4]
        [--scenarios healthy gross errors5] [--timeout 600] [--json PATH]

Method: ``--lanes`` rollouts in one namespace (two simulator pods each), each with its own load
of ``--rate`` req/s through Traefik, kept by a :class:`TrafficWatch` (every answer: revision,
TTFT, error).  Each lane releases ``--releases`` templates one after the other, cycling through
``--scenarios``: ``healthy`` (5 ms to the first token), ``gross`` (2 s: every request over the
SLO's breach line, 0.45 s), ``errors5`` (the simulator fails 5 % of requests: five times the
1 % limit), ``late`` (a healthy canary that turns gross while it runs: ``--late-after`` seconds
into its 50 % step (default 10), after all the good evidence before, its pods are annotated 2 s
to the first token, which the sandbox's bridge applies to the running simulators; in a run with
``late`` the 50 % step is held ``--late-after`` + 20 s, at least 30 s, so the break comes first).

The rule is ``Sequential`` at its defaults (falseRollbackRate 1 %) on
``ttftP99: 300ms`` and an error rate ≤ 1 %, steps 5/20/50/100 % with 30 s holds; the sandbox's
cadence (a look every 5 s on 1 s scrapes) rather than production's 1m/30 s, so a run takes
minutes.  Per release: the outcome (promoted, rolled back, or none in ``--timeout``), the time
to it and to traffic all on stable, and the canary's answers counted at the gateway (bad ones:
TTFT over 0.45 s, or an error).  The simulator cannot put 5 % of latencies over a limit (its TTFT
is one number), so the "5 % over" cell of the simulation has no sandbox twin here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from common import RESULTS, Bench, free_gpus, percentile

from irsandbox.harness import TrafficWatch
from irsandbox.manifests import SIM_ANNOTATION, sandbox_rollout, with_template
from irsandbox.podspec import LABEL_REVISION
from irsandbox.story import Release

STEPS: list[dict[str, Any]] = [{"weight": 5, "pause": "30s"}, {"weight": 20, "pause": "30s"},
         {"weight": 50, "pause": "30s"}, {"weight": 100}]
SCENARIOS: dict[str, dict[str, Any]] = {"healthy": {}, "gross": {"ttft_ms": 2000},
                                        "errors5": {"failure_rate": 5}, "late": {}}
BREACH_S = 0.45  # ttftP99 300ms × 1.5
REPLICAS = 2  # sandbox_rollout's default: each lane's stable and canary have this many pods
#: A release whose answers its lane has not counted yet (a checkpoint of a run still going)
NOT_COUNTED = -1
#: Seconds between checkpoints of a running calibration (``--json`` rewritten, ``partial``)
CHECKPOINT_S = 60.0
#: ``late``: the canary's pods turn gross ``--late-after`` s after its route weight reaches this
LATE_WEIGHT, LATE_TTFT_MS = 50, 2000


def steps_for(args: argparse.Namespace) -> list[dict[str, Any]]:
    """STEPS, with the LATE_WEIGHT step held long enough for a ``late`` break to come first."""
    if "late" not in args.scenarios:
        return STEPS
    hold = f"{max(30, round(args.late_after) + 20)}s"
    return [{**s, "pause": hold} if s["weight"] == LATE_WEIGHT else s for s in STEPS]


@dataclass
class Outcome:
    lane: int
    scenario: str
    revision: str
    outcome: str  # promoted | rolled back | none
    seconds: float  # from the template change to the outcome
    to_stable: float | None  # rolled back: until the route was all on stable
    #: counted at the gateway when the lane ends; NOT_COUNTED in a checkpoint written before
    canary_answers: int
    bad_answers: int
    broke_at: float | None = None  # late: seconds from the template change to the breakage
    #: rolled back or none: the status message then (a verdict, or e.g. a progress deadline)
    reason: str | None = None
    #: of the bad answers, those that failed (the rest were slow): a healthy canary's bad
    #: answers are the machine's, and this says whether they were errors or a busy moment
    error_answers: int | None = None


def _lane(bench: Bench, lane: int, args: argparse.Namespace, out: list[Outcome]) -> None:
    manifest = sandbox_rollout(
        f"cal{lane}", prometheus=bench.env["PROMETHEUS_URL"], steps=steps_for(args),
        replicas=REPLICAS,
        analysis={"verdicts": "Sequential", "slo": {"ttftP99": "300ms"}})
    rel = Release(bench.observer_client(), bench.op, bench.ns, manifest)  # a client per lane
    rel.apply()
    stable = rel.wait_healthy(timeout=180)["stableRevision"]
    watch = TrafficWatch(bench.env, rel.host, rate=args.rate).start()
    spans: list[tuple[Outcome, float, float]] = []
    seen = {stable}
    try:
        for i in range(args.releases):
            if args.minutes and time.monotonic() > args.started + 60 * args.minutes:
                break  # the time budget: no new release (the one running ends first)
            scenario = args.scenarios[i % len(args.scenarios)]
            began = time.time()
            rel.apply(with_template(manifest, version=f"v{lane}-{i}", **SCENARIOS[scenario]))
            canary = rel.wait(lambda s: s.get("canaryRevision") not in (None, *seen), 120,
                              "a canary")["canaryRevision"]
            seen.add(canary)
            breaker = (LateBreak(rel, canary, args.late_after).start() if scenario == "late"
                       else None)
            try:
                st = rel.wait(lambda s, c=canary: s.get("stableRevision") == c
                              or s.get("aborted"), args.timeout, "an outcome")
            except AssertionError:
                st = {}
            decided = time.time()
            broke_at = breaker.stop() if breaker else None
            if st.get("stableRevision") == canary:
                o = Outcome(lane, scenario, canary, "promoted", decided - began, None,
                            NOT_COUNTED, NOT_COUNTED)
                stable = canary
            elif st.get("aborted"):
                route_back = _wait_route(rel, stable)
                o = Outcome(lane, scenario, canary, "rolled back", decided - began,
                            route_back - began if route_back else None, NOT_COUNTED,
                            NOT_COUNTED, reason=st.get("message"))
            else:
                o = Outcome(lane, scenario, canary, "none", decided - began, None,
                            NOT_COUNTED, NOT_COUNTED, reason=rel.status().get("message"))
            if breaker is not None and broke_at is not None:
                o.broke_at = broke_at - began
                if o.outcome == "promoted":  # a missed breakage: heal the new stable's pods
                    breaker.annotate(manifest_ttft(manifest))
            spans.append((o, began, time.time()))
            out.append(o)
            print(f"lane {lane} release {i} {scenario}: {o.outcome} after {o.seconds:.0f}s",
                  flush=True)
    finally:
        report = watch.stop()
    for o, began, ended in spans:  # the canary's answers, counted at the gateway
        answers = [r for r in report.results if r.revision == o.revision
                   and began <= report.started_at + r.started <= ended]
        o.canary_answers = len(answers)
        # the load is not streamed, so TTFT is the answer's latency (4 tokens at 1 ms each)
        o.bad_answers = sum(1 for r in answers if r.error or (
            r.ttft if r.ttft is not None else r.latency) > BREACH_S)
        o.error_answers = sum(1 for r in answers if r.error)


class LateBreak:
    """The ``late`` scenario's breakage: once the canary's route weight reaches LATE_WEIGHT, wait
    ``after`` seconds, then annotate the canary's running pods with LATE_TTFT_MS to the first token
    (the bridge applies it to their simulators through ``/admin/config``: no restart, same
    revision).  A canary rolled back before that weight is never broken."""

    def __init__(self, rel: Any, canary: str, after: float) -> None:
        self.rel, self.canary, self.after = rel, canary, after
        self.done = threading.Event()
        self.broke: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> LateBreak:
        self.thread.start()
        return self

    def stop(self) -> float | None:
        """Stop waiting; when the canary broke (epoch seconds), or None."""
        self.done.set()
        self.thread.join()
        return self.broke

    def annotate(self, ttft_ms: str) -> None:
        self.rel.cluster.kubectl(
            "-n", self.rel.ns, "annotate", "--overwrite", "pods", "-l",
            f"{LABEL_REVISION}={self.canary}", f"{SIM_ANNOTATION}ttft-ms={ttft_ms}")

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                weight = self.rel.route().get(self.canary, 0)
            except Exception:  # an API hiccup: look again (the release runs on regardless)
                weight = 0
            if weight >= LATE_WEIGHT:
                if not self.done.wait(self.after):
                    self.broke = time.time()
                    self.annotate(str(LATE_TTFT_MS))
                return
            self.done.wait(0.5)


def manifest_ttft(manifest: dict[str, Any]) -> str:
    return str(manifest["spec"]["template"]["metadata"]["annotations"][f"{SIM_ANNOTATION}ttft-ms"])


def _wait_route(rel: Any, stable: str, timeout: float = 30) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rel.route().get(stable) == 100:
            return time.time()
        time.sleep(0.2)
    return None


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of a proportion k/n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # exact at the ends: rounding must not put 0 of n above 0, or n of n below 1
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def table(outcomes: list[Outcome], rates: dict[int, float] | None = None) -> str:
    """The markdown table of ``outcomes``: one row per scenario, or per (canary rate, scenario)
    when ``rates`` gives each outcome's (by its index) canary req/s."""
    lines = ["| canary req/s | scenario | releases | promoted (95 % CI) | rolled back (95 % CI) | "
             "none | time to outcome: median / max | bad answers served: median / max | "
             "rolled back: traffic all on stable after, median / max | broken while "
             "running: break → all on stable, median / max |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[float, str], list[Outcome]] = {}
    for i, o in enumerate(outcomes):
        rate = rates[i] if rates is not None else math.nan
        groups.setdefault((rate, o.scenario), []).append(o)
    order = {name: i for i, name in enumerate(SCENARIOS)}
    for (rate, name), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        n = len(rows)
        cells = []
        for what in ("promoted", "rolled back"):
            k = sum(o.outcome == what for o in rows)
            lo, hi = wilson(k, n)
            cells.append(f"{k} ({100 * lo:.0f}–{100 * hi:.0f} %)")
        secs = [o.seconds for o in rows]
        bad = [float(o.bad_answers) for o in rows if o.bad_answers != NOT_COUNTED]
        back = [o.to_stable for o in rows if o.outcome == "rolled back" and o.to_stable]
        back_text = (f"{percentile(back, 50):.0f} s / {max(back):.0f} s" if back else "-")
        late = [o.to_stable - o.broke_at for o in rows if o.outcome == "rolled back"
                and o.to_stable and o.broke_at is not None]
        late_text = (f"{percentile(late, 50):.1f} s / {max(late):.1f} s" if late else "-")
        lines.append(f"| {'-' if math.isnan(rate) else f'{rate:g}'} | {name} | {n} | "
                     f"{' | '.join(cells)} | {sum(o.outcome == 'none' for o in rows)} | "
                     f"{percentile(secs, 50):.0f} s / {max(secs):.0f} s | "
                     f"{f'{percentile(bad, 50):.0f} / {max(bad):.0f}' if bad else '-'} | "
                     f"{back_text} | {late_text} |")
    return "\n".join(lines)


def report(paths: list[str]) -> str:
    """The table of every release in the kept result files (``bench/results/*.json``), each
    at its run's canary rate (the first step's share of ``--rate``): the docs' table is this
    output, never typed by hand."""
    outcomes: list[Outcome] = []
    rates: dict[int, float] = {}
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        share = STEPS[0]["weight"] / 100
        for r in run["releases"]:
            rates[len(outcomes)] = round(run["args"]["rate"] * share, 3)
            outcomes.append(Outcome(**r))
    return table(outcomes, rates)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=3)
    p.add_argument("--releases", type=int, default=6, help="releases per lane")
    p.add_argument("--rate", type=float, default=4.0, help="req/s through Traefik, per lane")
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--timeout", type=float, default=600, help="seconds a release may take")
    p.add_argument("--late-after", type=float, default=10,
                   help="late: seconds at the 50 %% weight before the canary breaks")
    p.add_argument("--minutes", type=float, default=0,
                   help="start no release after this many minutes (0: no limit)")
    p.add_argument("--json", help="write every release here (default .sandbox/bench/)")
    p.add_argument("--report", nargs="+", metavar="JSON",
                   help="print the table of kept result files and exit (nothing is run)")
    args = p.parse_args(argv)
    if args.report:
        print(report(args.report))
        return 0
    args.started = time.monotonic()
    bench = Bench("calibration", args)
    need, free = args.lanes * 2 * REPLICAS, free_gpus(bench.cluster)
    if need > free:  # pods that wait for GPUs end in progress-deadline rollbacks, not verdicts
        bench.finish()
        raise SystemExit(f"--lanes {args.lanes} may need {need} GPUs (2 revisions of "
                         f"{REPLICAS} pods per lane) and the sandbox has {free} free: run at "
                         f"most {free // (2 * REPLICAS)} lanes")
    bench.op.start()
    outcomes: list[Outcome] = []
    lanes = [threading.Thread(target=_lane, args=(bench, i, args, outcomes), daemon=True)
             for i in range(args.lanes)]
    path = args.json or str(RESULTS / f"calibration-{bench.tag}.json")
    try:
        for t in lanes:
            t.start()
        # A long run (hours at 0.2 req/s) may be cut short: every finished release is on disk
        # within CHECKPOINT_S, its answers NOT_COUNTED until its lane ends.
        due = time.monotonic() + CHECKPOINT_S
        while any(t.is_alive() for t in lanes):
            for t in lanes:
                t.join(max(0.0, due - time.monotonic()))
            if time.monotonic() >= due:
                _save(path, bench, outcomes, partial=True)
                due += CHECKPOINT_S
    finally:
        bench.finish()
    _save(path, bench, outcomes, partial=False)
    print(table(outcomes))
    print(f"({bench.elapsed():.0f} s; {path})")
    return 0


def _save(path: str, bench: Bench, outcomes: list[Outcome], partial: bool) -> None:
    """The run's JSON, replaced whole (written beside it, then renamed: never half a file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({**bench.info, "seconds": bench.elapsed(), "partial": partial,
                   "releases": [asdict(o) for o in list(outcomes)]}, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())
