"""The status write is fenced: a conflict is never answered by writing the same decision again,
but by deciding again from the newer object (a steering request written meanwhile included).  The
API is a small stand-in here (the conflict must happen at an exact moment);
tests/integration/test_fenced_status.py plays the issue's story on a real API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.unit.fakes import UnexpectedKube, no_events
from tests.unit.memory_kube import merge

from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.kube import KubeError
from inference_rollout.reconciler import Deps, StatusConflict, fenced, write_status


class ConflictOnce(UnexpectedKube):
    """PATCH answers 409 once (the CLI wrote ``requests.promote`` meanwhile), then succeeds;
    GET returns the newer object."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.conflicted = False

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(body)
        if not self.conflicted:
            self.conflicted = True
            raise KubeError(409, "PATCH", path, '{"message": "conflict"}')
        return {"metadata": {"resourceVersion": "3"}, "status": body["status"]}

    async def get_or_none(self, path: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "2"},
                "status": {"requests": {"promote": True}}}


def test_a_conflicting_status_write_is_never_retried_with_the_same_decision() -> None:
    kube = ConflictOnce()
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"}}
    new = InferenceRolloutStatus(aborted=True, canary_weight=0, abort_reason="AnalysisFailed")
    with pytest.raises(StatusConflict):
        asyncio.run(write_status(deps, body, InferenceRolloutStatus(), new))
    assert len(kube.patches) == 1


def test_after_a_conflict_the_decision_is_made_again_from_the_newer_object() -> None:
    """``fenced`` runs the whole attempt again on the object as the server holds it now (its
    steering request included), with that object's resourceVersion."""
    kube = ConflictOnce()
    deps = Deps(kube=kube, post_event=no_events)

    async def decide_and_write(d: Deps, body: dict[str, Any]) -> str:
        status = InferenceRolloutStatus.parse(body.get("status"))
        decided = status.model_copy(update={
            "message": "promoting" if status.requests.promote else "holding"})
        await write_status(d, body, InferenceRolloutStatus(), decided)
        return "written"

    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"}}
    assert asyncio.run(fenced(deps, body, decide_and_write, gone="gone")) == "written"
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["1", "2"]
    assert [p["status"]["message"] for p in kube.patches] == ["holding", "promoting"]


class Recorder(UnexpectedKube):
    """PATCH succeeds and applies the body as a JSON merge patch would (RFC 7386)."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored
        self.patches: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(body)
        self.stored = merge(self.stored, body["status"])
        return {"metadata": {"resourceVersion": "2"}, "status": self.stored}


def test_a_reset_map_is_emptied_on_the_server_not_merged_into() -> None:
    """A new release resets ``analysis`` to {}; a plain merge patch of {} deletes nothing, and the
    previous release's Fail would hold the new canary at 0% for ever."""
    old = InferenceRolloutStatus.model_validate({
        "aborted": True, "canaryRevision": "a1a1a1a1a1",
        "analysis": {"errors": {"verdict": "Fail", "value": 0.3}},
        "oldRevisions": {"f9f9f9f9f9": "2026-12-02T10:00:00Z"}})
    stored = old.to_body()
    new = InferenceRolloutStatus(canary_revision="b2b2b2b2b2")
    kube = Recorder(stored)
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"},
            "status": stored}
    asyncio.run(write_status(deps, body, old, new))
    assert kube.stored["analysis"] == {} and kube.stored["oldRevisions"] == {}
    assert InferenceRolloutStatus.model_validate(kube.stored) == new
