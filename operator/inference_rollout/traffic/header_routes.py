"""The rules an HTTPRoute holds beside its weighted split (core/header_routes.py decides which).

Each rule is a copy of a base rule (one of a user's rules, or an owned route's single catch-all
rule) whose every match also requires a header, and sends to one revision.  Gateway API ranks a
match with more header matches above the same match with fewer, and among equals the earlier rule
of the route, so the copies win over their base rule on any conformant gateway, and the testers'
copies (written first) over the sessions'.  The user's paths, methods, query matches and filters
are kept in the copies: a tester's request is rewritten and filtered as anyone's.

The copies are named ``inference-rollout-<kind>-...`` (HTTPRoute rule names, in Gateway API's
standard channel): a user-owned route's own rules are told from ours by name, and the header
routes a route holds are read back from it (:func:`held`), so the core can compare them with
what it wants, as it does the weights.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..api.spec import TrafficSpec
from ..core.types import NO_HEADER_ROUTES, HeaderRoute

RULE_PREFIX = "inference-rollout-"
#: Gateway API bounds on an HTTPRoute (its CRD's schema and CEL rules).
MAX_RULES, MAX_MATCHES, MAX_HEADER_MATCHES = 16, 128, 16

Ref = dict[str, Any]
Rule = dict[str, Any]


class HeaderRouteError(ValueError):
    """The header routes do not fit in the route (the message names the field and the fix)."""


@dataclass(frozen=True)
class HeaderRouting:
    """What the spec asks of header routes, for one rollout."""

    cookie: str | None = None  # sessionAffinity's cookie name; None: no session affinity
    max_age_seconds: int = 0
    testers: tuple[dict[str, str], ...] = ()  # Gateway API HTTPHeaderMatch objects

    @classmethod
    def of(cls, traffic: TrafficSpec, rollout: str) -> HeaderRouting:
        affinity, testers = traffic.session_affinity, traffic.testers
        return cls(
            cookie=affinity.cookie.cookie_name(rollout) if affinity else None,
            max_age_seconds=int(affinity.cookie.max_age_seconds) if affinity else 0,
            testers=tuple(h.model_dump() for h in testers.headers) if testers else ())

    def set_cookie(self, revision: str) -> dict[str, Any]:
        """The backendRef filter that names the revision in the answer's cookie (``add``, so a
        Set-Cookie of the model server's own is kept)."""
        value = (f"{self.cookie}={revision}; Path=/; Max-Age={self.max_age_seconds}; HttpOnly; "
                 "SameSite=Lax")
        return {"type": "ResponseHeaderModifier",
                "responseHeaderModifier": {"add": [{"name": "Set-Cookie", "value": value}]}}

    def cookie_match(self, revision: str) -> dict[str, str]:
        """A request whose Cookie header holds ``<cookie>=<revision>`` among its pairs (anchored,
        so the same regex means the same whether a gateway matches it whole or in part)."""
        assert self.cookie is not None
        pattern = rf"^(.*;\s*)?{re.escape(self.cookie)}={revision}(;.*)?$"
        return {"name": "Cookie", "type": "RegularExpression", "value": pattern}


def is_ours(rule: Rule) -> bool:
    return str(rule.get("name", "")).startswith(RULE_PREFIX)


def base_rules(rules: list[Rule]) -> list[Rule]:
    """A route's own rules, without the header routes written by the operator."""
    return [rule for rule in rules if not is_ours(rule)]


def held(rules: list[Rule]) -> frozenset[HeaderRoute]:
    out: set[HeaderRoute] = set()
    for rule in rules:
        name = str(rule.get("name", ""))
        if name.startswith(RULE_PREFIX + "testers-"):
            out.add("testers")
        elif name.startswith(RULE_PREFIX + "sessions-"):
            out.add("sessions")
    return frozenset(out) or NO_HEADER_ROUTES


def rules_for(base: list[Rule], split: list[Ref], routing: HeaderRouting,
              routes: frozenset[HeaderRoute], ref: Callable[[str], Ref],
              revisions: tuple[str, str | None], field_hint: str) -> list[Rule]:
    """Every rule of the route: each base rule with the weighted split ``split`` (each
    revision's answers setting the session cookie when ``sessions`` is on), then the header
    routes' copies.  ``ref(revision)`` is a backendRef for one revision; ``revisions`` is
    (stable, canary).  Raises :class:`HeaderRouteError` when they exceed Gateway API's bounds."""
    stable, canary = revisions
    sticky = (stable, canary) if (canary is not None and "sessions" in routes
                                  and routing.cookie is not None) else None
    if sticky:
        split = [dict(r, filters=[routing.set_cookie(rev)])
                 for r, rev in zip(split, sticky, strict=True)]
    out = [dict(rule, backendRefs=split) for rule in base]
    if canary is not None and "testers" in routes and routing.testers:
        out += _copies(base, "testers", list(routing.testers), ref(canary))
    for rev in reversed(sticky or ()):
        out += _copies(base, f"sessions-{rev}", [routing.cookie_match(rev)], ref(rev))
    _check_bounds(out, field_hint)
    return out


def _copies(base: list[Rule], kind: str, headers: list[dict[str, str]], to: Ref) -> list[Rule]:
    copies = []
    for i, rule in enumerate(base):
        matches = [dict(m, headers=list(m.get("headers") or []) + headers)
                   for m in rule.get("matches") or [{}]]
        copy = {k: v for k, v in rule.items() if k not in ("name", "backendRefs", "matches")}
        copies.append({**copy, "name": f"{RULE_PREFIX}{kind}-{i}", "matches": matches,
                       "backendRefs": [to]})
    return copies


def _check_bounds(rules: list[Rule], field_hint: str) -> None:
    matches = [m for rule in rules for m in rule.get("matches") or [{}]]
    headers = max((len(m.get("headers") or []) for m in matches), default=0)
    if len(rules) > MAX_RULES or len(matches) >= MAX_MATCHES or headers > MAX_HEADER_MATCHES:
        raise HeaderRouteError(
            f"{field_hint}: the route would need {len(rules)} rules, {len(matches)} matches "
            f"and up to {headers} header matches in one match, over Gateway API's limits "
            f"({MAX_RULES} rules, fewer than {MAX_MATCHES} matches, {MAX_HEADER_MATCHES} headers "
            "per match): each rule of the route is copied once for testers and twice for "
            "session affinity; use fewer rules or fewer tester headers")
