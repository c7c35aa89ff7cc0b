"""When the core asks for header routes (core/header_routes.py), driven through the decision loop:
on from the canary's first Ready pod, sessions only while both revisions carry a share, off in the
same write that rolls back, promotes or leaves an invalid spec, and put back when a route lost
them (a self-heal of git, a user's edit)."""

from __future__ import annotations

from typing import Any

from tests.unit.coresim import Sim, manifest_spec, started

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core import header_routes
from inference_rollout.core.types import (
    NO_HEADER_ROUTES,
    Observation,
    RecordEvent,
    RevisionState,
    SetWeights,
)
from inference_rollout.core.validation import traffic_to_stable

TRAFFIC = {"gatewayAPI": {"parentRefs": [{"name": "gw"}]},
           "sessionAffinity": {"cookie": {}},
           "testers": {"headers": [{"name": "X-Canary", "value": "always"}]}}
A, B = "aaaaaaaaaa", "bbbbbbbbbb"
STEPS = {"steps": [{"weight": 5, "pause": "1m"}, {"weight": 20, "pause": "1m"}, {"weight": 100}]}


def release(**traffic: Any) -> tuple[Sim, str, str]:
    sim = started(manifest_spec(traffic={**TRAFFIC, **traffic}, strategy=STEPS))
    old = sim.stable
    assert old is not None
    new = sim.release("m2")
    sim.decisions.clear()
    return sim, old, new


def writes(sim: Sim) -> list[tuple[int, list[str]]]:
    return [(a.canary_weight, sorted(a.header_routes))
            for d in sim.decisions for a in d.actions if isinstance(a, SetWeights)]


def test_a_promoted_release_has_testers_throughout_and_sessions_between_0_and_100() -> None:
    sim, _old, new = release()
    sim.run_until(lambda s: s.status.phase == "Healthy" and s.stable == new, limit=600)
    assert writes(sim) == [
        (0, []),                           # the canary on the route, its pods not Ready yet
        (5, ["sessions", "testers"]),      # Ready: the first step (an evaluation gate would
                                           # hold it at 0 % with the testers on: test below)
        (20, ["sessions", "testers"]),
        (100, ["testers"]),                # nobody kept on a stable about to lose its pods
        (0, []),                           # promoted: the split alone again
    ]


def test_a_rollback_takes_every_header_route_off_in_the_same_write() -> None:
    sim, old, new = release()
    sim.run_until(lambda s: s.status.canary_weight == 20, limit=300)
    assert sim.world.header_routes == {"testers", "sessions"}
    sim.verdicts = "fail"
    sim.run_until(lambda s: s.status.aborted, limit=60)
    assert writes(sim)[-1] == (0, [])
    assert sim.world.route == {old: 100, new: 0} and sim.world.header_routes == NO_HEADER_ROUTES
    sim.run(120)  # and they stay off while the aborted canary keeps its pods
    assert sim.world.header_routes == NO_HEADER_ROUTES


def test_header_routes_lost_from_the_route_are_written_again() -> None:
    sim, _old, _new = release()
    sim.run_until(lambda s: s.status.canary_weight == 20, limit=300)
    route = dict(sim.world.route or {})
    sim.world.header_routes = NO_HEADER_ROUTES   # someone rewrote the route's rules
    d = sim.reconcile()
    assert [a.header_routes for a in d.actions if isinstance(a, SetWeights)] == [
        {"testers", "sessions"}]
    assert sim.world.route == route


def test_without_testers_or_affinity_nothing_changes() -> None:
    sim = started(manifest_spec(strategy=STEPS))
    new = sim.release("m2")
    sim.run_until(lambda s: s.status.phase == "Healthy" and s.stable == new, limit=600)
    assert all(not routes for _w, routes in writes(sim))


def _world(ready: int, **kw: Any) -> Observation:
    return Observation(generation=1, template_hash="x",
                       revisions={B: RevisionState(1, ready, ready)}, route={}, **kw)


