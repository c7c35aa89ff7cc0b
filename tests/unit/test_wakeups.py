"""Which watch events wake which rollout (core/wakeups.py): news only, never the operator's own
writes, and the rollout found from a route's revision backends."""

from __future__ import annotations

from typing import Any

from inference_rollout.api import LABEL_ROLLOUT
from inference_rollout.core.wakeups import deployment_rollout, route_rollouts

REV_A, REV_B = "7d9f8c6b5a", "0a1b2c3d4e"


def deployment(generation: int, observed: int | None, rollout: str | None = "chat") -> Any:
    labels = {LABEL_ROLLOUT: rollout} if rollout else {}
    status = {} if observed is None else {"observedGeneration": observed, "readyReplicas": 1}
    return {"metadata": {"name": f"chat-{REV_A}", "generation": generation, "labels": labels},
            "status": status}


def test_a_deployment_wakes_its_rollout_once_its_controller_caught_up() -> None:
    assert deployment_rollout(deployment(3, 3)) == "chat"


def test_the_operators_own_scale_patch_wakes_nothing_until_the_controller_answers() -> None:
    assert deployment_rollout(deployment(4, 3)) is None
    assert deployment_rollout(deployment(1, None)) is None


def test_a_deployment_of_no_rollout_wakes_nothing() -> None:
    assert deployment_rollout(deployment(3, 3, rollout=None)) is None


def route(generation: int, observed: list[int], backends: list[str]) -> Any:
    return {
        "metadata": {"name": "chat", "generation": generation},
        "spec": {"rules": [{"backendRefs": [{"name": b, "weight": 1} for b in backends]}]},
        "status": {"parents": [{"conditions": [
            {"type": "Accepted", "status": "True", "observedGeneration": g}]}
            for g in observed]},
    }


def test_the_gateways_answer_for_the_current_generation_wakes_the_routes_rollouts() -> None:
    got = route(7, [7], [f"chat-{REV_A}", f"chat-{REV_B}", f"my-app-v2-{REV_A}"])
    assert route_rollouts(got) == {"chat", "my-app-v2"}


def test_the_operators_own_route_write_wakes_nothing_until_the_gateway_answers() -> None:
    assert route_rollouts(route(8, [7], [f"chat-{REV_A}"])) == set()
    assert route_rollouts({"metadata": {"generation": 1}, "spec": {}}) == set()


def test_backends_that_are_not_revisions_wake_nothing() -> None:
    assert route_rollouts(route(2, [2], ["frontend", "chat-v2", f"-{REV_A}"])) == set()
