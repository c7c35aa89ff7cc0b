"""Reading an HTTPRoute's ``status.parents`` as the gateway's verdict on the route's current
generation (:func:`inference_rollout.traffic.route_status.route_acceptance`)."""

from __future__ import annotations

from typing import Any

import pytest

from inference_rollout.core.types import (
    RouteApplied,
    RoutePending,
    RouteRejected,
    RouteUnreported,
)
from inference_rollout.traffic.route_status import route_acceptance

NS = "team"
GW = {"name": "sandbox", "namespace": "gw"}


def cond(type_: str, status: str = "True", gen: int | None = 4, reason: str = "",
         message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_, "status": status, "reason": reason or type_,
                           "message": message, "lastTransitionTime": "2026-12-03T12:00:00Z"}
    if gen is not None:
        out["observedGeneration"] = gen
    return out


def accepted(gen: int = 4) -> list[dict[str, Any]]:
    return [cond("Accepted", gen=gen), cond("ResolvedRefs", gen=gen)]


def route(parents: list[dict[str, Any]] | None, refs: list[dict[str, Any]] | None = None,
          generation: int = 4) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": "chat", "namespace": NS, "generation": generation},
        "spec": {"parentRefs": refs if refs is not None else [GW], "rules": []},
    }
    if parents is not None:
        out["status"] = {"parents": parents}
    return out


def parent(ref: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"parentRef": ref, "controllerName": "traefik.io/gateway-controller",
            "conditions": conditions}


def test_accepted_at_the_current_generation_is_applied() -> None:
    assert route_acceptance(route([parent(GW, accepted())])) == RouteApplied(4)


@pytest.mark.parametrize("status", [None, {}, {"parents": []}])
def test_a_route_without_parent_status_is_unreported(status: Any) -> None:
    r = route(None)
    if status is not None:
        r["status"] = status
    assert route_acceptance(r) == RouteUnreported(4)


def test_a_stale_generation_is_pending_naming_what_the_gateway_saw() -> None:
    got = route_acceptance(route([parent(GW, accepted(gen=3))]))
    assert isinstance(got, RoutePending) and got.generation == 4
    assert "Gateway gw/sandbox" in got.detail and "generation 3" in got.detail


def test_a_condition_without_observed_generation_is_not_trusted() -> None:
    got = route_acceptance(route([parent(GW, [cond("Accepted", gen=None),
                                              cond("ResolvedRefs", gen=None)])]))
    assert isinstance(got, RoutePending)


def test_accepted_without_resolved_refs_is_pending() -> None:
    got = route_acceptance(route([parent(GW, [cond("Accepted")])]))
    assert isinstance(got, RoutePending) and "no ResolvedRefs condition" in got.detail


@pytest.mark.parametrize(("conditions", "which", "reason"), [
    ([cond("Accepted", "False", reason="NotAllowedByListeners",
           message="no listener admits namespace team"), cond("ResolvedRefs")],
     "Accepted", "NotAllowedByListeners"),
    ([cond("Accepted", "False", reason="NoMatchingParent")], "Accepted", "NoMatchingParent"),
    ([cond("Accepted"), cond("ResolvedRefs", "False", reason="BackendNotFound",
                             message="Cannot load HTTPBackendRef: service not found")],
     "ResolvedRefs", "BackendNotFound"),
    ([cond("Accepted"), cond("ResolvedRefs", "False", reason="RefNotPermitted")],
     "ResolvedRefs", "RefNotPermitted"),
])
def test_a_refusal_at_the_current_generation_is_rejected_with_the_gateways_words(
        conditions: list[dict[str, Any]], which: str, reason: str) -> None:
    got = route_acceptance(route([parent(GW, conditions)]))
    assert isinstance(got, RouteRejected)
    assert (got.generation, got.parent, got.condition, got.reason) == (
        4, "Gateway gw/sandbox", which, reason)
    original = next(c for c in conditions if c["type"] == which)
    assert got.message == original["message"]


def test_a_stale_refusal_is_only_pending() -> None:
    old = [cond("Accepted", "False", gen=3, reason="NoMatchingParent"), cond("ResolvedRefs",
                                                                             gen=3)]
    assert isinstance(route_acceptance(route([parent(GW, old)])), RoutePending)


def test_every_parent_must_accept() -> None:
    other = {"name": "internal", "namespace": "gw", "sectionName": "http"}
    one = route([parent(GW, accepted())], refs=[GW, other])
    got = route_acceptance(one)
    assert isinstance(got, RoutePending)
    assert got.detail == "Gateway gw/internal/http: no status from its gateway yet"
    both = route([parent(GW, accepted()), parent(other, accepted())], refs=[GW, other])
    assert route_acceptance(both) == RouteApplied(4)


def test_parent_references_compare_with_their_defaults() -> None:
    """The spec may omit namespace/group/kind; a gateway may write them filled in."""
    written = {"name": "sandbox"}
    filled = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": NS,
              "name": "sandbox"}
    assert route_acceptance(route([parent(filled, accepted())], refs=[written])) == \
        RouteApplied(4)
    # ...but a different section is a different parent
    section = {**filled, "sectionName": "https"}
    assert isinstance(route_acceptance(route([parent(section, accepted())], refs=[written])),
                      RoutePending)


def test_status_for_a_parent_the_route_no_longer_names_is_ignored() -> None:
    """Gateways may leave an entry for a removed parentRef behind (it is not ours to judge)."""
    gone = {"name": "old", "namespace": "gw"}
    refusal = [cond("Accepted", "False", reason="NoMatchingParent")]
    assert route_acceptance(route([parent(GW, accepted()), parent(gone, refusal)])) == \
        RouteApplied(4)
