"""Does the sandbox confirm the simulation?

Each guarantee of ``bench/verdicts.py`` (pure, thousands of simulated releases) beside what
``bench/calibration.py`` counted on real parts (Traefik, the sandbox's Prometheus), from the
kept raw files of both (issue 30, item 5).

    .venv/bin/python bench/confirm.py \
        bench/results/<verdicts>*.json bench/results/<calibration>*.json

A row says **consistent** when the sandbox's 95 % Wilson interval holds the simulated proportion,
**not consistent** when it does not (a defect the simulation cannot see: look there first), and
whether the sandbox's count alone is enough to *show* the stated bound (its interval's upper end
under it).  Files are told apart by content: a list of cells is the simulation, a run with
``releases`` is the sandbox.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration import STEPS, wilson

FIRST_SHARE = STEPS[0]["weight"] / 100

Cell = dict[str, Any]
Release = dict[str, Any]


def load(paths: Iterable[str]) -> tuple[list[Cell], list[Release]]:
    """(the simulation's Sequential cells, every sandbox release with its canary rate)."""
    cells: list[Cell] = []
    releases: list[Release] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if isinstance(data, list):
            cells += [c for c in data if c.get("rule") == "Sequential"]
            # late-breakage cells (--late-json): each release ran until its rollback
            cells += [{"kind": "late", "share": None, "releases": len(c["served"]),
                       "promoted": 0, "rolled_back": len(c["served"])}
                      for c in data if "served" in c and c.get("restarts")]
        else:
            rate = round(data["args"]["rate"] * FIRST_SHARE, 3)
            releases += [{**r, "rate": rate} for r in data["releases"]]
    return cells, releases


#: (guarantee, the simulated cells it covers, the sandbox releases that test it, outcome counted,
#: the stated bound on that outcome's proportion)
ROWS: list[tuple[str, Callable[[Cell], bool], Callable[[Release], bool], str, float]] = [
    ("a healthy canary is rolled back (false rollback)",
     lambda c: c["kind"] != "late" and c["share"] <= 0.005,
     lambda r: r["scenario"] == "healthy", "rolled back", 0.01),
    ("a canary with every request bad is promoted",
     lambda c: c["kind"] == "latency" and c["share"] >= 1.0,
     lambda r: r["scenario"] == "gross", "promoted", 0.01),
    ("a canary with 5 % errors (5 × its limit) is promoted",
     lambda c: c["kind"] == "errors" and c["share"] == 0.05,
     lambda r: r["scenario"] == "errors5", "promoted", 0.01),
    ("a canary that turns bad while it runs is promoted",
     lambda c: c["kind"] == "late", lambda r: r["scenario"] == "late", "promoted", 0.01),
]


def table(cells: list[Cell], releases: list[Release]) -> str:
    lines = ["| guarantee | simulated (Sequential cells) | sandbox releases, by canary req/s "
             "| sandbox, 95 % CI | consistent with the simulation? | the sandbox alone shows "
             "≤ the bound? |", "|---|---|---|---|---|---|"]
    for label, sim_of, sandbox_of, outcome, bound in ROWS:
        sim = [c for c in cells if sim_of(c)]
        sim_k = sum(c["rolled_back" if outcome == "rolled back" else outcome] for c in sim)
        sim_n = sum(c["releases"] for c in sim)
        real = [r for r in releases if sandbox_of(r)]
        k, n = sum(r["outcome"] == outcome for r in real), len(real)
        by_rate = ", ".join(f"{sum(r['outcome'] == outcome for r in real if r['rate'] == rate)}/"
                            f"{sum(1 for r in real if r['rate'] == rate)} at {rate:g}"
                            for rate in sorted({r["rate"] for r in real}))
        if n == 0:
            lines.append(f"| {label} | {fmt(sim_k, sim_n)} | not run yet | - | - | - |")
            continue
        lo, hi = wilson(k, n)
        consistent = ("no simulated cell" if not sim_n else
                      "**consistent**" if lo <= sim_k / sim_n <= hi else "**not consistent**")
        shows = (f"yes (≤ {100 * hi:.1f} %)" if hi <= bound
                 else f"not yet: ≤ {100 * hi:.0f} %; ≈ {needed(bound)} clean releases would")
        lines.append(f"| {label} | {fmt(sim_k, sim_n)} | {by_rate} | {k}/{n}: "
                     f"{100 * lo:.0f}–{100 * hi:.0f} % | {consistent} | {shows} |")
    return "\n".join(lines)


def fmt(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f} %)" if n else "no cell"


def needed(bound: float) -> int:
    """Releases with none of the outcome whose Wilson upper end falls under ``bound``."""
    n = 1
    while wilson(0, n)[1] > bound:
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    print(table(*load(paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
