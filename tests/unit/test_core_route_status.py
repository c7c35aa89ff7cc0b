"""The core's decisions on the gateway's view of the route (``routeStatus``, core/route_gate.py):
a weight counts only once the gateway accepted the route's generation that carries it, a
rejected route rolls the release back, a rollback never waits for the gateway, and a gateway
that writes no route status does not block a release (by default)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tests.unit.coresim import Sim, manifest_spec, started

from inference_rollout.api import reasons as r
from inference_rollout.core.timeutil import from_iso
from inference_rollout.core.types import (
    Decision,
    EnsureRevision,
    RecordEvent,
    RouteAcceptance,
    RouteApplied,
    RoutePending,
    RouteRejected,
    RouteUnreported,
    SetWeights,
)

M2 = "m2"
GW = "Gateway gw/sandbox"


@dataclass
class Gateway:
    """A gateway that writes route status: a new generation (any change of the route's weights)
    is answered ``lag`` seconds later, with ``answer`` ("accept", "reject", "resolve-fail") or
    never ("silent": no status at all; "stuck": the status stays at the first generation)."""

    lag: float = 4.0
    answer: str = "accept"
    #: Generations after this one are never answered (None: all are).
    answers_up_to: int | None = None
    generation: int = 0
    route: dict[str, int] | None = None
    changed_at: datetime | None = None

    def __call__(self, sim: Sim) -> RouteAcceptance | None:
        if sim.world.route is None:
            return None
        if sim.world.route != self.route:
            self.generation += 1
            self.route, self.changed_at = dict(sim.world.route), sim.now
        g = self.generation
        if self.answer == "silent":
            return RouteUnreported(g)
        assert self.changed_at is not None
        caught_up = (sim.now - self.changed_at).total_seconds() >= self.lag
        if self.answer == "stuck" and g > 1:
            caught_up = False
        if self.answers_up_to is not None and g > self.answers_up_to:
            caught_up = False
        if not caught_up:
            return RoutePending(g, f"{GW}: Accepted is for generation {g - 1}")
        if self.answer == "reject":
            return RouteRejected(g, GW, "Accepted", "NotAllowedByListeners",
                                 "no listener of gw/sandbox admits namespace team")
        if self.answer == "resolve-fail":
            return RouteRejected(g, GW, "ResolvedRefs", "BackendNotFound",
                                 "service not found")
        return RouteApplied(g)


def body(route_status: str | None = None, **over: Any) -> dict[str, Any]:
    spec = manifest_spec(**over)
    if route_status is not None:
        spec["traffic"] = {"gatewayAPI": {**spec["traffic"]["gatewayAPI"],
                                          "routeStatus": route_status}}
    return spec


def in_release(gateway: Gateway, route_status: str | None = None, **over: Any) -> Sim:
    sim = started(body(route_status, **over), gateway=gateway)
    sim.release(M2)
    sim.decisions.clear()
    return sim


def events(d: Decision) -> list[RecordEvent]:
    return [a for a in d.actions if isinstance(a, RecordEvent)]


def reasons(decisions: list[Decision]) -> list[str]:
    return [e.reason for d in decisions for e in events(d)]


def weight_written(sim: Sim, weight: int) -> int:
    """Index of the decision that wrote ``weight`` to the canary."""
    return next(i for i, d in enumerate(sim.decisions)
                if any(isinstance(a, SetWeights) and a.canary_weight == weight
                       for a in d.actions))


def condition(sim: Sim, type_: str = r.ROUTE_ACCEPTED) -> Any:
    return next((c for c in sim.status.conditions if c.type == type_), None)


def test_the_hold_starts_when_the_gateway_accepts_the_new_generation() -> None:
    sim = in_release(Gateway(lag=4.0))
    sim.run_until(lambda s: s.status.step_started_at is not None, limit=300)
    written_at = sim.decisions[weight_written(sim, 5)]
    assert written_at.status.canary_weight == 5
    assert written_at.status.step_started_at is None  # pending, not holding
    assert "waiting for the gateway to accept the route" in written_at.status.message
    started_at = from_iso(sim.status.step_started_at)
    assert started_at is not None
    # the gateway answered 4 s after the route changed; the hold began at its answer, not before
    assert started_at - sim.now == timedelta(0)
    entered = from_iso(written_at.status.step_entered_at)
    assert entered is not None and started_at - entered >= timedelta(seconds=4)
    assert r.ROUTE_ACCEPTED in [e.reason for e in events(sim.last)]
    assert condition(sim).status == "True"
    sim.run_until(lambda s: s.stable is not None and s.canary is None, limit=1200)
    assert sim.status.phase == "Healthy"


def test_each_step_waits_for_its_own_generation() -> None:
    sim = in_release(Gateway(lag=4.0))
    sim.run_until(lambda s: s.canary is None, limit=1500)
    for weight in (5, 20, 50):
        i = weight_written(sim, weight)
        entered = from_iso(sim.decisions[i].status.step_entered_at)
        held = next(from_iso(d.status.step_started_at) for d in sim.decisions[i:]
                    if d.status.step_started_at is not None)
        assert entered is not None and held is not None
        assert held - entered >= timedelta(seconds=4), weight


def test_a_rejected_route_rolls_back_with_the_gateways_reason() -> None:
    sim = in_release(Gateway(lag=2.0, answer="reject"))
    d = sim.run_until(lambda s: s.status.aborted, limit=300)
    assert d.rolled_back == r.ROUTE_REJECTED
    assert SetWeights(sim.stable or "", sim.canary, 0) in d.actions  # traffic back, same call
    warning = next(e for e in events(d) if e.reason == r.ROUTE_REJECTED)
    assert warning.type == "Warning"
    assert "NotAllowedByListeners" in warning.message
    assert "no listener of gw/sandbox admits namespace team" in warning.message
    aborted = condition(sim, "Aborted")
    assert aborted.status == "True" and aborted.reason == r.ROUTE_REJECTED
    route = condition(sim)
    assert (route.status, route.reason) == ("False", r.ROUTE_REJECTED)
    assert "NotAllowedByListeners" in route.message
    # exactly one Event about it (the rollback's), not a second one from the condition change
    assert reasons([d]).count(r.ROUTE_REJECTED) == 1


def test_a_backend_the_gateway_never_resolves_gets_no_weight_and_rolls_back_at_the_deadline(
) -> None:
    """BackendNotFound is the gateway not having seen the canary's Service (yet): no weight is
    given to it (the gateway would answer that share with 500), and the progress deadline
    ends the wait with the gateway's words."""
    sim = in_release(Gateway(lag=2.0, answer="resolve-fail"), strategy=STEPS_5M)
    d = sim.run_until(lambda s: s.status.aborted, limit=1200)
    assert d.rolled_back == r.ROUTE_NOT_ACCEPTED
    assert all(x.status.canary_weight == 0 for x in sim.decisions)
    assert "ResolvedRefs=False BackendNotFound: service not found" in sim.status.message
    entered = from_iso(d.status.step_entered_at)
    assert entered is not None and 300 <= (sim.now - entered).total_seconds() < 303
    waiting = sim.decisions[len(sim.decisions) // 2].status.message
    assert "waiting for the gateway to resolve the canary's backend" in waiting


def late_backend(gateway: Gateway, unresolved: Any) -> Any:
    """``gateway``, except that while ``unresolved(sim)`` it cannot find the route's backends."""

    def answer(sim: Sim) -> RouteAcceptance | None:
        got = gateway(sim)
        if got is not None and unresolved(sim):
            return RouteRejected(got.generation, GW, "ResolvedRefs", "BackendNotFound",
                                 "service chat-new not found")
        return got

    return answer


def test_a_gateway_late_to_see_the_canarys_service_delays_the_first_weight() -> None:
    """The gateway's caches lag (after its own restart or the API server's): it reports
    BackendNotFound for the canary's Service for 30 s.  The first weight waits for it; the
    release goes on, no rollback (the sandbox chaos run rolled back 17 good canaries here)."""
    sim = started(body())
    since = sim.now
    sim.gateway = late_backend(Gateway(lag=1.0),
                               lambda s: (s.now - since).total_seconds() < 30)
    sim.release(M2)
    sim.decisions.clear()
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=600)
    assert (sim.now - since).total_seconds() >= 30  # not before the gateway resolved it
    assert all(d.status.canary_weight == 0 for d in sim.decisions[:-1])
    # meanwhile the canary's Service is checked (and created if missing) at every look
    waits = [d for d in sim.decisions[:-1] if "resolve the canary's backend" in d.status.message]
    assert waits and all(any(isinstance(a, EnsureRevision) and a.revision == sim.canary
                             for a in d.actions) for d in waits)
    sim.run_until(lambda s: s.canary is None, limit=1500)
    assert not any(d.rolled_back for d in sim.decisions)
    assert sim.status.phase == "Healthy" and sim.stable is not None


def test_a_backend_lost_mid_hold_takes_the_weight_back_until_the_gateway_resolves_it() -> None:
    """At 20 %, held, the gateway stops finding the canary's Service for 20 s (its cache
    re-listing after a restart).  The share goes back to 0 % at once (a Warning says why),
    the step starts again once the gateway resolves it, and the release is promoted."""
    sim = in_release(Gateway(lag=1.0))
    sim.run_until(lambda s: s.status.canary_weight == 20 and s.status.step_started_at
                  is not None, limit=600)
    lost = sim.now
    sim.gateway = late_backend(Gateway(lag=1.0),
                               lambda s: (s.now - lost).total_seconds() < 20)
    sim.decisions.clear()
    d = sim.reconcile()
    assert SetWeights(sim.stable or "", sim.canary, 0) in d.actions
    warning = next(e for e in events(d) if e.reason == r.BACKEND_UNRESOLVED)
    assert warning.type == "Warning" and "BackendNotFound" in warning.message
    assert "20% goes back to 0%" in warning.message
    assert not d.rolled_back and not sim.status.aborted
    sim.run_until(lambda s: s.canary is None, limit=1500)
    assert not any(x.rolled_back for x in sim.decisions)
    back = weight_written(sim, 20)
    assert (sim.decisions[back].status.step_entered_at or "") >= lost.isoformat()[:19]
    assert reasons(sim.decisions).count(r.BACKEND_UNRESOLVED) == 1


def test_a_rollback_never_waits_for_the_gateway() -> None:
    gateway = Gateway(lag=0.0, answers_up_to=2)  # the 5% generation is never answered
    sim = in_release(gateway)
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=300)
    assert sim.status.step_started_at is None  # pending
    d = sim.reconcile(abort=True)
    assert d.rolled_back == r.ABORT_REQUESTED
    assert d.actions[0] == SetWeights(sim.stable or "", sim.canary, 0)
    assert sim.status.aborted and sim.status.canary_weight == 0
    # it stays rolled back while the gateway still shows the old generation
    later = sim.run(30)
    assert all(d.status.aborted and d.status.canary_weight == 0 for d in later)


