"""RFC 3339 timestamps as stored in status.  Pure: "now" always comes in as an argument."""

from __future__ import annotations

from datetime import UTC, datetime


def to_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def from_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def seconds_since(text: str | None, now: datetime) -> float | None:
    moment = from_iso(text)
    return None if moment is None else (now - moment).total_seconds()
