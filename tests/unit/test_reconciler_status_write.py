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
