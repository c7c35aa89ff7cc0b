"""Fenced status writes against a real API server.

The story (issue 13): replica A reads a rollout holding its first step and decides to advance;
before A's status write lands, replica B (acting on the user's ``abort``) rolls the release back
and writes ``aborted``.  A's write then meets a 409.  A must not write its stale "advance" over
B's abort: it decides again from what the server holds, which is an aborted release, so traffic
stays on stable and the status stays aborted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.integration.rollout_world import (
    deps_for,
    mark_ready,
    read,
    release_at_first_step,
    route_weights,
)

from inference_rollout.kube import Kube
from inference_rollout.paths import rollout_path
from inference_rollout.reconciler import reconcile
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration


class AbortBeforeMyStatusWrite(Kube):
    """Replica A's client: just before A's first status write reaches the server, replica B
    (another client) handles a user's abort to the end."""

    def __init__(self, inner: Kube, other_replica: Any) -> None:
        self.__dict__.update(inner.__dict__)
        self.other_replica = other_replica
        self.fired = False

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/status") and not self.fired:
            self.fired = True
            await self.other_replica()
        return await super().merge_patch(path, body)


def test_a_stale_advance_never_overwrites_another_replicas_abort(
        control_plane: ControlPlane) -> None:
    ns, name = "fence-abort", "chat"

    async def story() -> tuple[dict[str, Any], dict[str, int], str]:
        setup = await deps_for(control_plane)
        held = await release_at_first_step(setup, ns, name)
        canary = held["status"]["canaryRevision"]
        await asyncio.sleep(1.2)  # the first step's 1 s hold is over: A will decide to advance
        await mark_ready(setup.kube, ns)
        stale = await read(setup.kube, ns, name)  # what replica A read

        replica_b = await deps_for(control_plane, "replica-b")

        async def b_aborts() -> None:
            await setup.kube.merge_patch(rollout_path(ns, name).sub("status"),
                                         {"status": {"requests": {"abort": True}}})
            after = await reconcile_b(replica_b, ns, name)
            assert after["status"]["aborted"] is True, after["status"]

        replica_a = await deps_for(control_plane, "replica-a")
        replica_a.kube = AbortBeforeMyStatusWrite(replica_a.kube, b_aborts)
        await reconcile(replica_a, stale)
        assert replica_a.kube.fired, "replica A never wrote a status: it did not decide to advance"
        return await read(setup.kube, ns, name), await route_weights(setup.kube, ns, name), canary

    final, weights, canary = asyncio.run(story())
    status = final["status"]
    assert status["aborted"] is True, f"a stale advance overwrote the abort: {status}"
    assert status["canaryWeight"] == 0, status
    assert weights.get(canary, 0) == 0, f"traffic left on the rolled-back canary: {weights}"


async def reconcile_b(deps: Any, ns: str, name: str) -> dict[str, Any]:
    await reconcile(deps, await read(deps.kube, ns, name))
    return await read(deps.kube, ns, name)


def test_a_decision_whose_status_write_lost_posts_no_events(control_plane: ControlPlane) -> None:
    """Issue 33: Events were posted with the decision's actions, before its fenced status write;
    when that write met a 409 the decision was made again, and a reviewer saw every Event twice,
    one of them claiming an advance that never happened. Now a decision's Events follow its
    successful write only."""
    ns, name = "fence-events", "chat"

    async def story() -> tuple[list[str], dict[str, Any]]:
        setup = await deps_for(control_plane)
        await release_at_first_step(setup, ns, name)
        await asyncio.sleep(1.2)  # the first step's hold is over: A will decide to advance
        await mark_ready(setup.kube, ns)
        stale = await read(setup.kube, ns, name)
        replica_b = await deps_for(control_plane, "replica-b")

        async def b_aborts() -> None:
            await setup.kube.merge_patch(rollout_path(ns, name).sub("status"),
                                         {"status": {"requests": {"abort": True}}})
            await reconcile_b(replica_b, ns, name)

        posted: list[str] = []

        async def record(_body: dict[str, Any], event: Any) -> None:
            posted.append(event.reason)

        replica_a = await deps_for(control_plane, "replica-a")
        replica_a.post_event = record
        replica_a.kube = AbortBeforeMyStatusWrite(replica_a.kube, b_aborts)
        await reconcile(replica_a, stale)
        assert replica_a.kube.fired, "replica A never wrote a status: it did not decide to advance"
        return posted, await read(setup.kube, ns, name)

    posted, final = asyncio.run(story())
    assert final["status"]["aborted"] is True
    # A's advance was never written: none of its Events may exist
    assert not {"StepComplete", "StepWeightSet"} & set(posted), posted
    assert len(posted) == len(set(posted)), f"an Event posted twice: {posted}"
