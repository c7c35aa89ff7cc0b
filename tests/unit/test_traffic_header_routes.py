"""The rules written beside the weighted split (traffic/header_routes.py): what they match, where
they send, and that a route's own rules survive them (pure; the API server and Traefik check the
same rules in tests/integration/test_header_routes_apiserver.py and tests/e2e/test_sessions.py)."""

from __future__ import annotations

from typing import Any

import pytest
import re2

from inference_rollout.api.spec import TrafficSpec
from inference_rollout.traffic.header_routes import (
    HeaderRouteError,
    HeaderRouting,
    base_rules,
    held,
    rules_for,
)

TRAFFIC = TrafficSpec.model_validate({
    "gatewayAPI": {"parentRefs": [{"name": "gw"}]},
    "sessionAffinity": {"cookie": {"maxAge": "30m"}},
    "testers": {"headers": [{"name": "X-Canary", "value": "always"}]},
})
ROUTING = HeaderRouting.of(TRAFFIC, "chat")
SPLIT = [{"kind": "Service", "name": "chat-aaa", "port": 8000, "weight": 80},
         {"kind": "Service", "name": "chat-bbb", "port": 8000, "weight": 20}]


def ref(rev: str) -> dict[str, Any]:
    return {"kind": "Service", "name": f"chat-{rev}", "port": 8000, "weight": 1}


def write(base: list[dict[str, Any]], routes: frozenset[str]) -> list[dict[str, Any]]:
    return rules_for(base, SPLIT, ROUTING, routes, ref, ("aaa", "bbb"),  # type: ignore[arg-type]
                     "spec.traffic")


def test_the_spec_defaults_the_cookie_name_to_the_rollouts() -> None:
    assert ROUTING.cookie == "ir-chat" and ROUTING.max_age_seconds == 1800
    assert ROUTING.testers == ({"name": "X-Canary", "value": "always", "type": "Exact"},)


@pytest.mark.parametrize(("cookie", "sticks"), [
    ("ir-chat=bbb", True),
    ("a=1; ir-chat=bbb", True),
    ("a=1;ir-chat=bbb; b=2", True),
    ("ir-chat=bbbb", False),          # another revision whose hash starts the same
    ("xir-chat=bbb", False),          # another cookie whose name ends the same
    ("ir-chat=aaa", False),
    ("ir-chatty=bbb", False),
])
def test_the_cookie_match_names_one_pair_exactly(cookie: str, sticks: bool) -> None:
    match = ROUTING.cookie_match("bbb")
    assert match["name"] == "Cookie" and match["type"] == "RegularExpression"
    # RE2, the gateways' dialect; a partial search, as Go's MatchString does (anchored anyway)
    assert bool(re2.search(match["value"], cookie)) is sticks


def test_an_owned_route_gets_the_split_then_testers_then_each_revisions_sessions() -> None:
    rules = write([{}], frozenset({"testers", "sessions"}))
    assert [r.get("name") for r in rules] == [
        None, "inference-rollout-testers-0", "inference-rollout-sessions-bbb-0",
        "inference-rollout-sessions-aaa-0"]
    split = rules[0]["backendRefs"]
    assert [r["weight"] for r in split] == [80, 20]
    cookies = [r["filters"][0]["responseHeaderModifier"]["add"][0]["value"] for r in split]
    assert cookies == ["ir-chat=aaa; Path=/; Max-Age=1800; HttpOnly; SameSite=Lax",
                       "ir-chat=bbb; Path=/; Max-Age=1800; HttpOnly; SameSite=Lax"]
    assert rules[1]["matches"] == [{"headers": [ROUTING.testers[0]]}]
    assert rules[1]["backendRefs"] == [ref("bbb")]
    assert rules[2]["backendRefs"] == [ref("bbb")] and rules[3]["backendRefs"] == [ref("aaa")]
    assert held(rules) == {"testers", "sessions"}


def test_without_header_routes_the_route_is_the_split_alone() -> None:
    rules = write([{}], frozenset())
    assert rules == [{"backendRefs": SPLIT}] and held(rules) == frozenset()


def test_a_users_rules_keep_their_matches_and_filters_in_every_copy() -> None:
    rewrite = {"type": "URLRewrite", "urlRewrite": {"path": {
        "type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}}
    chat = {"path": {"type": "PathPrefix", "value": "/chat"}, "method": "POST"}
    users: list[dict[str, Any]] = [
        {"name": "chat", "matches": [chat], "filters": [rewrite]},
        {"matches": [{"path": {"type": "Exact", "value": "/v1/models"}},
                     {"headers": [{"name": "X-Team", "value": "a"}]}]}]
    rules = write(users, frozenset({"testers"}))
    assert rules[:2] == [dict(users[0], backendRefs=SPLIT), dict(users[1], backendRefs=SPLIT)]
    testers = rules[2:]
    assert [r["name"] for r in testers] == ["inference-rollout-testers-0",
                                            "inference-rollout-testers-1"]
    assert testers[0]["filters"] == [rewrite]
    assert testers[0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/chat"},
                                      "method": "POST", "headers": [ROUTING.testers[0]]}]
    assert testers[1]["matches"][1]["headers"] == [{"name": "X-Team", "value": "a"},
                                                   ROUTING.testers[0]]
    # what the operator wrote is told from the user's rules, so the next write replaces it
    assert base_rules(rules) == rules[:2]


def test_sessions_need_both_revisions() -> None:
    rules = rules_for([{}], SPLIT[:1], ROUTING, frozenset({"sessions", "testers"}), ref,
                      ("aaa", None), "spec.traffic")
    assert rules == [{"backendRefs": SPLIT[:1]}]


def test_a_route_the_copies_do_not_fit_in_is_an_error_naming_the_field() -> None:
    users = [{"matches": [{"path": {"type": "PathPrefix", "value": f"/p{i}"}}]}
             for i in range(5)]
    write(users[:4], frozenset({"testers", "sessions"}))  # 4 rules x (1 + 3) = 16: fits
    with pytest.raises(HeaderRouteError, match=r"spec\.traffic: the route would need 20 rules"):
        write(users, frozenset({"testers", "sessions"}))
