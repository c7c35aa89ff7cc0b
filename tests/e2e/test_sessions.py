"""A conversation stays on one revision, and testers reach the canary first (issue 31, items 3
and 4), end to end through Traefik: the operator writes the header routes, Traefik carries them,
and a testers' step (weight 0) is analysed on the testers' requests alone.

Each session is a client with its own cookie jar sending its turns one after another, as a chat
front end does; the revision that answered is the pod's own header (``X-Serving-Revision``, set
by the pod's shim, so nothing but Traefik chose it).  Revisions are the operator's hashes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from scipy.stats import binom

from inference_rollout.core.types import RouteApplied
from inference_rollout.traffic.route_status import route_acceptance
from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.harness import OperatorProcess, TrafficWatch
from irsandbox.loadgen import Attribution
from irsandbox.manifests import SIM_MODEL, sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

SESSIONS, TURNS, WEIGHT = 200, 5, 20
TESTER = {"X-Canary": "always"}
#: Sessions whose first turn lands on the canary, out of 200 at 20 %: a random splitter keeps
#: within this interval but once in 10,000 (a weighted round robin, as Traefik's, is closer).
SHARE_LOW, SHARE_HIGH = (int(x) for x in binom.interval(1 - 1e-4, SESSIONS, WEIGHT / 100))


def _sticky(name: str, cluster: Cluster, **traffic: Any) -> dict[str, Any]:
    m = sandbox_rollout(name, prometheus=cluster.env["PROMETHEUS_URL"], metrics=[],
                        steps=[{"weight": WEIGHT, "manual": True}, {"weight": 100}])
    m["spec"]["traffic"].update({
        "sessionAffinity": {"cookie": {"maxAge": "10m"}},
        "testers": {"headers": [{"name": k, "value": v} for k, v in TESTER.items()]},
        **traffic})
    return m


async def _conversation(url: str, host: str, turns: int, headers: dict[str, str],
                        cookies: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """One session's turns in order; the revision of each answer, and the cookies it holds."""
    attribute = Attribution(None)
    async with httpx.AsyncClient(base_url=url, headers={"Host": host, **headers},
                                 cookies=cookies, timeout=30) as client:
        revisions = []
        for turn in range(turns):
            r = await client.post("/v1/chat/completions", json={
                "model": SIM_MODEL, "max_tokens": 4,
                "messages": [{"role": "user", "content": f"turn {turn}"}]})
            r.raise_for_status()
            revisions.append(attribute(r.headers)[2])
        return revisions, dict(client.cookies.items())


def conversations(cluster: Cluster, host: str, n: int, turns: int,
                  headers: dict[str, str] | None = None,
                  cookies: dict[str, str] | None = None
                  ) -> list[tuple[list[str], dict[str, str]]]:
    async def all_of() -> list[tuple[list[str], dict[str, str]]]:
        gate = asyncio.Semaphore(16)

        async def one() -> tuple[list[str], dict[str, str]]:
            async with gate:
                return await _conversation(cluster.env["GATEWAY_URL"], host, turns,
                                           headers or {}, cookies or {})
        return list(await asyncio.gather(*(one() for _ in range(n))))
    return asyncio.run(all_of())


def rule_names(cluster: Cluster, rel: Release) -> list[str]:
    return [r.get("name", "") for r in cluster.route(rel.ns, rel.name)["spec"]["rules"]]


def wait_traefik_serves(cluster: Cluster, rel: Release, revision: str) -> None:
    """Until Traefik accepted the route's current generation and a tester lands on
    ``revision`` (its config is live, not just its status written)."""
    def live() -> bool:
        if not isinstance(route_acceptance(cluster.route(rel.ns, rel.name)), RouteApplied):
            return False
        return conversations(cluster, rel.host, 1, 3, TESTER)[0][0] == [revision] * 3
    wait_for(live, 30, f"Traefik to send testers to {revision}", interval=0.5)


