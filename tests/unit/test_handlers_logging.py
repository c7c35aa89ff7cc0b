"""The operator's log stays a story of releases: kopf's per-event success line for the wake-up
handler is dropped, nothing else is."""

from __future__ import annotations

import logging

from inference_rollout.handlers import _QuietWakeups


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


def test_only_the_wakeup_successes_are_dropped() -> None:
    quiet = _QuietWakeups()
    assert not quiet.filter(record("Handler 'wake_on_change' succeeded."))
    assert quiet.filter(record("Handler 'wake_on_change' failed with an exception.",
                               logging.ERROR))
    assert quiet.filter(record("Handler 'on_delete' succeeded."))
    assert quiet.filter(record("Daemon 'run_rollout' succeeded."))


def test_the_deployment_and_route_wakeups_are_quiet_too() -> None:
    quiet = _QuietWakeups()
    assert not quiet.filter(record("Handler 'wake_on_deployment' succeeded."))
    assert not quiet.filter(record("Handler 'wake_on_route' succeeded."))
    assert quiet.filter(record("Handler 'wake_on_route' failed with an exception.",
                               logging.ERROR))
