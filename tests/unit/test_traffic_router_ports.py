"""The router keeps the route's own backend port for a revision whose Service is gone.

A fail-safe return to stable runs when the spec or the world cannot be trusted; the stable's
Service may already be deleted.  Writing a guessed port would send all traffic to a port the
pods do not serve, so the router must reuse the port the route already names.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.fakes import UnexpectedKube

from inference_rollout.api.spec import GatewayAPITraffic
from inference_rollout.traffic.gateway import HTTPRouteRouter


class RouteStore(UnexpectedKube):
    """An in-memory stand-in for the API server's HTTPRoute object (pure router unit test)."""

    def __init__(self, route: dict[str, Any]) -> None:
        self.route = route

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.route

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.route = body
        return body


def route_to(stable_port: int, canary_port: int) -> dict[str, Any]:
    refs = [{"kind": "Service", "name": "chat-aaa", "port": stable_port, "weight": 80},
            {"kind": "Service", "name": "chat-bbb", "port": canary_port, "weight": 20}]
    return {"metadata": {"name": "chat"}, "spec": {"rules": [{"backendRefs": refs}]}}


def test_fallback_keeps_the_port_the_route_names() -> None:
    store = RouteStore(route_to(9000, 9001))
    traffic = GatewayAPITraffic.model_validate(
        {"parentRefs": [{"name": "gw"}]})
    router = HTTPRouteRouter(store, "ns", "chat", "uid-1", traffic, port=8000)
    assert asyncio.run(router.get_weights()) == {"aaa": 80, "bbb": 20}
    asyncio.run(router.set_weights("aaa", None, 0))
    assert store.route["spec"]["rules"][0]["backendRefs"] == [
        {"kind": "Service", "name": "chat-aaa", "port": 9000, "weight": 100}]


def test_a_known_service_port_wins_over_the_route() -> None:
    store = RouteStore(route_to(9000, 9001))
    traffic = GatewayAPITraffic.model_validate({"parentRefs": [{"name": "gw"}]})
    router = HTTPRouteRouter(store, "ns", "chat", "uid-1", traffic, port=8000,
                             ports={"aaa": 7000})
    asyncio.run(router.get_weights())
    asyncio.run(router.set_weights("aaa", None, 0))
    assert store.route["spec"]["rules"][0]["backendRefs"][0]["port"] == 7000
