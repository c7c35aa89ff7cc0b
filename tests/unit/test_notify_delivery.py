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

from tests.unit.fakes import UnexpectedKube, no_events
from tests.webhook_receiver import receiver

from inference_rollout.core.notices import Notice
from inference_rollout.kube import KubeError
from inference_rollout.notify.delivery import DEFAULT_SECRET, Notifier, Queued, Settings
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
    return Notifier(SecretStub(secrets), Settings(**{**defaults, **settings}),
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
        # Two workers send both notices at once: whichever reaches the receiver first gets its
        # 503 and is sent again, so one kind arrives twice and the other once.
        kinds = [b["kind"] for b in rec.bodies("/hook")]
        assert sorted(kinds.count(k) for k in ("Promotion", "Rollback")) == [1, 2], kinds


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
        return [q.outgoing.notice.kind for q in n.queued()]

    assert asyncio.run(go()) == ["Rollback", "Rollback", "Rollback"]
    assert n.pending() == 3


def test_the_default_address_rule_refuses_every_internal_address() -> None:
    from inference_rollout.addresses import public_host

    async def check(urls: list[str]) -> list[bool]:
        return [await public_host(u) for u in urls]

    internal = ["http://127.0.0.1:8080/hook", "http://10.1.2.3/", "http://172.16.0.9/",
                "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data",
                "http://[::1]/", "http://[fd00::1]/", "http://alertmanager/",
                "http://hooks.monitoring.svc/", "http://a.b.svc.cluster.local:9093/",
                "http://localhost:80/", "ftp://203.0.113.1/", "not a url"]
    assert asyncio.run(check(internal)) == [False] * len(internal)
    assert asyncio.run(check(["https://1.1.1.1/hook", "http://[2606:4700::1111]/"])) == [
        True, True]


def test_the_reconciler_hook_queues_the_decision_s_notices_for_the_rollout_s_secret() -> None:
    from tests.unit.test_core_decide import at_step, in_release, steps

    from inference_rollout.reconciler import Deps

    sim, _, new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.advance(10)
    sim.verdicts = "fail"
    before = sim.status
    decision = sim.reconcile()
    spec = {**sim.body, "notifications": {"secretRef": {"name": "team-hooks"},
                                          "events": ["Rollback", "Promotion"]}}
    n = notifier({}, workers=0)
    deps = Deps(kube=UnexpectedKube(), post_event=no_events, notifier=n)
    body = {"metadata": {"namespace": "team-a", "name": "chat"}, "spec": spec}

    async def go() -> None:
        deps.notify(body, before, decision)

    asyncio.run(go())
    (queued,) = n.queued()
    assert isinstance(queued, Queued)
    assert queued.secret == "team-hooks"
    assert (queued.outgoing.namespace, queued.outgoing.name) == ("team-a", "chat")
    assert queued.outgoing.notice.kind == "Rollback"
    assert queued.outgoing.notice.canary_revision == new


def test_a_rollback_by_the_fail_safe_is_told_too() -> None:
    from inference_rollout.api.status import InferenceRolloutStatus
    from inference_rollout.reconciler import Deps, fail_safe

    class StatusWrites(UnexpectedKube):
        async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            return {"metadata": {"resourceVersion": "2"}, "status": body["status"]}

    n = notifier({}, workers=0)
    deps = Deps(kube=StatusWrites(), post_event=no_events, notifier=n)
    in_flight = InferenceRolloutStatus(stable_revision="aaa1110000", canary_revision="bbb2220000",
                                       canary_weight=20, current_step=0)
    body = {"metadata": {"namespace": "ns", "name": "r", "resourceVersion": "1"},
            "spec": {"notifications": {"events": ["Rollback"]}}, "status": in_flight.to_body()}

    async def go() -> None:
        await fail_safe(deps, body, RuntimeError("boom"))

    asyncio.run(go())  # the route cannot be read here (no spec.traffic): logged, not raised
    (queued,) = n.queued()
    notice = queued.outgoing.notice
    assert (notice.kind, notice.reason, notice.rolled_back) == ("Rollback", "ReconcileFailed",
                                                                 True)
    assert "RuntimeError: boom" in notice.message and notice.canary_revision == "bbb2220000"


def test_a_tenant_whose_webhook_never_answers_holds_no_one_elses_notices() -> None:
    """Issue 29: one tenant's webhook that never answered held both workers (~91 s a notice).
    Now a namespace has one attempt in flight at a time, and namespaces take turns."""
    import socket

    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    dead = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
    with receiver() as rec:
        n = notifier({"slow": {"webhookURL": dead}, "fast": {"webhookURL": rec.base + "/hook"}},
                     allow=(rec.base, dead.rsplit("/", 1)[0]), timeout=3.0, workers=2)

        async def go() -> float:
            n.offer("slow-tenant", "r", "slow", None, [ROLLBACK] * 4)
            await asyncio.sleep(0.1)  # the slow tenant's notices are taken first
            started = time.monotonic()
            n.offer("team-b", "r", "fast", None, [ROLLBACK])
            while not rec.bodies("/hook"):
                await asyncio.sleep(0.01)
            took = time.monotonic() - started
            await n.aclose()
            return took

        assert asyncio.run(go()) < 1.0
    silent.close()


def test_a_worker_is_free_while_an_endpoint_waits_for_its_retry() -> None:
    with receiver({"/a": [503] * 3}) as rec:
        n = notifier({"a": {"webhookURL": rec.base + "/a"}, "b": {"webhookURL": rec.base + "/b"}},
                     allow=(rec.base,), workers=1, first_delay=60.0, max_delay=60.0)
        # A backoff far longer than the test: with 1 s, a loaded machine delivered /b after
        # ns-a's retry had already fired (2 bodies on /a), failing the test once in a full run.

        async def go() -> None:
            n.offer("ns-a", "r", "a", None, [ROLLBACK])
            while not rec.bodies("/a"):
                await asyncio.sleep(0.01)
            n.offer("ns-b", "r", "b", None, [PROMOTION])  # during ns-a's backoff
            while not rec.bodies("/b"):
                await asyncio.sleep(0.01)
            # The receiver has ns-b's body a moment before the worker has its answer (until
            # then ns-b is still "being sent": a loaded machine saw pending() == 2 here).
            deadline = asyncio.get_running_loop().time() + 10
            while n.pending() > 1 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
            assert len(rec.bodies("/a")) == 1  # the one worker served ns-b in between
            assert n.pending() == 1  # ns-a's retry, scheduled
            await n.aclose()

        asyncio.run(go())


def test_a_full_queue_takes_room_from_the_namespace_that_holds_the_most() -> None:
    n = notifier({}, queue_size=4, workers=0)

    async def go() -> list[tuple[str, str]]:
        n.offer("noisy", "r", None, None, [PROMOTION] * 4)
        n.offer("noisy", "r", None, None, [PROMOTION])  # its own: dropped
        n.offer("quiet", "r", None, None, [PROMOTION])  # takes one of noisy's places
        return [(q.outgoing.namespace, q.outgoing.notice.kind) for q in n.queued()]

    assert asyncio.run(go()) == [("noisy", "Promotion")] * 3 + [("quiet", "Promotion")]
