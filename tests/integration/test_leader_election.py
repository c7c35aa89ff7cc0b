"""Two operator processes with leader election against a real API server: only the leader
writes; SIGKILL it and the standby takes over within the 15 s target, resumes the release from
status (one promote, one step), and the two never write in the same period.

Who wrote what comes from the API server's audit log: each replica is its own user."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from irsandbox.control_plane import ControlPlane
from irsandbox.leadership import TwoReplicas, writes

pytestmark = pytest.mark.integration

FAILOVER_TARGET_S = 15.0


@pytest.fixture()
def two_replicas(control_plane: ControlPlane, tmp_path: Path) -> Iterator[TwoReplicas]:
    pair = TwoReplicas(control_plane, "ha", tmp_path)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
        for r in pair.replicas.values():
            print(f"--- {r.identity} ---\n{r.tail(15)}")


def test_the_standby_writes_nothing_and_takes_over_within_the_target(
        control_plane: ControlPlane, two_replicas: TwoReplicas) -> None:
    before = list(writes(control_plane, "ha"))
    assert any(u == "replica-a" and "inferencerollouts/status" in w for _, u, w in before), \
        "the leader never wrote the rollout's status"
    assert [w for w in before if w[1] == "replica-b"] == [], \
        "the standby wrote while replica-a led"

    first = two_replicas.kill_leader()
    print(f"failover: Lease after {first.to_lease:.2f}s, first reconcile after "
          f"{first.to_first_reconcile:.2f}s")
    assert (first.killed, first.successor) == ("replica-a", "replica-b")
    assert first.to_first_reconcile < FAILOVER_TARGET_S
    assert first.step_after == first.step_before + 1, "the new leader did not resume from status"

    # No double write: replica-a's last non-Lease write precedes replica-b's first one.
    work = [(t, u) for t, u, w in writes(control_plane, "ha") if "leases" not in w]
    last_a = max(t for t, u in work if u == "replica-a")
    first_b = min(t for t, u in work if u == "replica-b")
    assert last_a < first_b

    # And back: the restarted replica-a is now the standby, and takes over in its turn.
    second = two_replicas.kill_leader()
    assert (second.killed, second.successor) == ("replica-b", "replica-a")
    assert second.to_first_reconcile < FAILOVER_TARGET_S
    assert second.step_after == second.step_before + 1
