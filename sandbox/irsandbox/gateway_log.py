"""What Traefik says about the requests it failed: its access log of answers 500-599.

A burst that fails through the gateway with no pod named (Traefik answered, not a shim) is
otherwise a count with no cause. Traefik writes one JSON line per such request
(``sandbox/up.d/65-traefik.sh``: ``--accesslog.filters.statuscodes=500-599``), naming the route
service it picked and the backend address it dialled. :func:`failures_between` counts those
lines for one host and time window, so a failed test says *which* backend the 502s went to
(a pod that is gone, a stale address, a service Traefik could not load).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

from .common import state_dir


def access_log() -> Path:
    return state_dir() / "logs" / "traefik-access.log"


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (AttributeError, ValueError):
        return None


def failures_between(host: str | None, start: float, end: float,
                     path: Path | None = None) -> dict[str, int]:
    """Traefik's failed answers for ``host`` that started in [start, end] (epoch seconds), as
    ``"<status> <route service> -> <backend address>"`` counts.  Empty when there is no log."""
    counts: Counter[str] = Counter()
    try:
        lines = (path or access_log()).read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        started = _epoch(entry.get("StartUTC", ""))
        if started is None or not start - 1 <= started <= end + 1:
            continue
        if host and entry.get("RequestHost") != host:
            continue
        key = (f"{entry.get('DownstreamStatus')} {entry.get('ServiceName') or '?'} -> "
               f"{entry.get('ServiceAddr') or entry.get('ServiceURL') or 'no backend'}")
        counts[key] += 1
    return dict(counts)
