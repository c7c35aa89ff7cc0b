"""Releases through Traefik: the operator's route under the Gateway that Traefik serves
(gateway-system/traefik), load through Traefik's listener, each weight counted as applied only
once Traefik has accepted that generation of the route, and the gateway's own counters as an
analysis metric (``gateway-error-rate``, gateway ``traefik``).

Same stories as tests/e2e/test_release.py, another gateway: the operator must not care which
conformant implementation carries its weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import OperatorProcess
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TRAEFIK_PARENT = {"name": "traefik", "namespace": "gateway-system"}


@pytest.fixture()
def traefik_story(cluster: Cluster, operator_process: OperatorProcess,
                  namespace: str) -> Iterator[Story]:
    """A story whose load goes through Traefik (GATEWAY_URL is Traefik's listener)."""
    if not (cluster.env.get("TRAEFIK_URL") and cluster.env.get("IR_POD_NETWORK")):
        pytest.fail("this sandbox has no Traefik or no pod network: run sandbox/up.sh again "
                    "(docs/sandbox.md#traefik)")
    via = Cluster({**cluster.env, "GATEWAY_URL": cluster.env["TRAEFIK_URL"]})
    story = Story(via, operator_process, namespace)
    yield story
    story.close()
    via.close()


def under_traefik(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["spec"]["traffic"]["gatewayAPI"]["parentRefs"] = [dict(TRAEFIK_PARENT)]
    return manifest


def test_release_through_traefik_is_promoted_step_by_step(traefik_story: Story) -> None:
    given, when, then = Given(traefik_story), When(traefik_story), Then(traefik_story)
    # Given a healthy rollout under Traefik's Gateway, with load through Traefik
    v1 = given.rollout(manifest=under_traefik(given.manifest("chat")))
    given.load()
    # When the template changes
    when.template_changes(version="v2")
    v2 = then.canary()
    # Then Traefik carries each step's weight
    then.each_step_carried(v1, v2, (5, 20, 50))
    st = then.healthy(revision=v2, timeout=90)
    assert st["analysis"]["errors"]["verdict"] == "Pass"
    then.route_is({v2: 100})
    then.settles_on(v2)
    route = traefik_story.cluster.route(traefik_story.ns, "chat")
    parents = route["status"]["parents"]
    assert [p["controllerName"] for p in parents] == ["traefik.io/gateway-controller"]


def test_gateway_error_rate_through_traefik_rolls_a_failing_canary_back(
        traefik_story: Story) -> None:
    given, when, then = Given(traefik_story), When(traefik_story), Then(traefik_story)
    # Given a rollout judged by the gateway's counters (Traefik's), not the engine's
    metrics = [{"name": "gateway-errors", "template": "gateway-error-rate",
                "gateway": "traefik", "max": 0.01}]
    v1 = given.rollout(manifest=under_traefik(given.manifest("gwerr", metrics=metrics)))
    given.load()
    # When v2 fails 30 % of its requests
    when.template_changes(failure_rate=30)
    # Then Traefik's 5xx for the canary's Service roll it back
    st = then.rolled_back(v1, "AnalysisFailed")
    assert st["analysis"]["gateway-errors"]["verdict"] == "Fail"
    assert st["analysis"]["gateway-errors"]["value"] > 0.01
