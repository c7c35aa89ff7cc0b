"""The drills themselves: what each changes, what it watches, what it verifies.

* ``canary-fault``: a release of the current template plus the user's fault (pod annotations,
  env, args); verified: traffic on stable before, the operator rolls the faulty canary back
  within N analysis intervals of its first traffic, traffic on stable after.  Undo: the
  original template (the rollout returns to its stable revision).
* ``pod-kill``: delete N Ready pods of the stable revision; verified: the route never moved, the
  Deployment has all its pods Ready again within the recovery timeout, and -- with a probe --
  the error rate and p99 of requests through the gateway stayed within bounds.  Nothing to
  undo (the Deployment replaces the pods).
* ``prometheus-outage``: a harmless release (the template with a drill annotation), and once its
  canary carries traffic, the rollout's Prometheus address is cut for ``--outage``; verified:
  no step passes and nothing is promoted without evidence.  Undo: the address and the template.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from ..api.duration import parse_duration
from ..api.spec import SERVING_CONTAINER
from ..kube import Kube
from ..paths import ns_path, rollout_path
from .drill import ANN_DRILL, Refused, begin, still_running
from .drill_report import DrillRecord

Act = Callable[[DrillRecord], Awaitable[None]]
POLL_S = 1.0
LABEL_ROLLOUT, LABEL_REVISION = "rollouts.inference.dev/rollout", "rollouts.inference.dev/revision"


def prepare(kind: str, kube: Kube, ns: str, body: dict[str, Any],
            args: argparse.Namespace) -> tuple[list[str], Act]:
    st = body.get("status") or {}
    stable = st.get("stableRevision")
    if not stable:
        raise Refused("the rollout has no stable revision yet: drill it once it is Healthy")
    mid_release = bool(st.get("canaryRevision")) or st.get("phase") not in ("Healthy", None)
    if mid_release and not args.force:
        raise Refused(f"the rollout is mid-release (phase {st.get('phase')}, canary "
                      f"{st.get('canaryRevision') or '-'}): wait for it to finish, or pass "
                      "--force")
    drill = Drills(kube, ns, body, str(stable), args)
    return {"canary-fault": drill.canary_fault_plan, "pod-kill": drill.pod_kill_plan,
            "prometheus-outage": drill.outage_plan}[kind]()


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--{what} {item!r}: write KEY=VALUE")
        out[key] = value
    return out


class Drills:
    def __init__(self, kube: Kube, ns: str, body: dict[str, Any], stable: str,
                 args: argparse.Namespace) -> None:
        self.kube, self.ns, self.body, self.stable, self.args = kube, ns, body, stable, args
        self.name = body["metadata"]["name"]
        self.path = rollout_path(ns, self.name)
        analysis = body["spec"].get("analysis") or {}
        self.interval = parse_duration(analysis.get("interval", "1m"))

    # --- shared watching ---------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        return dict((await self.kube.get(self.path)).get("status") or {})

    async def route_share(self, revision: str) -> int | None:
        """The revision's percent of the HTTPRoute's weight (None: the route is unreadable)."""
        gw = self.body["spec"]["traffic"]["gatewayAPI"]
        route = (gw.get("httpRouteRef") or {}).get("name", self.name)
        try:
            obj = await self.kube.get(ns_path("gateway.networking.k8s.io", "v1", self.ns,
                                              "httproutes", route))
        except Exception:
            return None
        weights: dict[str, int] = {}
        for rule in obj.get("spec", {}).get("rules", []):
            for ref in rule.get("backendRefs", []):
                weights[ref.get("name", "")] = weights.get(ref.get("name", ""), 0) + \
                    int(ref.get("weight", 1))
        total = sum(weights.values())
        return None if total == 0 else round(100 * weights.get(f"{self.name}-{revision}", 0)
                                             / total)

    async def check_on_stable(self, record: DrillRecord, when: str, wait_s: float = 0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            st, share = await self.status(), await self.route_share(self.stable)
            ok = int(st.get("canaryWeight") or 0) == 0 and share in (100, None) and \
                st.get("stableRevision") == self.stable
            if ok or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        record.check(f"traffic on stable {when}", ok,
                     f"stable {self.stable} holds {share if share is not None else '?'}% of the "
                     f"route, status canaryWeight {st.get('canaryWeight') or 0}")

    def _container_patch(self, template: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(template)
        meta = out.setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(_pairs(self.args.annotation, "annotation"))
        containers = out["spec"]["containers"]
        serving = next((c for c in containers if c.get("name") == SERVING_CONTAINER),
                       containers[0])
        env = _pairs(self.args.env, "env")
        if env:
            serving["env"] = [e for e in serving.get("env", []) if e.get("name") not in env] + \
                [{"name": k, "value": v} for k, v in env.items()]
        if self.args.arg:
            serving["args"] = [*serving.get("args", []), *self.args.arg]
        return out

    # --- canary-fault ------------------------------------------------------------------------

    def canary_fault_plan(self) -> tuple[list[str], Act]:
        if not (self.args.annotation or self.args.env or self.args.arg):
            raise ValueError("canary-fault needs a fault: --annotation, --env or --arg (e.g. "
                             "--annotation sim.inference.dev/failure-rate=30 on the sandbox)")
        template = self.body["spec"]["template"]
        faulty = self._container_patch(template)
        fault = ", ".join([*self.args.annotation, *self.args.env, *self.args.arg])
        limit = self.args.within * self.interval
        plan = [f"verify all traffic is on stable {self.stable}",
                f"start a release of the current template with the fault: {fault}",
                f"verify the operator rolls it back within {self.args.within} analysis "
                f"intervals ({limit:g} s) of the canary's first traffic",
                "verify all traffic is on stable again",
                "undo: restore the original template (the rollout returns to its stable "
                "revision)"]

        async def act(record: DrillRecord) -> None:
            await self.check_on_stable(record, "before")
            await begin(self.kube, self.path, record,
                        [{"op": "replace", "path": "/spec/template", "value": template}],
                        [{"op": "replace", "path": "/spec/template", "value": faulty}])
            record.note(f"faulty release started ({fault})")
            outcome = await self.follow_release(record, stop_on_first_traffic=False)
            record.numbers.update(outcome)
            rolled_back = outcome.get("outcome") == "rolled back"
            record.check("the faulty canary was rolled back", rolled_back,
                         f"{outcome.get('outcome')}: {outcome.get('reason', '-')}")
            if rolled_back and "seconds_exposed" in outcome:
                took = float(outcome["seconds_exposed"])
                record.numbers["intervals_to_rollback"] = round(took / self.interval, 2)
                record.check(f"rolled back within {self.args.within} intervals", took <= limit,
                             f"{took:.1f} s after its first traffic ({took / self.interval:.1f} "
                             f"intervals of {self.interval:g} s)")
            if rolled_back:
                await self.check_on_stable(record, "after", wait_s=30)

        return plan, act

    async def follow_release(self, record: DrillRecord, stop_on_first_traffic: bool
                             ) -> dict[str, Any]:
        """Follow the drill's release until it is rolled back or promoted (or, when asked,
        until its canary first carries traffic)."""
        canary, weight, exposed_at = None, 0, None
        max_weight = 0
        while True:
            await still_running(self.kube, self.path)
            st = await self.status()
            c = st.get("canaryRevision")
            if c and c != self.stable and canary is None:
                canary = c
                record.note(f"canary revision {c}")
            w = int(st.get("canaryWeight") or 0)
            if canary and w != weight:
                record.note(f"canary weight {weight}% -> {w}%")
                weight, max_weight = w, max(max_weight, w)
                if w > 0 and exposed_at is None:
                    exposed_at = time.monotonic()
                    if stop_on_first_traffic:
                        return {"canary": canary, "first_weight": w}
            out: dict[str, Any] = {"canary": canary or "-", "max_canary_weight": max_weight}
            if exposed_at is not None:
                out["seconds_exposed"] = round(time.monotonic() - exposed_at, 1)
            if canary and st.get("aborted") and st.get("canaryRevision") == canary:
                record.note(f"rolled back: {st.get('abortReason')}: {st.get('message')}")
                return {**out, "outcome": "rolled back", "reason": st.get("abortReason")}
            if canary and st.get("stableRevision") == canary:
                record.note(f"promoted: {canary} is stable")
                return {**out, "outcome": "promoted", "reason": "the fault was not caught"}
            await asyncio.sleep(POLL_S)

    # --- pod-kill ------------------------------------------------------------------------------

    def pod_kill_plan(self) -> tuple[list[str], Act]:
        recovery = parse_duration(self.args.recovery_timeout)
        slo = ((self.body["spec"].get("analysis") or {}).get("slo") or {}).get("e2eP99")
        p99 = self.args.max_p99 or slo
        plan = [f"verify all traffic is on stable {self.stable}",
                f"delete {self.args.count} Ready pod(s) of revision {self.stable} at random",
                "verify the route never moves off stable meanwhile",
                f"verify the Deployment has all its pods Ready again within "
                f"{self.args.recovery_timeout}"]
        if self.args.probe_url:
            plan.append(f"send {self.args.probe_rps:g} requests/s to {self.args.probe_url} "
                        f"throughout; verify errors ≤ {self.args.max_error_rate:g}"
                        + (f" and p99 ≤ {p99}" if p99 else ""))

        async def act(record: DrillRecord) -> None:
            await self.check_on_stable(record, "before")
            pods = await self._ready_pods()
            if len(pods) < self.args.count:
                raise Refused(f"revision {self.stable} has {len(pods)} Ready pods, fewer than "
                              f"--count {self.args.count}")
            victims = random.sample(pods, self.args.count)
            probe = Probe(self.args) if self.args.probe_url else None
            probing = asyncio.create_task(probe.run()) if probe else None
            await begin(self.kube, self.path, record, [], [])
            try:
                await asyncio.sleep(3 if probe else 0)  # a baseline before the kill
                for pod in victims:
                    await self.kube.delete(ns_path("", "v1", self.ns, "pods", pod))
                record.note(f"deleted pod(s) {', '.join(victims)}")
                killed_at, moved = time.monotonic(), []
                want = await self._stable_pod_count()
                back_after = None
                while time.monotonic() - killed_at < recovery:
                    await still_running(self.kube, self.path)
                    share = await self.route_share(self.stable)
                    if share not in (100, None):
                        moved.append(share)
                    ready = await self._ready_pods()
                    if len(ready) >= want and not set(victims) & set(ready):
                        back_after = time.monotonic() - killed_at
                        record.note(f"{len(ready)}/{want} pods Ready again")
                        break
                    await asyncio.sleep(POLL_S)
                if probe:
                    await asyncio.sleep(3)  # and after
            finally:
                if probe and probing:
                    probe.stop()
                    await probing
            record.check("route stayed on stable", not moved,
                         "100% on stable throughout" if not moved else f"saw {moved}")
            record.check(f"pods back within {self.args.recovery_timeout}", back_after is not None,
                         f"Ready again after {back_after:.1f} s" if back_after is not None
                         else "not all Ready in time")
            if back_after is not None:
                record.numbers["seconds_to_recover"] = round(back_after, 1)
            if probe:
                probe.verify(record, parse_duration(p99) if p99 else None)

        return plan, act

    async def _ready_pods(self) -> list[str]:
        """The stable's Ready pods, not being deleted.  A rollout with adapters shares one
        Deployment among its serving versions, so its stable's pods are those the operator's
        ``status.adapterPods`` puts on the stable version (a replacement counts once it is
        loaded and admitted, i.e. once it serves the stable's adapters); otherwise the stable
        revision's label selects them."""
        adapter_pods = stable_adapter_pods(await self.kube.get(self.path), self.stable)
        if adapter_pods is None:
            selector = f"{LABEL_ROLLOUT}={self.name},{LABEL_REVISION}={self.stable}"
        else:
            selector = f"{LABEL_ROLLOUT}={self.name}"
        pods = await self.kube.get(ns_path("", "v1", self.ns, "pods"),
                                   params={"labelSelector": selector})
        return [p["metadata"]["name"] for p in pods.get("items", [])
                if (adapter_pods is None or p["metadata"]["name"] in adapter_pods)
                and not p["metadata"].get("deletionTimestamp") and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions", []))]

    async def _stable_pod_count(self) -> int:
        """How many pods the stable should have: its Deployment's count, or, for a rollout with
        adapters (whose Deployment is named by its template, not by the serving version), the
        rollout's own count (a Healthy rollout serves the stable on every pod)."""
        body = await self.kube.get(self.path)  # now: an HPA may have changed the count
        if stable_adapter_pods(body, self.stable) is not None:
            return int(body["spec"].get("replicas", 1))
        deployment = ns_path("apps", "v1", self.ns, "deployments", f"{self.name}-{self.stable}")
        return int((await self.kube.get(deployment))["spec"].get("replicas", 1))

    # --- prometheus-outage -----------------------------------------------------------------

    def outage_plan(self) -> tuple[list[str], Act]:
        analysis = self.body["spec"].get("analysis") or {}
        if not (analysis.get("prometheus") or {}).get("address"):
            raise Refused("the rollout has no spec.analysis.prometheus: nothing to cut")
        template = self.body["spec"]["template"]
        harmless = copy.deepcopy(template)
        harmless.setdefault("metadata", {}).setdefault("annotations", {})[ANN_DRILL] = \
            f"prometheus-outage {time.time():.0f}"
        address = analysis["prometheus"]["address"]
        outage = parse_duration(self.args.outage)
        plan = ["start a harmless release (the template plus a drill annotation)",
                f"once its canary carries traffic, point the analysis at {self.args.cut_address} "
                f"for {self.args.outage}",
                "verify no step passes and nothing is promoted without evidence",
                f"undo: the address back to {address}, the original template"]
        undo_ops = [{"op": "replace", "path": "/spec/analysis/prometheus/address",
                     "value": address},
                    {"op": "replace", "path": "/spec/template", "value": template}]

        async def act(record: DrillRecord) -> None:
            await begin(self.kube, self.path, record, undo_ops,
                        [{"op": "replace", "path": "/spec/template", "value": harmless}])
            first = await self.follow_release(record, stop_on_first_traffic=True)
            await self.kube.request("PATCH", self.path, [
                {"op": "replace", "path": "/spec/analysis/prometheus/address",
                 "value": self.args.cut_address}], "application/json-patch+json")
            st = await self.status()
            step, weight = st.get("currentStep"), st.get("canaryWeight")
            record.note(f"Prometheus cut at step {step}, canary weight {weight}%")
            advanced, errors_seen, end = [], 0, time.monotonic() + outage
            while time.monotonic() < end:
                await still_running(self.kube, self.path)
                s = await self.status()
                if s.get("stableRevision") == first["canary"] or (
                        s.get("currentStep") or 0) > (step or 0):
                    advanced.append(f"step {s.get('currentStep')}, "
                                    f"stable {s.get('stableRevision')}")
                errors_seen = max([errors_seen, *[int(m.get("consecutiveErrors") or 0)
                                                  for m in (s.get("analysis") or {}).values()]])
                await asyncio.sleep(POLL_S)
            record.numbers.update({"outage_seconds": outage, "consecutive_errors": errors_seen})
            record.check("no promotion without evidence", not advanced,
                         "held at its step throughout" if not advanced else f"advanced: "
                         f"{advanced[0]}")
            record.check("the outage was measured as errors", errors_seen > 0,
                         f"{errors_seen} consecutive analysis errors")

        return plan, act


def stable_adapter_pods(body: dict[str, Any], stable: str) -> set[str] | None:
    """The pods a rollout's ``status.adapterPods`` puts on its stable version (None: the
    rollout has no adapters, its stable is a revision with a Deployment of its own)."""
    listed = (body.get("status") or {}).get("adapterPods")
    if listed is None:
        return None
    return {str(p.get("pod")) for p in listed
            if isinstance(p, dict) and p.get("version") == stable}


class Probe:
    """Requests through the gateway at a steady rate, for the pod-kill drill's SLA checks."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.probe_url.rstrip("/") + "/v1/models"
        self.headers = {"Host": args.probe_host} if args.probe_host else {}
        self.period = 1.0 / max(args.probe_rps, 0.1)
        self.max_error_rate = args.max_error_rate
        self.results: list[tuple[bool, float]] = []
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            pending: set[asyncio.Task[None]] = set()
            while not self._stop.is_set():
                task = asyncio.create_task(self._one(client))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(self.period)
            await asyncio.gather(*pending)

    async def _one(self, client: httpx.AsyncClient) -> None:
        started = time.monotonic()
        try:
            ok = (await client.get(self.url, headers=self.headers)).status_code < 500
        except httpx.HTTPError:
            ok = False
        self.results.append((ok, time.monotonic() - started))

    def verify(self, record: DrillRecord, max_p99: float | None) -> None:
        total = len(self.results)
        errors = sum(1 for ok, _ in self.results if not ok)
        rate = errors / total if total else 1.0
        latencies = sorted(t for _, t in self.results)
        p99 = latencies[min(total - 1, int(0.99 * total))] if total else float("inf")
        record.numbers.update({"probe_requests": total, "probe_errors": errors,
                               "probe_error_rate": round(rate, 4),
                               "probe_p99_seconds": round(p99, 3)})
        record.check("error rate within bound", total > 0 and rate <= self.max_error_rate,
                     f"{errors}/{total} failed ({rate:.2%}; bound {self.max_error_rate:.2%})")
        if max_p99 is not None:
            record.check("p99 within SLA", p99 <= max_p99, f"p99 {p99 * 1000:.0f} ms "
                         f"(SLA {max_p99 * 1000:.0f} ms)")
