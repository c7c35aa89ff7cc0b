"""The handlers' small policies: the log stays a story of releases (kopf's per-event success
line for the wake-up handler is dropped, nothing else is), and long waits are spread a little."""

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


def test_only_long_waits_are_spread_and_by_little() -> None:
    from inference_rollout.handlers import MAX_SPREAD_SECONDS, spread

    assert spread(0.0) == 0.0 and spread(2.0) == 0.0  # pods, right after a weight change
    draws = [spread(30.0) for _ in range(2000)]
    assert all(0.0 <= d <= MAX_SPREAD_SECONDS for d in draws)
    assert max(draws) > 1.0 and min(draws) < 0.2  # really spread, not a fixed offset
    assert all(0.0 <= spread(10.0) <= 0.5 for _ in range(200))  # 5 % of a 10 s wait
