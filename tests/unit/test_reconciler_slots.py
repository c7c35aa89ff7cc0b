"""A reconcile waiting on a tenant's Prometheus holds no reconcile slot (issue 9, item 2): a
Prometheus that never answers must not delay another namespace's rollback."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.fakes import UnexpectedKube

from inference_rollout.reconciler import Deps, outside_slot


def _deps(slots: asyncio.Semaphore | None) -> Deps:
    async def post(_body: dict[str, Any], _event: Any) -> None:
        return None

    return Deps(kube=UnexpectedKube(), post_event=post, slots=slots)


def test_a_reconcile_waiting_on_prometheus_gives_its_slot_to_another() -> None:
    async def scenario() -> list[str]:
        slots = asyncio.Semaphore(1)
        deps, order = _deps(slots), []
        never = asyncio.Event()

        async def stuck() -> None:
            async with slots:
                async with outside_slot(deps):
                    await never.wait()  # a Prometheus that never answers
                order.append("stuck done")

        async def rollback() -> None:
            async with slots:
                order.append("rollback")

        first = asyncio.create_task(stuck())
        await asyncio.sleep(0.01)
        await asyncio.wait_for(rollback(), 1.0)  # would time out if the slot were held
        never.set()
        await first
        return order

    assert asyncio.run(scenario()) == ["rollback", "stuck done"]


def test_the_slot_is_taken_back_before_the_reconcile_goes_on() -> None:
    async def scenario() -> int:
        slots = asyncio.Semaphore(1)
        deps = _deps(slots)
        async with slots:
            async with outside_slot(deps):
                assert not slots.locked()
            return int(slots.locked())

    assert asyncio.run(scenario()) == 1


def test_without_slots_it_is_a_no_op() -> None:
    async def scenario() -> None:
        async with outside_slot(_deps(None)):
            pass

    asyncio.run(scenario())