def test_a_rejection_after_a_rollback_changes_nothing() -> None:
    gateway = Gateway(lag=2.0, answer="reject")
    sim = in_release(gateway)
    sim.run_until(lambda s: s.status.aborted, limit=300)
    later = sim.run(60)
    assert all(not d.rolled_back for d in later)
    # the gateway refuses the rollback's generation too: reported once, as a Warning
    assert reasons(later) == [r.ROUTE_REJECTED]
    assert sim.world.route == {sim.stable: 100, sim.canary: 0}
    assert sim.status.aborted and sim.status.abort_reason == r.ROUTE_REJECTED


STEPS_5M = {"steps": [{"weight": 5, "pause": "1m"}, {"weight": 100}], "progressDeadline": "5m"}


def test_a_weight_never_accepted_rolls_back_at_the_progress_deadline() -> None:
    sim = in_release(Gateway(lag=2.0, answer="stuck"), strategy=STEPS_5M)
    d = sim.run_until(lambda s: s.status.aborted, limit=1200)
    assert d.rolled_back == r.ROUTE_NOT_ACCEPTED
    entered = from_iso(d.status.step_entered_at)
    assert entered is not None and 300 <= (sim.now - entered).total_seconds() < 303
    assert "did not accept generation" in sim.status.message
    assert "Accepted is for generation" in sim.status.message


