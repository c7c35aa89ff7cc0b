"""The verdict of a chaos run, from what the API server recorded: pure functions over the rollouts'
status history (every version a watch delivered) and the releases the run started.

Kept apart from the driver (:mod:`chaos_sandbox`) so the rules themselves are unit-tested: a
check that never fails proves nothing, so ``tests/unit/test_chaos_history.py`` feeds each rule a
history that breaks it.

The rules (issue 13), per release (a rollout's generation whose template the run changed):

* **steps**: while not aborted, the written ``currentStep`` stays or rises by one;
* **evidence**: every step advance and the promotion happen in a status whose analysis shows
  every metric ``Pass`` (the core keeps a step's measurements until the next release starts);
* **outcome**: a bad canary is never promoted; a good one is promoted, or held (Paused, or still
  progressing when the run ends) for want of evidence; a good canary rolled back is counted
  (a false rollback), not a safety violation, and reported;
* **traffic**: at the end, a rolled-back release's route sends nothing to its canary.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One version of a rollout's status, as a watch delivered it."""

    at: float
    name: str
    generation: int | None
    phase: str | None
    step: int | None
    weight: int
    canary: str | None
    stable: str | None
    aborted: bool
    verdicts: dict[str, str | None]
    reason: str | None = None  # status.abortReason

    @classmethod
    def of(cls, at: float, obj: dict[str, Any]) -> Seen:
        st = obj.get("status") or {}
        return cls(at=at, name=obj["metadata"]["name"], generation=st.get("observedGeneration"),
                   phase=st.get("phase"), step=st.get("currentStep"),
                   weight=int(st.get("canaryWeight") or 0), canary=st.get("canaryRevision"),
                   stable=st.get("stableRevision"), aborted=bool(st.get("aborted")),
                   reason=st.get("abortReason"),
                   verdicts={k: (v or {}).get("verdict")
                             for k, v in (st.get("analysis") or {}).items()})


@dataclass(frozen=True)
class Started:
    """A release the run started: the rollout, the generation its template change made, and
    whether its canary was built to fail."""

    name: str
    generation: int
    bad: bool


@dataclass
class Outcome:
    release: Started
    result: str  # promoted | rolled-back | paused | progressing | superseded | never-seen
    canary: str | None = None
    reason: str | None = None
    violations: list[str] = field(default_factory=list)


def all_pass(seen: Seen) -> bool:
    return bool(seen.verdicts) and all(v == "Pass" for v in seen.verdicts.values())


def judge(release: Started, history: list[Seen], last_generation: int) -> Outcome:
    """One release's outcome and the rules it broke, from its rollout's history (in order)."""
    mine = [s for s in history if s.generation == release.generation]
    if not mine:
        return Outcome(release, "superseded" if last_generation > release.generation
                       else "never-seen")
    canary = next((s.canary for s in mine if s.canary), None)
    out = Outcome(release, "progressing", canary)
    tag = f"{release.name} generation {release.generation}"
    steps = [s.step for s in mine if not s.aborted and s.step is not None]
    for a, b in itertools.pairwise(steps):
        if b - a not in (0, 1):
            out.violations.append(f"{tag}: step {a} -> {b} ({steps})")
    for before, now in itertools.pairwise(mine):
        if now.aborted or now.step is None or before.step is None or now.step <= before.step:
            continue
        if not all_pass(now):
            out.violations.append(f"{tag}: step {before.step} -> {now.step} without every "
                                  f"metric passing ({now.verdicts})")
    final = mine[-1]
    promoted = canary is not None and final.stable == canary and not final.canary
    if promoted:
        out.result = "promoted"
        at = next(i for i, s in enumerate(mine) if s.stable == canary)
        evidence = [s for s in mine[:at + 1] if s.verdicts]
        if not evidence or not all_pass(evidence[-1]):
            out.violations.append(f"{tag}: promoted without every metric passing "
                                  f"({evidence[-1].verdicts if evidence else 'no analysis'})")
        if release.bad:
            out.violations.append(f"{tag}: a bad canary ({canary}) was promoted")
    elif final.aborted or final.phase == "Degraded":
        out.result, out.reason = "rolled-back", final.reason
    elif final.phase == "Paused":
        out.result = "paused"
    if last_generation > release.generation and out.result == "progressing":
        out.result = "superseded"
    return out


def judge_run(releases: list[Started], history: list[Seen],
              final_routes: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Every release judged, the rollbacks' routes checked, and the counts the docs report.
    ``final_routes``: each rollout's route weights by revision at the end of the run."""
    by_name: dict[str, list[Seen]] = defaultdict(list)
    for s in history:
        by_name[s.name].append(s)
    latest = {r.name: r.generation for r in releases}
    for r in releases:
        latest[r.name] = max(latest[r.name], r.generation)
    outcomes = [judge(r, by_name[r.name], latest[r.name]) for r in releases]
    violations = [v for o in outcomes for v in o.violations]
    last_release = {r.name: o for r, o in zip(releases, outcomes, strict=True)
                    if r.generation == latest[r.name]}
    for name, o in last_release.items():
        if o.result == "rolled-back" and o.canary and final_routes.get(name, {}).get(o.canary):
            violations.append(f"{name}: rolled back, yet its route still sends "
                              f"{final_routes[name][o.canary]}% to canary {o.canary}")
    counts: dict[str, int] = defaultdict(int)
    reasons: dict[str, int] = defaultdict(int)
    for o in outcomes:
        kind = "bad" if o.release.bad else "good"
        counts[f"{kind} {o.result}"] += 1
        if o.result == "rolled-back":
            reasons[f"{kind}: {o.reason}"] += 1
    return {"releases": len(releases), "outcomes": dict(sorted(counts.items())),
            "false_rollbacks": counts["good rolled-back"],
            "rollback_reasons": dict(sorted(reasons.items())),
            "status_versions_seen": len(history), "violations": violations}
