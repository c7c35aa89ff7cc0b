"""What a person should hear about a decision: rollbacks, promotions, pauses, limits, drills.

The core says *what* happened; whether and where anyone is told is the notifier's business
(:mod:`inference_rollout.notify`).  A notice is derived from one decision and the status it
replaced, never from Events read back, so the notifier sees exactly what the core decided, once:
a rollback is decided in one call (later calls find ``aborted`` already set), a promotion is one
``Promoted`` event, and a pause is the moment ``pausedReason`` changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api import reasons as r
from ..api.spec import NotificationEvent as NoticeKind
from ..api.status import InferenceRolloutStatus
from .types import Decision, RecordEvent

#: Reasons with a notice kind of their own (whether they roll back or pause).
_OWN_KIND: dict[str, NoticeKind] = {
    r.PROGRESS_DEADLINE: "ProgressDeadline",
    r.INCONCLUSIVE_LIMIT: "InconclusiveLimit",
}


@dataclass(frozen=True)
class Notice:
    """One thing worth telling: its kind, the reason token, the message people read, and where
    the release stood afterwards."""

    kind: NoticeKind
    reason: str
    message: str
    rolled_back: bool = False
    stable_revision: str | None = None
    canary_revision: str | None = None
    canary_weight: int = 0


def notices(old: InferenceRolloutStatus, decision: Decision) -> tuple[Notice, ...]:
    """The notices of ``decision`` taken on a rollout whose status was ``old``."""
    new = decision.status
    events = [a for a in decision.actions if isinstance(a, RecordEvent)]

    def notice(kind: NoticeKind, reason: str, fallback: str, rolled_back: bool = False) -> Notice:
        message = next((e.message for e in events if e.reason == reason), fallback)
        # A rollback names the canary it rolled back (the status keeps it until retried).
        return Notice(kind, reason, message, rolled_back, new.stable_revision,
                      new.canary_revision or old.canary_revision, new.canary_weight)

    out: list[Notice] = []
    if decision.rolled_back is not None:
        reason = decision.rolled_back
        out.append(notice(_OWN_KIND.get(reason, "Rollback"), reason, new.message, True))
    if any(e.reason == r.PROMOTED for e in events):
        out.append(notice("Promotion", r.PROMOTED, new.message))
    for drill in (r.DRILL_PASSED, r.DRILL_FAILED):
        if any(e.reason == drill for e in events):
            out.append(notice("Drill", drill, ""))
    paused = new.paused_reason
    if paused is not None and paused != old.paused_reason and decision.rolled_back is None:
        out.append(notice(_OWN_KIND.get(paused, "Pause"), paused,
                          r.PAUSE_REQUESTED_MSG if paused == r.PAUSE_REQUESTED else new.message))
    return tuple(out)
