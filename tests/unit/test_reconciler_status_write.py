"""The status write after applied actions is never dropped on a conflict, and a steering request
written meanwhile survives it.  The API is a small stand-in here (the conflict must happen at an
exact moment); the sandbox tests exercise the real server."""

from __future__ import annotations

import asyncio
from typing import Any

from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.kube import KubeError
from inference_rollout.reconciler import Deps, _keep_new_requests, write_status


class ConflictOnce:
    """PATCH answers 409 once (the CLI wrote ``requests.promote`` meanwhile), then succeeds."""

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
        return {"metadata": {"resourceVersion": "2"},
                "status": {"requests": {"promote": True}}}


def test_a_conflicting_status_write_is_retried_keeping_new_requests() -> None:
    kube = ConflictOnce()
    deps = Deps(kube=kube, post_event=None)  # type: ignore[arg-type]
    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"}}
    old = InferenceRolloutStatus()
    new = InferenceRolloutStatus(aborted=True, canary_weight=0, abort_reason="AnalysisFailed")
    asyncio.run(write_status(deps, body, old, new))
    assert len(kube.patches) == 2
    final = kube.patches[-1]
    assert final["metadata"]["resourceVersion"] == "2"
    assert final["status"]["aborted"] is True  # the rollback decision is recorded
    assert final["status"]["requests"]["promote"] is True  # and the user's request kept
    assert body["metadata"]["resourceVersion"] == "3"


def test_only_requests_written_meanwhile_are_kept() -> None:
    old = {"requests": {"abort": True, "promote": False}}
    fresh = {"requests": {"abort": True, "promote": True, "pause": False}}
    new = {"requests": {"abort": False, "promote": False}, "phase": "Degraded"}
    out = _keep_new_requests(old, fresh, new)
    assert out["requests"] == {"abort": False, "promote": True}  # abort was consumed
    assert _keep_new_requests(old, {"requests": {}}, new) is new


class Recorder:
    """PATCH succeeds and applies the body as a JSON merge patch would (RFC 7386)."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored
        self.patches: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(body)
        self.stored = merge(self.stored, body["status"])
        return {"metadata": {"resourceVersion": "2"}, "status": self.stored}


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def test_a_reset_map_is_emptied_on_the_server_not_merged_into() -> None:
    """A new release resets ``analysis`` to {}; a plain merge patch of {} deletes nothing, and the
    previous release's Fail would hold the new canary at 0% for ever."""
    old = InferenceRolloutStatus.model_validate({
        "aborted": True, "canaryRevision": "a1",
        "analysis": {"errors": {"verdict": "Fail", "value": 0.3}},
        "oldRevisions": {"z9": "2026-12-02T10:00:00Z"}})
    stored = old.to_body()
    new = InferenceRolloutStatus(canary_revision="b2")
    kube = Recorder(stored)
    deps = Deps(kube=kube, post_event=None)  # type: ignore[arg-type]
    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"},
            "status": stored}
    asyncio.run(write_status(deps, body, old, new))
    assert kube.stored["analysis"] == {} and kube.stored["oldRevisions"] == {}
    assert InferenceRolloutStatus.model_validate(kube.stored) == new
