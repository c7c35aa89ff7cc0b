"""Notification delivery (issue 17) against a real HTTP receiver on loopback: the two formats,
the retry with backoff, final answers, the address rule, the Secret lookup, and a queue that
never blocks a reconcile and keeps rollbacks when it is full.

The API server is stood in for by a stub that serves one Secret (the notifier's only read)."""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import UTC, datetime
from typing import Any

from tests.webhook_receiver import receiver

from inference_rollout.core.notices import Notice
from inference_rollout.kube import KubeError
from inference_rollout.notify.delivery import DEFAULT_SECRET, Notifier, Settings
from inference_rollout.notify.messages import Outgoing

ROLLBACK = Notice("Rollback", "AnalysisFailed", "rolled back: errors 1.02 (Fail: ≤ 0.01)", True,
                  "aaa111", "bbb222", 0)
PROMOTION = Notice("Promotion", "Promoted", "revision bbb222 promoted to stable", False,
                   "bbb222", None, 0)
AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


class SecretStub:
    """The API server as the notifier sees it: GET of Secrets by path."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        self.reads: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.reads.append(path)
        name = path.rsplit("/", 1)[1]
        if name not in self.secrets:
            raise KubeError(404, "GET", path, "not found")
        return {"data": {k: base64.b64encode(v.encode()).decode()
                         for k, v in self.secrets[name].items()}}


def notifier(secrets: dict[str, dict[str, str]], **settings: Any) -> Notifier:
    defaults: dict[str, Any] = {"first_delay": 0.05, "max_delay": 0.2, "timeout": 2.0,
                                "namespace_secret": DEFAULT_SECRET}
    return Notifier(SecretStub(secrets), Settings(**{**defaults, **settings}),  # type: ignore[arg-type]
                    now=lambda: AT)


def test_a_rollback_reaches_both_formats_after_a_failed_first_attempt() -> None:
    with receiver({"/hook": [503], "/slack": [502, 500]}) as rec:
        urls = {"webhookURL": rec.base + "/hook", "slackURL": rec.base + "/slack"}
        n = notifier({"inference-rollout-notifications": urls}, allow=(rec.base,))

        async def go() -> dict[str, str]:
            result = await n.deliver(Outgoing("team-a", "chat", ROLLBACK, AT), None)
            await n.aclose()
            return dict(result)

        assert asyncio.run(go()) == {"webhookURL": "sent", "slackURL": "sent"}
        first, second = rec.bodies("/hook")
        assert first == second  # the same message, retried
        assert second == {
            "version": 1, "kind": "Rollback", "reason": "AnalysisFailed",
            "message": "rolled back: errors 1.02 (Fail: ≤ 0.01)", "rolledBack": True,
            "rollout": {"namespace": "team-a", "name": "chat"}, "stableRevision": "aaa111",
            "canaryRevision": "bbb222", "canaryWeight": 0, "time": "2026-12-03T12:00:00+00:00"}
        slack = rec.bodies("/slack")
        assert len(slack) == 3
        text = slack[-1]["text"]
        assert text.startswith(":rotating_light: InferenceRollout team-a/chat rolled back: "
                               "AnalysisFailed\nrolled back: errors 1.02")
        blocks = slack[-1]["blocks"]
        assert blocks[0]["text"]["text"] == "*" + text.split("\n")[0] + "*"
        assert {"type": "mrkdwn", "text": "*Canary:* `bbb222` at 0%"} in blocks[2]["fields"]


def test_retries_back_off_and_stop_after_the_last_attempt() -> None:
    with receiver({"/hook": [503] * 10}) as rec:
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}}, allow=(rec.base,), attempts=4,
                     first_delay=0.1, max_delay=0.25)
        started = time.monotonic()
        result = asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), "s"))
        took = time.monotonic() - started
        assert result == {"webhookURL": "failed"}
        assert len(rec.bodies("/hook")) == 4
        assert 0.1 + 0.2 + 0.25 <= took < 3  # 0.1, then doubled, then capped at max_delay


def test_a_client_error_is_final_and_not_retried() -> None:
    with receiver({"/hook": [404, 200]}) as rec:
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}}, allow=(rec.base,))
        assert asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), "s")) == {
            "webhookURL": "failed"}
        assert len(rec.bodies("/hook")) == 1


def test_without_an_allow_list_a_loopback_address_is_never_contacted() -> None:
    with receiver() as rec:
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}})
        assert asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), "s")) == {
            "webhookURL": "refused"}
        # an allow-list that names another address refuses it too
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}}, allow=("http://127.0.0.1:1",))
        assert asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), "s")) == {
            "webhookURL": "refused"}
        assert rec.bodies("/hook") == []


def test_the_rollout_s_secret_wins_and_a_missing_namespace_secret_sends_nothing() -> None:
    with receiver() as rec:
        stub_secrets = {"inference-rollout-notifications": {"webhookURL": rec.base + "/ns"},
                        "team-hooks": {"webhookURL": rec.base + "/own"}}
        n = notifier(stub_secrets, allow=(rec.base,))
        asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), "team-hooks"))
        assert len(rec.bodies("/own")) == 1 and rec.bodies("/ns") == []
        n = notifier({}, allow=(rec.base,))
        assert asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), None)) == {}
        n = notifier(stub_secrets, allow=(rec.base,), namespace_secret=None)
        assert asyncio.run(n.deliver(Outgoing("ns", "r", ROLLBACK, AT), None)) == {}
        assert rec.bodies("/ns") == []


def test_offer_returns_at_once_and_the_workers_deliver_in_the_background() -> None:
    with receiver({"/hook": [503]}) as rec:
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}}, allow=(rec.base,))

        async def go() -> float:
            started = time.monotonic()
            n.offer("ns", "r", "s", None, [ROLLBACK, PROMOTION])
            took = time.monotonic() - started
            for _ in range(200):
                if len(rec.bodies("/hook")) == 3:
                    break
                await asyncio.sleep(0.02)
            await n.aclose()
            return took

        assert asyncio.run(go()) < 0.01
        assert sorted(b["kind"] for b in rec.bodies("/hook")) == ["Promotion", "Rollback",
                                                                   "Rollback"]


def test_the_rollout_s_event_filter_is_honoured() -> None:
    with receiver() as rec:
        n = notifier({"s": {"webhookURL": rec.base + "/hook"}}, allow=(rec.base,))

        async def go() -> None:
            n.offer("ns", "r", "s", ["Rollback"], [PROMOTION, ROLLBACK])
            await n.aclose(drain_seconds=5)

        asyncio.run(go())
        rec.wait_for("/hook", 1)
        assert [b["kind"] for b in rec.bodies("/hook")] == ["Rollback"]


def test_a_full_queue_drops_other_notices_to_keep_a_rollback() -> None:
    n = notifier({}, queue_size=3, workers=0)  # nothing drains: the queue stays full

    async def go() -> list[str]:
        n.offer("ns", "r", None, None, [PROMOTION] * 3)
        n.offer("ns", "r", None, None, [ROLLBACK, PROMOTION])
        n.offer("ns", "r", None, None, [ROLLBACK, ROLLBACK, ROLLBACK])
        return [q.outgoing.notice.kind for q in n._queue]

    assert asyncio.run(go()) == ["Rollback", "Rollback", "Rollback"]
    assert n.pending() == 3
