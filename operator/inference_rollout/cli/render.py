"""The human view of one rollout, shared by ``get`` and ``watch``."""

from __future__ import annotations

import unicodedata
from typing import Any

from ..api.duration import format_duration


def printable(text: str) -> str:
    """``text`` with every control and format character shown escaped (``\\x1b``, ``\\n``,
    ``\\u202e``). Status messages, metric names and Events come from the cluster, where anyone who
    may write a status or an Event could otherwise draw on the viewer's terminal: clear it, move
    the cursor, start a fake line ``Phase: Healthy``, reverse text with a bidi override."""
    return "".join(
        c if unicodedata.category(c)[0] != "C"
        else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        for c in text)


def printable_values(obj: Any) -> Any:
    """``obj`` (a rollout, an Event) with every string in it, keys too, made :func:`printable`."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable_values(k): printable_values(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [printable_values(v) for v in obj]
    return obj


def _bar(weight: int, width: int = 20) -> str:
    filled = round(width * weight / 100)
    return "[" + "#" * filled + "." * (width - filled) + f"] {weight:3d}%"


def render_rollout(body: dict[str, Any]) -> str:
    body = printable_values(body)
    meta, spec, st = body["metadata"], body.get("spec", {}), body.get("status") or {}
    steps = (spec.get("strategy") or {}).get("steps") or [
        {"weight": 5}, {"weight": 20}, {"weight": 50}, {"weight": 100}]
    step = st.get("currentStep")
    weight = int(st.get("canaryWeight") or 0)
    lines = [
        f"Name:      {meta['namespace']}/{meta['name']}",
        f"Phase:     {st.get('phase', 'Unknown')}",
        f"Message:   {st.get('message', '')}",
        f"Stable:    {st.get('stableRevision') or '-'}   {_bar(100 - weight)}",
        f"Canary:    {st.get('canaryRevision') or '-'}   {_bar(weight)}",
        "Steps:     " + "  ".join(
            ("▶" if i == step else "✓" if step is not None and i < step else " ")
            + f"{s['weight']}%" for i, s in enumerate(steps)),
    ]
    analysis = st.get("analysis") or {}
    if analysis:
        lines.append("Analysis:")
        lines.append(f"  {'METRIC':<22} {'VALUE':>10} {'STABLE':>10}  {'VERDICT':<12} THRESHOLD")
        for name, r in sorted(analysis.items()):
            value = "-" if r.get("value") is None else f"{r['value']:.4g}"
            stable = "-" if r.get("stableValue") is None else f"{r['stableValue']:.4g}"
            verdict = r.get("verdict") or "-"
            lines.append(f"  {name:<22} {value:>10} {stable:>10}  {verdict:<12} "
                         f"{r.get('threshold', '')}")
            if r.get("test"):  # the Sequential rule's evidence: counts, p, requests to go
                rate = r.get("requestRate")
                shown = f" at {rate:.3g} req/s" if rate else ""
                lines.append(f"  {'':<22} {r['test']}{shown}")
    ev = st.get("evaluation")
    if ev:
        def pts(v: Any) -> str:
            return "-" if v is None else f"{v:.1f}"
        lines.append(f"Evaluation: {ev.get('verdict')} for {ev.get('revision')}: canary "
                     f"{pts(ev.get('canaryScore'))} vs stable {pts(ev.get('stableScore'))} points"
                     f"{' — ' + ev['message'] if ev.get('message') else ''}")
    cost = st.get("releaseCost")
    if cost:
        lines.append(_cost_line(cost))
    lines += _adapter_pod_lines(st.get("adapterPods") or [])
    for c in st.get("conditions") or []:
        if (c.get("status") == "True" and c["type"] in ("Aborted", "Paused")) or (
                c["type"] in ("Valid", "RouteAccepted") and c.get("status") == "False"):
            lines.append(f"{c['type']}: {c.get('reason')}: {c.get('message')}")
    return "\n".join(lines)


def _cost_line(cost: dict[str, Any]) -> str:
    """``Cost:      09c054e966 RolledBack after 2m20s: 203 pod-s (812 GPU-s) beyond steady
    state, 2 pods started, 1204 canary requests (1204 rolled back); steps at 12s, 1m15s``."""
    def took(seconds: Any) -> str:
        return "-" if seconds is None else format_duration(float(seconds))
    outcome = cost.get("outcome") or "in progress"
    after = f" after {took(cost.get('decidedAfter'))}" if cost.get("outcome") else ""
    rolled = (f" ({cost.get('rolledBackRequests', 0):.0f} rolled back)"
              if cost.get("outcome") == "RolledBack" else "")
    steps = ", ".join(took(s) for s in cost.get("stepsReachedAfter") or []) or "-"
    probes = (f", {cost['probeRequests']} probes ({cost.get('probeSeconds', 0):.0f} s)"
              if cost.get("probeRequests") else "")
    return (f"Cost:      {cost.get('revision')} {outcome}{after}: "
            f"{cost.get('podSeconds', 0):.0f} pod-s ({cost.get('gpuSeconds', 0):.0f} GPU-s) "
            f"beyond steady state, {cost.get('podsStarted', 0)} pods started, "
            f"{cost.get('canaryRequests', 0):.0f} canary requests{rolled}{probes}; "
            f"steps at {steps}")


def _adapter_pod_lines(pods: list[dict[str, Any]]) -> list[str]:
    """A rollout with adapters: pods per serving version (``moving`` for those in none), then
    each pod and what its own ``/v1/models`` lists (docs/adapters.md)."""
    if not pods:
        return []
    counts: dict[str, int] = {}
    for p in pods:
        key = p.get("version") or "moving"
        counts[key] = counts.get(key, 0) + 1
    lines = ["Adapter pods: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))]
    for p in pods:
        adapters = p.get("adapters")
        shown = ("(no answer)" if adapters is None else
                 " ".join(f"{k}={v}" for k, v in sorted(adapters.items())) or "(none loaded)")
        lines.append(f"  {p.get('pod', '?'):<40} {p.get('version') or 'moving':<12} {shown}")
    return lines