def test_a_gateway_without_route_status_does_not_hold_releases_by_default() -> None:
    """IfReported: a route with no status.parents is trusted as written, exactly as before
    route status was read (the sandbox's nginx translator writes none)."""
    silent = in_release(Gateway(answer="silent"))
    blind = in_release(Gateway(answer="silent"), route_status="Ignored")
    blind.gateway = None
    for sim in (silent, blind):
        sim.run_until(lambda s: s.canary is None, limit=1500)
    assert silent.now == blind.now
    assert [d.status.canary_weight for d in silent.decisions] == \
        [d.status.canary_weight for d in blind.decisions]
    got = condition(silent)
    assert (got.status, got.reason) == ("Unknown", r.ROUTE_STATUS_NOT_REPORTED)
    assert condition(blind) is None


def test_required_waits_for_a_gateway_that_never_reports() -> None:
    sim = in_release(Gateway(answer="silent"), route_status="Required", strategy=STEPS_5M)
    d = sim.run_until(lambda s: s.status.aborted, limit=1200)
    assert d.rolled_back == r.ROUTE_NOT_ACCEPTED
    assert "no status.parents" in sim.status.message
    assert sim.status.current_step == 0  # it never held step 1


def test_ignored_neither_waits_nor_rolls_back() -> None:
    sim = in_release(Gateway(lag=2.0, answer="reject"), route_status="Ignored")
    sim.run_until(lambda s: s.canary is None, limit=1500)
    assert not any(d.rolled_back for d in sim.decisions)
    assert condition(sim) is None
    assert r.ROUTE_REJECTED not in reasons(sim.decisions)


