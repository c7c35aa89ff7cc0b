"""The benchmark tables in docs/, generated from the kept raw results, never typed.

    .venv/bin/python bench/doc_tables.py            # rewrite every marked table from its files
    .venv/bin/python bench/doc_tables.py --check    # exit 1 if a table differs from its files

A table is marked in the markdown by the command that makes it and the files it reads (paths
from the repository's root, shell globs allowed, sorted):

    <!-- table: peers bench/results/2026-12-07-abc1234/peers-*.json -->
    | ... the generated lines ... |
    <!-- /table -->

Kinds: ``peers`` (``python -m bench.peers --table``: the rows of every file pooled, their settings
equal), ``calibration`` (``bench/calibration.py --report``) and ``confirm`` (``bench/confirm.py``:
the simulation's guarantees beside the sandbox's counts).  A unit test runs ``--check``, so a
table edited by hand, or raw results changed without the table, fail the build.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

BLOCK = re.compile(r"(<!-- table: (?P<kind>[a-z-]+) (?P<files>[^>]+?) -->\n)(?P<body>.*?)"
                   r"(<!-- /table -->)", re.S)


def _peers(paths: list[str]) -> str:
    from peers.__main__ import saved_table  # imports the sandbox's client: only when asked
    return "\n".join(saved_table(paths))


def _calibration(paths: list[str]) -> str:
    from calibration import report
    return str(report(paths))


def _confirm(paths: list[str]) -> str:
    from confirm import load, table
    return str(table(*load(paths)))


KINDS: dict[str, Callable[[list[str]], str]] = {
    "peers": _peers, "calibration": _calibration, "confirm": _confirm}


def files_of(pattern_list: str, root: Path = ROOT) -> list[str]:
    """The files a marker names, each glob expanded and sorted; an empty glob is an error (a
    table whose raw results are gone must not pass as generated)."""
    paths: list[str] = []
    for pattern in pattern_list.split():
        found = sorted(str(p) for p in root.glob(pattern))
        if not found:
            raise FileNotFoundError(f"no file matches {pattern!r} (from {root})")
        paths += found
    return paths


def regenerate(text: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """``text`` with every marked table rebuilt, and the markers whose table changed."""
    stale: list[str] = []

    def rebuild(m: re.Match[str]) -> str:
        kind = m["kind"]
        if kind not in KINDS:
            raise ValueError(f"unknown table kind {kind!r} (known: {', '.join(KINDS)})")
        body = KINDS[kind](files_of(m["files"], root)).rstrip("\n") + "\n"
        if body != m["body"]:
            stale.append(f"{kind} {m['files']}")
        return m.group(1) + body + m.group(5)

    return BLOCK.sub(rebuild, text), stale


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 on a stale table")
    p.add_argument("docs", nargs="*", help="markdown files (default: docs/*.md)")
    args = p.parse_args(argv)
    stale_any = False
    for doc in [Path(d) for d in args.docs] or sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        new, stale = regenerate(text)
        for marker in stale:
            stale_any = True
            print(f"{doc}: the table of `{marker}` is not what its files give", file=sys.stderr)
        if stale and not args.check:
            doc.write_text(new)
    if stale_any and args.check:
        print("regenerate with: .venv/bin/python bench/doc_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
