"""Header routes on a REAL API server with the Gateway API CRDs (irsandbox.control_plane): the
router's rules pass the HTTPRoute schema and its CEL rules, a user's own rules survive every
write (the operator's copies replaced, never piled up), and the route's header routes read back
as written.  Traefik's behaviour on the same rules is tests/e2e/test_sessions.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.rollout_world import kube_for

from inference_rollout.api.spec import TrafficSpec
from inference_rollout.kube import Kube
from inference_rollout.paths import ns_path
from inference_rollout.traffic.gateway import HTTPRouteRouter
from inference_rollout.traffic.header_routes import HeaderRouting
from inference_rollout.traffic.router import RouteError
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration

A, B = "aaaaaaaaaa", "bbbbbbbbbb"
SESSIONS_AND_TESTERS = {"sessionAffinity": {"cookie": {"maxAge": "20m"}},
                        "testers": {"headers": [{"name": "X-Canary", "value": "always"},
                                                {"name": "X-Team", "value": "ml-.*",
                                                 "type": "RegularExpression"}]}}
USER_RULES = [
    {"name": "chat", "matches": [{"path": {"type": "PathPrefix", "value": "/v1/chat"}}],
     "filters": [{"type": "RequestHeaderModifier",
                  "requestHeaderModifier": {"set": [{"name": "X-Via", "value": "route"}]}}],
     "backendRefs": [{"name": f"chat-{A}", "port": 8000, "weight": 100}]},
    {"matches": [{"path": {"type": "Exact", "value": "/v1/models"}, "method": "GET"}],
     "backendRefs": [{"name": f"chat-{A}", "port": 8000, "weight": 100}]},
]


class Routes:
    def __init__(self, cp: ControlPlane) -> None:
        self.ns = f"header-routes-{uuid.uuid4().hex[:6]}"
        with cp.client() as c:
            assert c.post("/api/v1/namespaces",
                          json={"metadata": {"name": self.ns}}).status_code == 201
        self.loop = asyncio.new_event_loop()
        self.kube: Kube = self.loop.run_until_complete(kube_for(cp))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def router(self, gateway_api: dict[str, Any], **extra: Any) -> HTTPRouteRouter:
        traffic = TrafficSpec.model_validate({"gatewayAPI": gateway_api, **extra})
        return HTTPRouteRouter(self.kube, self.ns, "chat", "uid-1", traffic.gateway_api, 8000,
                               routing=HeaderRouting.of(traffic, "chat"))

    def route(self, name: str) -> dict[str, Any]:
        path = ns_path("gateway.networking.k8s.io", "v1", self.ns, "httproutes", name)
        return dict(self.run(self.kube.get(path)))

    def close(self) -> None:
        self.run(self.kube.close())
        self.loop.close()


@pytest.fixture()
def routes(control_plane: ControlPlane) -> Iterator[Routes]:
    r = Routes(control_plane)
    try:
        yield r
    finally:
        r.close()


def test_a_users_route_keeps_its_rules_through_every_write(routes: Routes) -> None:
    path = ns_path("gateway.networking.k8s.io", "v1", routes.ns, "httproutes", "users")
    routes.run(routes.kube.apply(path, {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "users", "namespace": routes.ns},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": USER_RULES}}))
    router = routes.router({"httpRouteRef": {"name": "users"}}, **SESSIONS_AND_TESTERS)

    routes.run(router.set_weights(A, B, 20, frozenset({"testers", "sessions"})))
    rules = routes.route("users")["spec"]["rules"]
    # the API server took them (schema and CEL); the user's two rules first, then the copies
    assert [r.get("name") for r in rules] == [
        "chat", None, "inference-rollout-testers-0", "inference-rollout-testers-1",
        f"inference-rollout-sessions-{B}-0", f"inference-rollout-sessions-{B}-1",
        f"inference-rollout-sessions-{A}-0", f"inference-rollout-sessions-{A}-1"]
    assert rules[0]["filters"] == USER_RULES[0]["filters"] == rules[2]["filters"]
    assert rules[3]["matches"][0]["method"] == "GET"
    assert [h["name"] for h in rules[3]["matches"][0]["headers"]] == ["X-Canary", "X-Team"]
    state = routes.run(router.observe())
    assert state.weights == {A: 80, B: 20} and state.header_routes == {"testers", "sessions"}

    # a later step: the copies are replaced, not added to
    routes.run(router.set_weights(A, B, 100, frozenset({"testers"})))
    rules = routes.route("users")["spec"]["rules"]
    assert [r.get("name") for r in rules] == [
        "chat", None, "inference-rollout-testers-0", "inference-rollout-testers-1"]
    # a rollback: the user's route as it was, but for the weights
    routes.run(router.set_weights(A, B, 0))
    rules = routes.route("users")["spec"]["rules"]
    assert [r.get("name") for r in rules] == ["chat", None]
    assert [{k: v for k, v in r.items() if k != "backendRefs"} for r in rules] == [
        {k: v for k, v in r.items() if k != "backendRefs"} for r in USER_RULES]
    assert routes.run(router.observe()).header_routes == frozenset()


def test_an_owned_route_with_header_routes_passes_the_schema(routes: Routes) -> None:
    router = routes.router({"parentRefs": [{"name": "gw"}], "hostnames": ["chat.example"]},
                           **SESSIONS_AND_TESTERS)
    routes.run(router.set_weights(A, B, 5, frozenset({"testers", "sessions"})))
    rules = routes.route("chat")["spec"]["rules"]
    assert len(rules) == 4
    split = rules[0]["backendRefs"]
    assert [r["filters"][0]["type"] for r in split] == ["ResponseHeaderModifier"] * 2
    assert routes.run(router.observe()).header_routes == {"testers", "sessions"}


def test_a_route_the_copies_do_not_fit_is_refused_before_any_write(routes: Routes) -> None:
    path = ns_path("gateway.networking.k8s.io", "v1", routes.ns, "httproutes", "many")
    many = [{"matches": [{"path": {"type": "PathPrefix", "value": f"/p{i}"}}],
             "backendRefs": [{"name": f"chat-{A}", "port": 8000}]} for i in range(5)]
    routes.run(routes.kube.apply(path, {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "many", "namespace": routes.ns},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": many}}))
    router = routes.router({"httpRouteRef": {"name": "many"}}, **SESSIONS_AND_TESTERS)
    before = routes.route("many")["metadata"]["resourceVersion"]
    with pytest.raises(RouteError, match=r"spec\.traffic: the route would need 20 rules"):
        routes.run(router.set_weights(A, B, 20, frozenset({"testers", "sessions"})))
    assert routes.route("many")["metadata"]["resourceVersion"] == before