def test_a_refusal_while_the_canary_is_at_zero_is_reported_but_not_a_rollback() -> None:
    """A canary joins the route at 0% before its Service exists; a gateway may refuse that
    generation for a moment (BackendNotFound).  Nothing rides on it: one Warning, no
    rollback and no Event (the condition shows it); its first weight is judged on the
    generation that carries it."""
    seen: list[str] = []
    answers = iter([RouteRejected(2, GW, "ResolvedRefs", "BackendNotFound",
                                  "service not found")] * 3)
    gateway = Gateway(lag=0.0)

    def flaky(sim: Sim) -> RouteAcceptance | None:
        got = gateway(sim)
        if sim.canary is not None and sim.status.canary_weight == 0:
            return next(answers, got)
        return got

    sim = started(body(), gateway=flaky)
    sim.release(M2)
    sim.decisions.clear()
    def watch(s: Sim) -> bool:
        got = condition(s)
        seen.append(got.status if got else "")
        return s.status.step_started_at is not None

    sim.run_until(watch, limit=300)
    assert "False" in seen  # the refusal was visible in the condition
    assert not any(d.rolled_back for d in sim.decisions)
    assert r.ROUTE_REJECTED not in reasons(sim.decisions)
    assert condition(sim).status == "True"


def test_a_gateway_that_starts_refusing_at_stable_is_reported_once() -> None:
    gateway = Gateway(lag=0.0)
    sim = started(body(), gateway=gateway)
    gateway.answer = "reject"
    decisions = sim.run(60)
    assert reasons(decisions).count(r.ROUTE_REJECTED) == 1
    assert condition(sim).status == "False"
    assert sim.status.phase == "Healthy"  # no release to stop: the route stays as it is


def test_a_stables_service_the_gateway_cannot_find_is_asked_for_again() -> None:
    """At rest the stable is asked for only when its Deployment's size is off; a Service deleted
    by hand left every request answered 500 by the gateway, and nothing recreated it."""
    gateway = Gateway(lag=0.0)
    sim = started(body(), gateway=gateway)
    stable = sim.stable
    assert stable is not None
    assert not any(isinstance(a, EnsureRevision) for d in sim.run(10) for a in d.actions)
    gateway.answer = "resolve-fail"
    gateway.route = None  # the gateway answers anew (a generation of its own)
    d = sim.reconcile()
    asks = [a for a in d.actions if isinstance(a, EnsureRevision)]
    assert asks == [EnsureRevision(stable, sim.spec.replicas)]
    assert d.requeue_after is not None and d.requeue_after <= 5
    gateway.answer = "accept"
    gateway.route = None
    d = sim.reconcile()
    assert not any(isinstance(a, EnsureRevision) for a in d.actions)
