"""The long chaos run, on the sandbox (issue 13): many rollouts releasing at once, good and bad
canaries mixed, two operator replicas under leader election SIGKILLed at random instants, and
the sandbox's own parts failing under them: Prometheus down for minutes, the API server, etcd and
the gateway restarted.

    make chaos-sandbox      # on a running sandbox (make sandbox-up); about 20 minutes
    .venv/bin/python bench/chaos_sandbox.py [--rollouts 20] [--kills 100] [--kill-every 4 10]
        [--prometheus-outage 300] [--bad-share 0.4] [--rate 4] [--rule Sequential] [--seed 1]
        [--json PATH]

Method: one namespace; ``--rollouts`` rollouts (1 vLLM-simulator pod each, steps 20/50/100 with 15
s holds, the ``--rule`` (default the product's, Sequential) on the engine's error rate every 5 s,
``--rate`` req/s of load each
through the gateway). Each rollout releases one template after another; each release's canary is
bad (the simulator fails half its requests) with probability ``--bad-share``, else good; the next
release starts once the last is promoted, rolled back or paused. Two ``--leader-elect`` replicas
run the committed operator (:class:`common.BenchOperator`); every U(``--kill-every``) seconds one
of the running replicas (the Lease holder or the standby, at random) is SIGKILLed and started again
under a new identity, as a new pod would be, until ``--kills``. Faults at fixed fractions of the
run: Prometheus SIGKILLed and kept down ``--prometheus-outage`` seconds, then the kube-apiserver,
etcd, and the gateway (Traefik) SIGKILLed and restarted by ``sandbox/up.sh``.
Afterwards the releases still moving get ``--settle`` seconds to finish.

What is judged (:mod:`chaos_history`, from every status version a watch of the namespace
delivered): no step skipped or repeated, no advance or promotion without every metric passing,
no bad canary promoted, no traffic left on a rolled-back canary; good canaries rolled back are
counted.  Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos_history import Seen, Started, judge_run
from common import RESULTS, ROOT, BenchOperator
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from irsandbox.cluster import GROUP, PLURAL, VERSION, Cluster
from irsandbox.common import free_port, sandbox_env
from irsandbox.harness import BackgroundLoad
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

STEPS = [{"weight": 20, "pause": "15s"}, {"weight": 50, "pause": "15s"}, {"weight": 100}]
BAD_FAILURE_RATE = 50  # percent of requests the simulator fails
LEASE_TIMING = ("--lease-duration", "8", "--renew-deadline", "5", "--retry-period", "1")


class Replica:
    """One ``--leader-elect`` operator process; started again under a new identity after each
    kill (the same identity would take its own Lease back at once and hide the failover)."""

    def __init__(self, env: dict[str, str], ns: str, name: str) -> None:
        self.env, self.ns, self.name, self.incarnation = env, ns, name, 0
        self.proc: BenchOperator | None = None

    def start(self) -> None:
        self.incarnation += 1
        self.proc = BenchOperator(
            self.env, log_name=f"chaos-{self.name}", namespaces=[self.ns],
            metrics_port=free_port(), liveness_port=free_port(),
            extra_args=("--leader-elect", "--leader-election-namespace", self.ns,
                        "--leader-election-identity", f"{self.name}.{self.incarnation}",
                        *LEASE_TIMING))
        self.proc.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()

    def kill(self) -> None:
        if self.proc:
            self.proc.kill()

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()


class Watcher(threading.Thread):
    """Every version of every rollout's status in the namespace, in order, across API-server
    restarts (the watch resumes from the last resourceVersion; a 410 lists again)."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.ns = cluster, ns
        self.seen: list[Seen] = []
        self.gaps = 0
        self._stop = threading.Event()

    def _list(self) -> str:
        out = self.cluster.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        for obj in out["items"]:
            self.seen.append(Seen.of(time.time(), obj))
        return str(out["metadata"]["resourceVersion"])

    def run(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                w = watch.Watch()  # type: ignore[no-untyped-call]
                for ev in w.stream(  # type: ignore[no-untyped-call]
                        self.cluster.custom.list_namespaced_custom_object, GROUP, VERSION,
                        self.ns, PLURAL, resource_version=rv, timeout_seconds=30,
                        allow_watch_bookmarks=True):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self.seen.append(Seen.of(time.time(), obj))
                    if self._stop.is_set():
                        break
            except ApiException as e:
                if e.status == 410:
                    rv, self.gaps = None, self.gaps + 1
                time.sleep(1)
            except (Urllib3Error, OSError, ValueError):
                time.sleep(1)  # the API server restarting

    def stop(self) -> None:
        self._stop.set()


class ChaosRun:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.rng = args, random.Random(args.seed)
        self.env = sandbox_env()
        self.cluster = Cluster(self.env)
        self.ns = f"chaos-{os.urandom(3).hex()}"
        self.names = [f"r{i:02d}" for i in range(args.rollouts)]
        self.releases: list[Started] = []
        self.version = dict.fromkeys(self.names, 1)
        self.rollouts: dict[str, Release] = {}
        self.loads: list[BackgroundLoad] = []
        self.replicas = [Replica(self.env, self.ns, n) for n in ("replica-a", "replica-b")]
        self.watcher = Watcher(self.cluster, self.ns)
        self.events: list[str] = []
        self.kills = 0
        self.starting: set[str] = set()

    def note(self, what: str) -> None:
        line = f"{time.time():.1f} {time.strftime('%H:%M:%S')} {what}"
        self.events.append(line)
        print(line, flush=True)

    # --- setting up ---------------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.create_namespace(self.ns)
        self.watcher.start()
        for r in self.replicas:
            r.start()
        for name in self.names:
            manifest = sandbox_rollout(name, prometheus=self.env["PROMETHEUS_URL"],
                                       replicas=1, steps=STEPS, progress_deadline="120s",
                                       gpus=0, analysis={"verdicts": self.args.rule})
            self.rollouts[name] = Release(self.cluster, self.replicas[0].proc,
                                          self.ns, manifest)
            self.rollouts[name].apply()
        deadline = time.monotonic() + 300
        while not self.all_healthy():
            if time.monotonic() > deadline:
                raise TimeoutError(f"rollouts not Healthy after 300 s in {self.ns}")
            self.supervise()  # a replica that exits meanwhile is started again, as later
            time.sleep(1)
        for name in self.names:
            self.loads.append(BackgroundLoad(self.env, self.rollouts[name].host,
                                             rate=self.args.rate, seconds=24 * 3600))
        self.note(f"{len(self.names)} rollouts Healthy in {self.ns}, load on each")

    def all_healthy(self) -> bool:
        return all(rel.status().get("phase") == "Healthy" for rel in self.rollouts.values())

    # --- releases -----------------------------------------------------------------------------

    def release_next(self) -> None:
        """A new template for every rollout whose last release is over."""
        for name, rel in self.rollouts.items():
            obj = self.cluster.rollout(self.ns, name)
            st, gen = obj.get("status") or {}, obj["metadata"]["generation"]
            over = st.get("observedGeneration") == gen and (
                (st.get("phase") == "Healthy" and not st.get("canaryRevision"))
                or st.get("phase") in ("Degraded", "Paused"))
            if not over:
                continue
            bad = self.rng.random() < self.args.bad_share
            self.version[name] += 1
            rel.apply(with_template(rel.manifest, version=f"v{self.version[name]}",
                                    failure_rate=BAD_FAILURE_RATE if bad else 0))
            new_gen = int(self.cluster.rollout(self.ns, name)["metadata"]["generation"])
            self.releases.append(Started(name, new_gen, bad))

    # --- faults -------------------------------------------------------------------------------

    def kill_one(self) -> None:
        running = [r for r in self.replicas if r.running() and r.name not in self.starting]
        if not running:
            return
        victim = self.rng.choice(running)
        victim.kill()
        self.kills += 1
        self.note(f"SIGKILL {victim.name}.{victim.incarnation} ({self.kills})")

    def supervise(self) -> None:
        """Start again any replica that is not running (killed, or exited on a lost Lease), as
        a kubelet would: in a thread, so the kills and faults keep their pace while a replica
        starts (a start takes 5-20 s on a loaded machine)."""
        for r in self.replicas:
            if not r.running() and r.name not in self.starting:
                self.starting.add(r.name)
                threading.Thread(target=self._start_replica, args=(r,), daemon=True).start()

    def _start_replica(self, r: Replica) -> None:
        try:
            with contextlib.suppress(RuntimeError, TimeoutError):
                r.start()
        finally:
            self.starting.discard(r.name)

    def sigkill_component(self, *names: str) -> None:
        """SIGKILL each component and all its descendants, listed before the first kill: a
        child that outlives its parent (e.g. nginx's workers, which keep the port) belongs to init
        and no longer shows as its children."""
        victims: list[int] = []
        for name in names:
            pidfile = Path(self.env["IR_STATE"]) / "pids" / f"{name}.pid"
            try:
                victims += _process_tree(int(pidfile.read_text().split()[0]))
            except (OSError, ValueError):
                continue
        for victim in dict.fromkeys(victims):
            with contextlib.suppress(OSError):  # one already gone must not spare the rest
                os.kill(victim, 9)
        self.note(f"SIGKILL {', '.join(names)} (and their descendants: {len(victims)} pids)")

    def sandbox_up(self, attempts: int = 3) -> None:
        """Start again what is down, as a kubelet restarts a crashed component: retried, so a
        start that fails once (a port not yet released) does not leave it down for the rest
        of the run."""
        for attempt in range(1, attempts + 1):
            t0 = time.monotonic()
            done = subprocess.run(["bash", str(ROOT / "sandbox" / "up.sh")], check=False,
                                  capture_output=True, text=True,
                                  env={**os.environ, **self.env, "IR_PYTHON": sys.executable})
            took = f"{time.monotonic() - t0:.0f} s"
            if not done.returncode:
                self.note(f"sandbox/up.sh restarted what was down ({took})")
                return
            self.note(f"sandbox/up.sh FAILED ({took}, attempt {attempt}/{attempts}): "
                      f"{done.stderr.strip()[-400:]}")
            time.sleep(3)

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        a = self.args
        t0 = time.monotonic()
        next_kill = t0 + self.rng.uniform(*a.kill_every)
        duration = a.kills * sum(a.kill_every) / 2
        outage_end = 0.1 + a.prometheus_outage / duration
        faults = sorted((at, kind) for at, kind in (
            (0.1, "prometheus-down"), (outage_end, "prometheus-up"), (0.6, "kube-apiserver"),
            (0.72, "etcd"), (0.85, "gateway")) if kind.split("-")[0] in a.faults)
        self.note(f"chaos for about {duration:.0f} s: {a.kills} SIGKILLs, faults {faults}")
        while self.kills < a.kills or faults:
            elapsed = (time.monotonic() - t0) / duration
            try:
                self.supervise()
                self.release_next()
                if faults and elapsed >= faults[0][0]:
                    self.fault(faults.pop(0)[1])
                if time.monotonic() >= next_kill and self.kills < a.kills:
                    self.kill_one()
                    next_kill = time.monotonic() + self.rng.uniform(*a.kill_every)
            except (ApiException, Urllib3Error, OSError) as e:
                self.note(f"API unavailable: {type(e).__name__}")
            time.sleep(0.5)
        self.note(f"chaos over; {a.settle:.0f} s for the releases under way to finish")
        settle_end = time.monotonic() + a.settle
        while time.monotonic() < settle_end:
            self.supervise()
            time.sleep(1)

    def fault(self, kind: str) -> None:
        """``prometheus-down`` / ``prometheus-up`` bracket the outage; any other kind is a
        component SIGKILLed, down 3 s, and started again by up.sh."""
        if kind == "prometheus-up":
            self.sandbox_up()
            return
        self.sigkill_component(*{"prometheus-down": ("prometheus",),
                                 "gateway": ("traefik",)}.get(kind, (kind,)))
        if kind != "prometheus-down":
            time.sleep(3)
            self.sandbox_up()

    @staticmethod
    def warnings_by_reason(events: list[dict[str, Any]]) -> dict[str, int]:
        """The Warning Events the operator posted in the run's namespace (:meth:`warning_events`),
        counted by reason (``BackendUnresolved``: a canary's share taken back while the gateway
        could not find its Service; each Event's ``count`` included)."""
        counts: Counter[str] = Counter()
        for ev in events:
            counts[ev["reason"]] += ev["count"]
        return dict(sorted(counts.items()))

    def warning_events(self) -> list[dict[str, Any]]:
        """Each Warning Event of the namespace, kept with the result (when, what, on which
        rollout): the namespace is deleted after the run."""
        def iso(t: Any) -> str | None:
            return t.isoformat() if t is not None else None
        return [{"reason": ev.reason or "", "object": ev.involved_object.name,
                 "first": iso(ev.first_timestamp or ev.event_time), "last": iso(ev.last_timestamp),
                 "count": ev.count or 1, "message": ev.message}
                for ev in self.cluster.core.list_namespaced_event(self.ns).items
                if ev.type == "Warning"]

    def final_routes(self) -> dict[str, dict[str, int]]:
        return {name: rel.route() for name, rel in self.rollouts.items()}

    def stop(self) -> None:
        for load in self.loads:
            load.stop()
        for r in self.replicas:
            r.stop()
        self.watcher.stop()


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first."""
    tree, i = [pid], 0
    while i < len(tree):
        children = subprocess.run(["pgrep", "-P", str(tree[i])], capture_output=True,
                                  text=True).stdout.split()
        tree += [int(c) for c in children if int(c) not in tree]
        i += 1
    return tree


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rollouts", type=int, default=20)
    p.add_argument("--kills", type=int, default=100)
    p.add_argument("--kill-every", type=float, nargs=2, default=(4.0, 10.0))
    p.add_argument("--prometheus-outage", type=float, default=300)
    p.add_argument("--bad-share", type=float, default=0.4)
    p.add_argument("--rate", type=float, default=4)
    p.add_argument("--settle", type=float, default=120)
    p.add_argument("--faults", type=lambda v: [f for f in v.split(",") if f],
                   default=["prometheus", "kube", "etcd", "gateway"],
                   help="which of the sandbox's parts to fail (comma-separated; '' for none)")
    p.add_argument("--rule", choices=("Sequential", "Window"), default="Sequential",
                   help="the verdict rule (default: the product's, Sequential)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=RESULTS / "chaos-sandbox.json")
    args = p.parse_args()
    run = ChaosRun(args)
    started = time.time()
    try:
        run.start()
        run.run()
        time.sleep(2)  # the watch catches up
        verdict = judge_run(run.releases, list(run.watcher.seen), run.final_routes())
        events = run.warning_events()  # one LIST: the counts are of the events kept
        verdict["warnings_by_reason"] = run.warnings_by_reason(events)
        verdict["warning_events"] = events
    finally:
        run.stop()
        ns_left = run.ns
    result = {"namespace": ns_left, "seconds": round(time.time() - started), "sigkills": run.kills,
              "watch_relists": run.watcher.gaps, **verdict, "events": run.events,
              # every status version, so a rollback can be placed against the faults' times
              "history": [asdict(s) for s in run.watcher.seen],
              "releases_started": [asdict(r) for r in run.releases]}
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("events", "history", "releases_started")}, indent=1))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    run.cluster.delete_namespace(run.ns)
    leftover = run.cluster.finish_deletions(run.ns)
    if leftover:
        print(f"namespace still Terminating: {leftover}")
    return 0 if not verdict["violations"] and not leftover else 1


if __name__ == "__main__":
    sys.exit(main())
