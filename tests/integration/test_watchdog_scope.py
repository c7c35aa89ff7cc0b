"""The deletion watchdog's scope on a real API server: an operator started after a namespace of
its ``--namespace`` glob was marked for deletion never serves that namespace (kopf has stopped
watching it), yet the watchdog must still release its rollouts, or the namespace stays
Terminating for ever (seen in the e2e tier after the test that SIGKILLs the operator).  An
excluded namespace (``!glob``) is another operator's and is left alone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from tests.integration.rollout_world import create_namespace, deps_for, release_at_first_step

from inference_rollout import deletion_watchdog
from inference_rollout.paths import rollout_path
from inference_rollout.reconciler import release_before_deletion
from inference_rollout.uninstall import FINALIZER
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration


def test_a_deleted_namespace_never_served_is_swept(control_plane: ControlPlane) -> None:
    async def scenario() -> tuple[set[str], list[str], dict[str, object] | None]:
        deps = await deps_for(control_plane)
        kube = deps.kube
        for ns in ("wd-gone", "wd-other-1", "wd-live"):
            await create_namespace(kube, ns)
            await release_at_first_step(deps, ns, "chat", None, (FINALIZER,))
        for ns in ("wd-gone", "wd-other-1"):
            # no controller manager here: the namespace stays marked with its content, as it does
            # while the real namespace controller works through it; the rollout is marked too
            await kube.request("DELETE", f"/api/v1/namespaces/{ns}")
            await kube.delete(rollout_path(ns, "chat"))
        scope = await deletion_watchdog.deleted_in_scope(kube, ("wd-*, !wd-other*",))

        async def cleanup(body: dict[str, object]) -> None:
            await release_before_deletion(deps, body)  # type: ignore[arg-type]

        later = datetime.now(UTC) + timedelta(seconds=deletion_watchdog.GRACE_SECONDS + 1)
        released = await deletion_watchdog.sweep(kube, set(scope), FINALIZER, cleanup, later)
        other = await kube.get_or_none(rollout_path("wd-other-1", "chat"))
        await kube.close()
        return scope, released, other

    scope, released, other = asyncio.run(scenario())
    assert scope == {"wd-gone"}  # not the live one, not the excluded one
    assert released == ["wd-gone/chat"]
    assert other is not None and FINALIZER in other["metadata"]["finalizers"]  # type: ignore[index]
