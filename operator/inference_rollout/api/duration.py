"""Strict duration strings: ``250ms``, ``30s``, ``5m``, ``24h``, ``1h30m``.

Why strict: a rollout pause of "5" could mean seconds or minutes, and guessing wrong means
either a rushed 5% stage or one that never ends.  Every duration carries its unit, the same
grammar Go's ``time.ParseDuration`` accepts for the units that make sense here (no ``us``/``ns``).
"""

from __future__ import annotations

import re

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$")

#: The pattern put into the CRD so the API server rejects a bad duration at ``kubectl apply``.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"


class DurationError(ValueError):
    """A duration string that does not parse; the message says what a valid one looks like."""


def parse_duration(text: str) -> float:
    """Return the duration in seconds, or raise :class:`DurationError`."""
    if not isinstance(text, str) or not _WHOLE.match(text.strip()):
        raise DurationError(
            f"{text!r} is not a duration: use a number with a unit, e.g. 30s, 5m, 24h or 1h30m"
        )
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text.strip()))


def format_duration(seconds: float) -> str:
    """Render seconds compactly for messages (``3h12m``, ``45s``, ``250ms``)."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "",
             f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