def test_a_canary_without_ready_pods_at_0_percent_gets_no_testers() -> None:
    spec = InferenceRolloutSpec.parse(manifest_spec(traffic=TRAFFIC))
    st = InferenceRolloutStatus(stable_revision=A, canary_revision=B, canary_weight=0)
    assert header_routes.wanted(spec, st, _world(0)) == NO_HEADER_ROUTES
    assert header_routes.wanted(spec, st, _world(1)) == {"testers"}
    assert header_routes.wanted(spec, st, _world(1, invalid=("bad",))) == NO_HEADER_ROUTES
    assert header_routes.wanted(spec, st, _world(1, deleting=True)) == NO_HEADER_ROUTES


def test_the_fail_safe_write_to_stable_also_takes_header_routes_off() -> None:
    st = InferenceRolloutStatus(stable_revision=A, canary_revision=B, canary_weight=0)
    assert traffic_to_stable(st, {A: 100, B: 0}, False) is None
    write = traffic_to_stable(st, {A: 100, B: 0}, False, frozenset({"testers"}))
    assert write == SetWeights(A, B, 0)


# --- a testers' step: weight 0, only the testers reach the canary --------------------------------

TESTERS_FIRST = {"steps": [{"weight": 0, "pause": "1m"}, {"weight": 20, "pause": "1m"},
                           {"weight": 100}]}


def test_a_testers_step_needs_testers() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"spec\.strategy\.steps\[0\]\.weight: 0 is a "
                                              r"testers' step, which needs spec\.traffic\.testers"):
        InferenceRolloutSpec.parse(manifest_spec(strategy=TESTERS_FIRST))
    InferenceRolloutSpec.parse(manifest_spec(strategy=TESTERS_FIRST, traffic=TRAFFIC))


def test_a_testers_step_is_analysed_on_the_testers_traffic_before_any_weight() -> None:
    from inference_rollout.api import reasons as r

    sim = started(manifest_spec(traffic=TRAFFIC, strategy=TESTERS_FIRST))
    new = sim.release("m2")
    sim.decisions.clear()
    sim.run_until(lambda s: s.status.canary_weight == 20, limit=600)
    # the hold began once the route carried the testers' route, not before
    events = [(e.reason, e.message) for d in sim.decisions for e in d.actions
              if isinstance(e, RecordEvent)]
    routed = [m for reason, m in events if reason == r.TESTERS_ROUTED]
    assert routed == [f"step 1/3: only the testers' requests (spec.traffic.testers) reach "
                      f"canary {new}; 0% of other traffic"]
    assert writes(sim)[:2] == [(0, []), (0, ["testers"])]
    # measured throughout the step at 0 % (every 10 s interval of the 1 min hold, and its end)
    at_zero = [t for t in sim.measured if t < sim.now]
    assert len(at_zero) >= 6
    assert writes(sim)[2] == (20, ["sessions", "testers"])


def test_a_failing_testers_step_rolls_back_with_no_weight_ever_given() -> None:
    sim = started(manifest_spec(traffic=TRAFFIC, strategy=TESTERS_FIRST))
    sim.release("m2")
    sim.decisions.clear()
    sim.run_until(lambda s: s.status.step_started_at is not None, limit=120)
    assert (sim.status.message or "").startswith("step 1/3: testers only for")
    sim.verdicts = "fail"
    sim.run_until(lambda s: s.status.aborted, limit=60)
    assert {w for w, _ in writes(sim)} == {0}
    assert sim.world.header_routes == NO_HEADER_ROUTES


def test_header_route_settings_the_models_refuse_name_the_field() -> None:
    import pytest
    from pydantic import ValidationError

    share = {"interval": "10s", "prometheus": {"address": "http://prom:9090"},
             "metrics": [{"name": "split", "template": "gateway-traffic-share", "max": 2}]}
    with pytest.raises(ValidationError, match=r"spec\.analysis\.metrics\[name=split\]: "
                                              r"gateway-traffic-share compares"):
        InferenceRolloutSpec.parse(manifest_spec(traffic=TRAFFIC, analysis=share))
    bad_regex = {**TRAFFIC, "testers": {"headers": [
        {"name": "X-Team", "value": "ml-(", "type": "RegularExpression"}]}}
    with pytest.raises(ValidationError, match=r"spec\.traffic\.testers\.headers: 'ml-\(' is not "
                                              r"an RE2 regular expression"):
        InferenceRolloutSpec.parse(manifest_spec(traffic=bad_regex))
