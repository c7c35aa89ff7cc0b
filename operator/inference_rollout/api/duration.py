"""Strict duration strings: ``250ms``, ``30s``, ``5m``, ``24h``, ``1h30m``.

Why strict: a rollout pause of "5" could mean seconds or minutes, and guessing wrong means
either a rushed 5% stage or one that never ends.  Every duration carries its unit, the same
grammar Go's ``time.ParseDuration`` accepts for the units that make sense here (no ``us``/``ns``).

Why bounded: a duration becomes a ``datetime`` offset, and ``pause: 300000000000s`` overflowed one
(OverflowError in every reconcile).  Every number has at most 6 digits before its point and a
duration at most :data:`MAX_LENGTH` characters, so no duration can overflow Go's
``time.Duration`` in a CEL rule either; and no duration is longer than :data:`MAX_DURATION`.
"""

from __future__ import annotations

import re

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,9})?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:[0-9]{1,6}(?:\.[0-9]{1,9})?(?:ms|s|m|h|d))+$")

#: The pattern put into the CRD so the API server rejects a bad duration at ``kubectl apply``.
DURATION_PATTERN = r"^([0-9]{1,6}(\.[0-9]{1,9})?(ms|s|m|h|d))+$"
#: The longest duration string: with 6-digit numbers, at most two parts of 999999 hours, which
#: stays below Go's largest ``time.Duration`` (2562047h) -- CEL's ``duration()`` cannot overflow.
MAX_LENGTH = 16
#: The longest duration any field accepts (fields may have smaller maximums).
MAX_DURATION = "365d"
MAX_DURATION_SECONDS = 365 * 86400.0


class DurationError(ValueError):
    """A duration string that does not parse; the message says what a valid one looks like."""


def parse_duration(text: str) -> float:
    """Return the duration in seconds, or raise :class:`DurationError`."""
    if not isinstance(text, str) or len(text.strip()) > MAX_LENGTH \
            or not _WHOLE.match(text.strip()):
        raise DurationError(
            f"{str(text)[:40]!r} is not a duration: use a number with a unit, e.g. 30s, 5m, 24h or "
            f"1h30m (numbers of at most 6 digits, at most {MAX_LENGTH} characters)"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text.strip()))
    if seconds > MAX_DURATION_SECONDS:
        raise DurationError(f"{text!r} is longer than {MAX_DURATION}, the longest duration allowed")
    return seconds


def cel_compare(field: str, op: str, seconds: float) -> str:
    """A CEL expression: the duration string ``field`` compared (``op``) with ``seconds``.

    CEL's ``duration()`` is Go's ``time.ParseDuration``, which has no ``d`` unit.  Without a ``d``
    it compares milliseconds directly.  With one it uses two Go-parseable rewrites, A (d -> h) =
    R + D*1h and B (d -> m) = R + D*1m, where R is the rest and D the days; then
    59 * (R + D*24h) = 1439*A - 1380*B, compared in milliseconds with 59 * the bound.  The caller
    guards with the pattern and :data:`MAX_LENGTH` (see :func:`cel_guard`), so ``duration()``
    neither fails nor overflows.
    """
    ms = round(seconds * 1000)
    return (f"({field}.contains('d') ? 1439 * duration({field}.replace('d', 'h'))"
            f".getMilliseconds() - 1380 * duration({field}.replace('d', 'm')).getMilliseconds() "
            f"{op} {59 * ms} : duration({field}).getMilliseconds() {op} {ms})")


def cel_guard(field: str) -> str:
    """True when ``field`` is not a well-formed duration (the schema rejects it already)."""
    pattern = DURATION_PATTERN.replace("\\", "\\\\")
    return f"size({field}) > {MAX_LENGTH} || !{field}.matches('{pattern}')"


def cel_rule(field: str, op: str, text: str) -> str:
    """A whole CEL rule: ``field`` (when well-formed) compared with the duration ``text``."""
    return f"{cel_guard(field)} || {cel_compare(field, op, parse_duration(text))}"


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
