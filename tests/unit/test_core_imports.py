"""The pure core imports only what is on this list (issue 29): the forbidden-modules contract in
pyproject.toml names what it may not import, so a module nobody thought to forbid (``shutil``,
``urllib``, ``threading``, a new client library) would pass it. This is the allow-list: the
core's own modules, the API models, and standard-library modules that do no I/O and read no clock.
(``datetime`` is allowed for its types and arithmetic; the clock is passed in as ``now``, and the
test below checks that nothing in core calls ``datetime.now`` or ``time``.)"""

from __future__ import annotations

import ast
from pathlib import Path

import inference_rollout

CORE = Path(inference_rollout.__file__).parent / "core"
ALLOWED = frozenset({
    "__future__", "typing", "dataclasses", "collections", "collections.abc", "enum", "math",
    "re", "json", "hashlib", "datetime", "functools", "itertools", "bisect", "statistics",
    "fractions", "decimal", "abc", "pydantic",
})


def imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                out.append((node.lineno, node.module or ""))
            elif node.level == 2 and not (node.module or "").startswith("api"):
                out.append((node.lineno, f"..{node.module}"))  # a sibling layer of core
    return out


def test_core_imports_only_the_allow_list() -> None:
    found = [f"{p.name}:{line}: {mod}" for p in sorted(CORE.glob("*.py"))
             for line, mod in imports(p) if mod not in ALLOWED]
    assert not found, "core imports outside its allow-list:\n" + "\n".join(found)


def test_core_never_reads_the_clock() -> None:
    calls = [f"{p.name}:{n.lineno}" for p in sorted(CORE.glob("*.py"))
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Attribute) and n.attr in ("now", "utcnow", "today")
             and isinstance(n.value, ast.Name) and n.value.id in ("datetime", "date")]
    assert not calls, calls
