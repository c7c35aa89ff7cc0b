"""The watch handlers wake the daemon of the rollout an event concerns, and only that one
(handlers.wake_on_deployment / wake_on_route; which events count is core/wakeups.py's)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from tests.unit.fakes import kopf_body

from inference_rollout.api import LABEL_ROLLOUT
from inference_rollout.handlers import Runtime, wake_on_deployment, wake_on_route

REV = "7d9f8c6b5a"


@pytest.fixture()
def daemons() -> Iterator[dict[str, asyncio.Event]]:
    """Two rollouts' daemons asleep in namespace ``prod``, one of the same name elsewhere."""
    events = {"chat": asyncio.Event(), "embed": asyncio.Event(), "other/chat": asyncio.Event()}
    Runtime.wake.update({("prod", "chat"): events["chat"], ("prod", "embed"): events["embed"],
                         ("other", "chat"): events["other/chat"]})
    try:
        yield events
    finally:
        Runtime.wake.clear()


def woken(events: dict[str, asyncio.Event]) -> set[str]:
    return {name for name, ev in events.items() if ev.is_set()}


def test_a_caught_up_deployment_wakes_its_rollout_only(daemons: Any) -> None:
    body = {"metadata": {"namespace": "prod", "name": f"chat-{REV}", "generation": 2,
                         "labels": {LABEL_ROLLOUT: "chat"}},
            "status": {"observedGeneration": 2, "readyReplicas": 1}}
    asyncio.run(wake_on_deployment(body=kopf_body(body)))
    assert woken(daemons) == {"chat"}


def test_the_gateways_answer_wakes_the_rollout_of_the_routes_backends(daemons: Any) -> None:
    body = {"metadata": {"namespace": "prod", "name": "frontend", "generation": 5},
            "spec": {"rules": [{"backendRefs": [{"name": f"embed-{REV}"}]}]},
            "status": {"parents": [{"conditions": [{"type": "Accepted",
                                                    "observedGeneration": 5}]}]}}
    asyncio.run(wake_on_route(body=kopf_body(body)))
    assert woken(daemons) == {"embed"}


def test_an_unanswered_route_write_wakes_nobody(daemons: Any) -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat", "generation": 6},
            "spec": {"rules": [{"backendRefs": [{"name": f"chat-{REV}"}]}]},
            "status": {"parents": [{"conditions": [{"type": "Accepted",
                                                    "observedGeneration": 5}]}]}}
    asyncio.run(wake_on_route(body=kopf_body(body)))
    assert woken(daemons) == set()
