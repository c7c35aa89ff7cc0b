"""The deletion watchdog's rules: which rollouts it takes over, and a finalizer removal that
cannot remove someone else's finalizer.  The sandbox test (tests/e2e/test_faults.py) deletes a
whole namespace under the real operator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.unit.fakes import UnexpectedKube

from inference_rollout import deletion_watchdog
from inference_rollout.deletion_watchdog import GRACE_SECONDS, finalizer_removal, stuck

F = "rollouts.inference.dev/finalizer"
NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


def rollout(deleted_ago: float | None, finalizers: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "r", "namespace": "ns", "finalizers": finalizers}
    if deleted_ago is not None:
        meta["deletionTimestamp"] = (NOW - timedelta(seconds=deleted_ago)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta}


def test_only_rollouts_deleted_past_the_grace_and_still_ours_are_taken_over() -> None:
    assert stuck(rollout(GRACE_SECONDS, [F]), F, NOW)
    assert stuck(rollout(600, ["other", F]), F, NOW)
    assert not stuck(rollout(GRACE_SECONDS - 1, [F]), F, NOW)  # kopf's to handle still
    assert not stuck(rollout(None, [F]), F, NOW)  # not being deleted
    assert not stuck(rollout(600, ["other"]), F, NOW)  # not ours (or already released)


def test_the_removal_tests_the_entry_before_removing_it() -> None:
    patch = finalizer_removal(rollout(600, ["a", F, "b"]), F)
    assert patch == [{"op": "test", "path": "/metadata/finalizers/1", "value": F},
                     {"op": "remove", "path": "/metadata/finalizers/1"}]


class EmptyNamespaces(UnexpectedKube):
    """What the API server answers a metadata-only LIST of an empty namespace: ``items: null``."""

    def __init__(self) -> None:
        self.listed: list[str] = []

    async def list_metadata(self, path: str) -> dict[str, Any]:
        self.listed.append(path)
        return {"kind": "PartialObjectMetadataList", "items": None}


def test_a_namespace_without_rollouts_does_not_end_the_pass() -> None:
    import asyncio

    from inference_rollout.deletion_watchdog import sweep

    kube = EmptyNamespaces()

    async def cleanup(_: dict[str, Any]) -> None:
        raise AssertionError("nothing to clean up")

    released = asyncio.run(sweep(kube, {"a", "b"}, F, cleanup, NOW))
    assert released == [] and len(kube.listed) == 2  # both namespaces swept


def test_in_scope_follows_kopf_patterns() -> None:
    patterns = ("team-*, !team-other*", "solo")  # kopf syntax: exclusions within a pattern
    assert deletion_watchdog.in_scope("team-a", patterns)
    assert deletion_watchdog.in_scope("solo", patterns)
    assert not deletion_watchdog.in_scope("team-other-1", patterns)
    assert not deletion_watchdog.in_scope("elsewhere", patterns)
