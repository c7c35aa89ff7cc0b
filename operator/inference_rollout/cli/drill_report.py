"""A drill's record: its timeline, what was verified, the numbers, and the verdict, written as
Markdown (for a postmortem or a ticket) and JSON (for a pipeline)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class DrillRecord:
    kind: str
    namespace: str
    name: str
    plan: list[str]
    dry_run: bool = False
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(
        timespec="seconds"))
    timeline: list[tuple[float, str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    numbers: dict[str, float | int | str] = field(default_factory=dict)
    aborted: str | None = None  # why the drill stopped early (max duration, interrupted, ...)
    drill_id: str | None = None  # the id of the drill's mark on the rollout, once it is there
    _t0: float = field(default_factory=time.monotonic, repr=False)

    def note(self, text: str) -> None:
        elapsed = round(time.monotonic() - self._t0, 1)
        self.timeline.append((elapsed, text))
        print(f"[{elapsed:7.1f}s] {text}", flush=True)

    def check(self, name: str, passed: bool, detail: str) -> bool:
        self.checks.append(Check(name, passed, detail))
        self.note(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")
        return passed

    @property
    def verdict(self) -> str:
        if self.dry_run:
            return "dry-run"
        if self.aborted is not None:
            return "aborted"
        return "pass" if self.checks and all(c.passed for c in self.checks) else "fail"

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if not k.startswith("_")
               and k != "drill_id"}
        out["verdict"] = self.verdict
        out["timeline"] = [{"t": t, "event": e} for t, e in self.timeline]
        return out

    def markdown(self) -> str:
        lines = [f"# Drill `{self.kind}` on {self.namespace}/{self.name}: "
                 f"**{self.verdict.upper()}**", "",
                 f"Started {self.started_at}" + (f"; stopped early: {self.aborted}"
                                                  if self.aborted else ""), "", "## Plan", ""]
        lines += [f"{i}. {step}" for i, step in enumerate(self.plan, 1)]
        lines += ["", "## What was verified", "", "| check | result | detail |", "|---|---|---|"]
        lines += [f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {c.detail} |"
                  for c in self.checks]
        if self.numbers:
            lines += ["", "## Numbers", "", "| measure | value |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in self.numbers.items()]
        lines += ["", "## Timeline", "", "| t (s) | event |", "|---|---|"]
        lines += [f"| {t} | {e} |" for t, e in self.timeline]
        return "\n".join(lines) + "\n"

    def write(self, prefix: str) -> list[Path]:
        md, js = Path(prefix + ".md"), Path(prefix + ".json")
        md.write_text(self.markdown(), encoding="utf-8")
        js.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return [md, js]