def test_each_conversation_stays_on_one_revision_and_testers_reach_the_canary(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout with session affinity and testers, Healthy on v1
    rel = Release(cluster, operator_process, namespace, _sticky("sticky", cluster))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    assert "inference-rollout-" not in " ".join(rule_names(cluster, rel))  # no release open
    # When v2 is released and held at 20 %
    rel.apply(with_template(rel.manifest, version="v2"))
    v2 = rel.wait(lambda s: s.get("canaryWeight") == WEIGHT, 90, "canary at 20%")["canaryRevision"]
    wait_for(lambda: len(rule_names(cluster, rel)) == 4, 15, "the header routes on the route")
    wait_traefik_serves(cluster, rel, v2)
    # Then each of 200 conversations of 5 turns is answered by one revision throughout
    sessions = conversations(cluster, rel.host, SESSIONS, TURNS)
    mixed = [revs for revs, _ in sessions if len(set(revs)) != 1]
    assert not mixed, f"{len(mixed)} conversations changed revision, e.g. {mixed[:3]}"
    on_canary = sum(1 for revs, _ in sessions if revs[0] == v2)
    print(f"{on_canary} of {SESSIONS} conversations on the canary at {WEIGHT} % "
          f"(a random splitter: {SHARE_LOW}..{SHARE_HIGH}); {SESSIONS * TURNS} requests")
    assert {revs[0] for revs, _ in sessions} == {v1, v2}
    assert SHARE_LOW <= on_canary <= SHARE_HIGH
    # each holds the cookie naming its revision, as the gateway set it
    assert all(cookies.get("ir-sticky") == revs[0] for revs, cookies in sessions)
    # And a tester reaches the canary, even holding the stable's cookie
    tested = conversations(cluster, rel.host, 4, 5, TESTER, {"ir-sticky": v1})
    assert all(revs == [v2] * 5 for revs, _ in tested), tested
    # When it is promoted, the route is the split alone: an old stable cookie reaches v2
    cluster.request(rel.ns, rel.name, "promote")
    rel.wait_healthy(revision=v2, timeout=90)
    wait_for(lambda: not any(n.startswith("inference-rollout-")
                             for n in rule_names(cluster, rel)), 15, "header routes gone")
    wait_for(lambda: conversations(cluster, rel.host, 1, 3, {}, {"ir-sticky": v1})[0][0]
             == [v2] * 3, 30, "an old cookie served by the new stable", interval=0.5)


def test_a_rollback_releases_every_conversation_and_tester_to_stable(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given conversations kept on a canary at 20 %
    rel = Release(cluster, operator_process, namespace, _sticky("sticky", cluster))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    rel.apply(with_template(rel.manifest, version="v2"))
    v2 = rel.wait(lambda s: s.get("canaryWeight") == WEIGHT, 90, "canary at 20%")["canaryRevision"]
    wait_traefik_serves(cluster, rel, v2)
    kept = [c for revs, c in conversations(cluster, rel.host, 40, 2) if revs == [v2, v2]]
    assert kept, "no conversation began on the canary"
    # When the release is aborted
    cluster.request(rel.ns, rel.name, "abort")
    rel.wait(lambda s: s.get("aborted") and s.get("canaryWeight") == 0, 30, "rolled back")
    # Then the route holds the split alone, and the canary's conversations and the testers
    # continue on stable (the canary keeps its pods for abortScaleDownDelay: nothing else
    # stops a header route from reaching them)
    wait_for(lambda: not any(n.startswith("inference-rollout-")
                             for n in rule_names(cluster, rel)), 15, "header routes gone")

    def all_on_stable() -> bool:
        after = conversations(cluster, rel.host, len(kept), 2, {}, kept[0])
        testers = conversations(cluster, rel.host, 2, 2, TESTER)
        return all(revs == [v1, v1] for revs, _ in after + testers)
    wait_for(all_on_stable, 30, "canary conversations and testers on stable", interval=0.5)
    assert rel.route() == {v1: 100, v2: 0}


def test_a_bad_canary_seen_only_by_testers_is_rolled_back_before_any_user_meets_it(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a testers' step first (weight 0) and the error-rate analysis
    m = sandbox_rollout("testers", prometheus=cluster.env["PROMETHEUS_URL"],
                        steps=[{"weight": 0, "pause": "5m"}, {"weight": 20}, {"weight": 100}])
    m["spec"]["traffic"]["testers"] = {
        "headers": [{"name": k, "value": v} for k, v in TESTER.items()]}
    rel = Release(cluster, operator_process, namespace, m)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    users = TrafficWatch(cluster.env, rel.host, rate=5).start()
    try:
        # When a canary that fails every request is released
        rel.apply(with_template(rel.manifest, version="v2", failure_rate=100))
        st = rel.wait(lambda s: "testers only for" in (s.get("message") or ""), 90,
                      "the testers' step holding")
        v2 = st["canaryRevision"]
        assert st["canaryWeight"] == 0
        # its testers meet it (and only they do)
        answered: dict[str, int] = {}
        attribute = Attribution(None)
        with httpx.Client(base_url=cluster.env["GATEWAY_URL"],
                          headers={"Host": rel.host, **TESTER}, timeout=30) as client:
            deadline = time.monotonic() + 90
            while not rel.status().get("aborted"):
                assert time.monotonic() < deadline, rel.status().get("message")
                r = client.post("/v1/chat/completions", json={
                    "model": SIM_MODEL, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "smoke test"}]})
                rev = attribute(r.headers)[2] or f"HTTP {r.status_code}"
                answered[rev] = answered.get(rev, 0) + 1
                time.sleep(0.1)
        # Then the analysis of the testers' requests rolls it back
        st = rel.wait(lambda s: s.get("phase") == "Degraded", 30, "rolled back")
        assert st["analysis"]["errors"]["verdict"] == "Fail", st["analysis"]
        assert any(e.startswith("TestersRouted:") for e in rel.events())
        assert answered.get(v2, 0) >= 3, answered
    finally:
        report = users.stop()
    # and no other user's request ever reached it
    print(f"testers' answers {answered}; users' {report.by_revision}")
    assert report.by_revision.get(v2, 0) == 0, report.summary()
    assert report.by_revision.get(v1, 0) > 0
