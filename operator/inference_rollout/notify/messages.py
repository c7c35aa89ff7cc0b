"""The two message formats: a generic JSON document for any webhook receiver, and a
Slack-compatible ``{"text", "blocks"}`` message (Slack incoming webhooks, and the many chat tools
that accept the same shape: Mattermost, Rocket.Chat, Discord's ``/slack`` endpoint).

Both carry the same facts; the JSON one is versioned (``"version": 1``) so receivers can rely on
its field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.notices import Notice

SCHEMA_VERSION = 1

_EMOJI = {"Rollback": ":rotating_light:", "ProgressDeadline": ":rotating_light:",
          "InconclusiveLimit": ":hourglass:", "Pause": ":double_vertical_bar:",
          "Promotion": ":white_check_mark:", "Drill": ":test_tube:"}


@dataclass(frozen=True)
class Outgoing:
    """One notice about one rollout, stamped with when the operator (or the CLI) learnt of it."""

    namespace: str
    name: str
    notice: Notice
    at: datetime

    def headline(self) -> str:
        n = self.notice
        what = {"Rollback": "rolled back", "ProgressDeadline": "rolled back (progress deadline)",
                "Promotion": "promoted", "Pause": "paused",
                "InconclusiveLimit": "undecided for too long" + (
                    ", rolled back" if n.rolled_back else ", paused"),
                "Drill": "drill result"}[n.kind]
        return f"InferenceRollout {self.namespace}/{self.name} {what}: {n.reason}"


def webhook_payload(out: Outgoing) -> dict[str, Any]:
    n = out.notice
    return {
        "version": SCHEMA_VERSION,
        "kind": n.kind,
        "reason": n.reason,
        "message": n.message,
        "rolledBack": n.rolled_back,
        "rollout": {"namespace": out.namespace, "name": out.name},
        "stableRevision": n.stable_revision,
        "canaryRevision": n.canary_revision,
        "canaryWeight": n.canary_weight,
        "time": out.at.isoformat(),
    }


def slack_payload(out: Outgoing) -> dict[str, Any]:
    n = out.notice
    headline = f"{_EMOJI.get(n.kind, '')} {out.headline()}".strip()
    facts = [f"*Reason:* `{n.reason}`", f"*Stable:* `{n.stable_revision or '-'}`",
             f"*Canary:* `{n.canary_revision or '-'}` at {n.canary_weight}%"]
    return {
        "text": f"{headline}\n{n.message}",  # what notifications and plain clients show
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*"}},
            {"type": "section", "text": {"type": "plain_text", "text": n.message or "-"}},
            {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in facts]},
            {"type": "context", "elements": [{"type": "mrkdwn", "text":
                f"`kubectl inference-rollout get {out.name} -n {out.namespace}` · "
                f"{out.at.isoformat(timespec='seconds')}"}]},
        ],
    }
