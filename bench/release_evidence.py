"""Whole releases at low traffic: the pass side counting the release's evidence (issue 30, item
3) beside counting each step's alone (the rule before).  Pure, like ``bench/verdicts.py``: the
operator's real verdict code (``core.verdicts.record``, the function ``decide`` calls at every
look) on simulated requests; docs/benchmarks.md has the method and the table.

A release goes through the steps 5/20/50/100 % with ``pause: 30s`` at a total request rate (the
canary's rate is its share of it), looking every ``--interval`` and once at the pause's end, as
the operator does.  A step ends at its first Pass at or after the pause; a Fail rolls back.  The
same draws (one seed per cell) go through both rules, so the columns differ only by the rule.

``python bench/release_evidence.py`` (``--json FILE`` keeps every cell's raw counts).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdicts import (
    ERRORS,
    NOW,
    RATES_SEQUENTIAL,
    TTFT,
    TTFT_BOUNDS,
    StepCounts,
    fmt_time,
    latency_buckets,
    step_key,
)

from inference_rollout.api.spec import Step
from inference_rollout.core import verdicts as an
from inference_rollout.core.types import Measurement

WEIGHTS = (5, 20, 50, 100)
PAUSE = 30.0
STEP_LIMIT = 2 * 3600.0


@dataclass
class Outcome:
    outcome: str  # promoted | rolled back | no verdict
    seconds: float
    bad_served: int  # canary requests over the limit (or failed) answered before the outcome
    weight_reached: int  # the highest weight the canary was handed


def release(rng: np.random.Generator, total_rate: float, share: float, latency: bool,
            interval: float, carry: bool) -> Outcome:
    """One release; ``carry``: the pass side counts the release (today's rule), else each step
    alone with the whole ``ln(1/β)`` (the rule before issue 30, item 3)."""
    metric = TTFT if latency else ERRORS
    probs = latency_buckets(share) if latency else None
    steps = [Step(weight=w, pause="30s") for w in WEIGHTS]
    t, bad_served, prev = 0.0, 0, None
    for index, step in enumerate(steps):
        rate = total_rate * step.weight / 100
        looks = sorted({*np.arange(interval, STEP_LIMIT + interval, interval).tolist(), PAUSE})
        counts = StepCounts(probs, share)
        last = 0.0
        key = step_key(index)
        if not carry:
            prev = None
        for at in looks:
            n = int(rng.poisson(rate * (at - last)))
            last = at
            drawn = counts.add(rng, n)
            # over 0.5 s: surely over the limit (or failed)
            bad_served += (int(drawn[TTFT_BOUNDS.index(0.5) + 1:].sum())
                           if isinstance(drawn, np.ndarray) else drawn)
            exposure = an.pass_exposure(steps, index) if carry else 1.0
            prev = an.record(metric, prev, Measurement(None, evidence=counts.evidence(at)),
                             NOW + timedelta(seconds=t + at), RATES_SEQUENTIAL, step=key,
                             exposure=exposure)
            if prev.verdict == "Fail":
                return Outcome("rolled back", t + at, bad_served, step.weight)
            if prev.verdict == "Pass" and at >= PAUSE:
                break
        else:
            return Outcome("no verdict", t + last, bad_served, step.weight)
        t += last
    return Outcome("promoted", t, bad_served, 100)


@dataclass(frozen=True)
class Cell:
    kind: str  # latency | errors
    total_rate: float
    share: float
    carry: bool
    releases: list[Outcome]


def summary(c: Cell) -> str:
    n = len(c.releases)
    count = {k: sum(r.outcome == k for r in c.releases) for k in
             ("rolled back", "promoted", "no verdict")}
    decided = [r.seconds for r in c.releases if r.outcome != "no verdict"] or [math.nan]
    served = [r.bad_served for r in c.releases]
    reached = sum(r.weight_reached > WEIGHTS[0] for r in c.releases)
    kind = "over L" if c.kind == "latency" else "errors"
    return (f"| {'release (today)' if c.carry else 'each step alone'} | {c.total_rate:g} | "
            f"{100 * c.share:g}% {kind} | {n} | "
            + " | ".join(f"{100 * count[k] / n:.1f}%" for k in count)
            + f" | {100 * reached / n:.1f}% | {fmt_time(float(np.median(decided)))} / "
            f"{fmt_time(float(np.percentile(decided, 95)))} | {np.median(served):.0f} / "
            f"{np.percentile(served, 95):.0f} |")


def raw(c: Cell) -> dict[str, object]:
    """A cell's every release, column by column (outcome: P promoted, R rolled back, N none)."""
    return {"kind": c.kind, "total_rate": c.total_rate, "share": c.share, "carry": c.carry,
            "outcome": "".join(r.outcome[0].upper() if r.outcome != "no verdict" else "N"
                               for r in c.releases),
            "seconds": [round(r.seconds) for r in c.releases],
            "bad_served": [r.bad_served for r in c.releases],
            "weight_reached": [r.weight_reached for r in c.releases]}


def from_raw(d: dict[str, Any]) -> Cell:
    """A cell read back from :func:`raw` (the docs' table is printed from the kept file)."""
    names = {"P": "promoted", "R": "rolled back", "N": "no verdict"}
    return Cell(d["kind"], d["total_rate"], d["share"], d["carry"], [
        Outcome(names[o], float(t), b, w) for o, t, b, w in
        zip(d["outcome"], d["seconds"], d["bad_served"], d["weight_reached"], strict=True)])


HEADER = ("| pass side counts | total req/s | bad share | releases | rolled back | promoted | "
          "no verdict | handed > 5 % | time to outcome: median / p95 | bad answers served: "
          "median / p95 |\n|---|---|---|---|---|---|---|---|---|---|")

#: (kind, bad share): healthy (none over; 0.2 % errors), at p1 (5 % over; 5 % errors), gross.
SCENARIOS = (("latency", 0.0), ("latency", 0.05), ("latency", 1.0),
             ("errors", 0.002), ("errors", 0.05), ("errors", 1.0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--releases", type=int, default=1000, help="releases per cell")
    p.add_argument("--interval", type=float, default=60.0, help="analysis interval, seconds")
    p.add_argument("--rates", type=float, nargs="+", default=[4.0, 1.0],
                   help="total request rates (the canary gets its step's share)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write every release's outcome here")
    p.add_argument("--table-from", type=Path,
                   help="print the table of a file --json wrote (no simulation)")
    args = p.parse_args(argv)
    if args.table_from:
        kept = json.loads(args.table_from.read_text())
        print(f"a look every {kept['interval']:g} s and at the pause's end")
        print(HEADER)
        for d in kept["cells"]:
            print(summary(from_raw(d)))
        return 0
    started = time.monotonic()
    cells = []
    for i, (kind, share) in enumerate(SCENARIOS):
        for j, total_rate in enumerate(args.rates):
            for carry in (True, False):
                rng = np.random.default_rng(args.seed + 100 * i + j)
                cells.append(Cell(kind, total_rate, share, carry, [
                    release(rng, total_rate, share, kind == "latency", args.interval, carry)
                    for _ in range(args.releases)]))
    print(f"steps {'/'.join(map(str, WEIGHTS))} % with pause 30s, a look every "
          f"{args.interval:g} s and at the pause's end; {args.releases} releases per cell")
    print(HEADER)
    for c in cells:
        print(summary(c))
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"interval": args.interval,
                                         "cells": [raw(c) for c in cells]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
