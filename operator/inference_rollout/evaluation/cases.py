"""The evaluation cases: one JSON object per line of the ConfigMap's key (JSONL).

Each line has ``prompt`` (a string, sent as one user message) or ``messages`` (OpenAI chat
messages, sent as they are), and a ``scorer`` (default ``exact``): ``exact``, ``contains`` and
``regex`` need ``expected`` (a string); ``json-valid`` needs nothing more; ``json-schema`` needs
``schema`` (see :mod:`.scorers` for the subset).  Optional ``maxTokens`` (default 256).  Blank
lines and lines starting with ``#`` are skipped.  A bad line is an error naming its number.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ..bounded_http import MalformedJSON, loads
from .scorers import SCORERS, compile_regex, schema_problems

DEFAULT_MAX_TOKENS = 256
#: How deep a case line may nest: a schema is checked by recursive code (and real schemas and
#: chat messages are a few levels deep).
MAX_CASE_DEPTH = 32
_KEYS = frozenset({"prompt", "messages", "expected", "scorer", "schema", "maxTokens", "id"})
#: Regular expressions one case list may hold (each is compiled when the list is read: at most
#: about 0.05 s each, see scorers.MAX_REGEX_MEMORY). As many as the largest sample.
MAX_REGEX_CASES = 1000


class CasesError(ValueError):
    """The cases cannot be used; the message names the ConfigMap line."""


@dataclass(frozen=True)
class Case:
    line: int
    messages: tuple[dict[str, Any], ...]
    scorer: str
    expected: str | None = None
    schema: dict[str, Any] | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS


def _case(line: int, doc: Any) -> Case:
    def bad(why: str) -> CasesError:
        return CasesError(f"line {line}: {why}")

    if not isinstance(doc, dict):
        raise bad("must be a JSON object")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise bad(f"unknown fields {unknown} (known: {sorted(_KEYS)})")
    if ("prompt" in doc) == ("messages" in doc):
        raise bad('set exactly one of "prompt" (a string) or "messages" (chat messages)')
    if "prompt" in doc:
        if not isinstance(doc["prompt"], str) or not doc["prompt"]:
            raise bad('"prompt" must be a non-empty string')
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": doc["prompt"]},)
    else:
        msgs = doc["messages"]
        if not (isinstance(msgs, list) and msgs and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
                for m in msgs)):
            raise bad('"messages" must be a non-empty list of {"role", "content"} objects')
        messages = tuple(msgs)
    scorer = doc.get("scorer", "exact")
    if scorer not in SCORERS:
        raise bad(f'"scorer" {scorer!r} is not one of {", ".join(SCORERS)}')
    expected = doc.get("expected")
    if scorer in ("exact", "contains", "regex"):
        if not isinstance(expected, str):
            raise bad(f'scorer {scorer} needs "expected" (a string)')
        if scorer == "regex":
            try:
                compile_regex(expected)
            except ValueError as e:
                raise bad(f'"expected" is not a valid RE2 regular expression: {e}') from None
    schema = doc.get("schema")
    if scorer == "json-schema":
        if schema is None:
            raise bad('scorer json-schema needs "schema"')
        problems = schema_problems(schema)
        if problems:
            raise bad("; ".join(problems))
    max_tokens = doc.get("maxTokens", DEFAULT_MAX_TOKENS)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise bad('"maxTokens" must be a positive integer')
    return Case(line, messages, scorer, expected if isinstance(expected, str) else None,
                schema if isinstance(schema, dict) else None, max_tokens)


def parse_cases(text: str, sample_size: int | None = None) -> list[Case]:
    """The first ``sample_size`` cases of ``text`` (deterministic: file order).  Every line is
    checked, also those beyond the sample, so a broken set is reported before it is needed.
    Read once per content: the same ConfigMap comes back at every evaluation, and checking its
    patterns is the costly part (the reconciler calls this off the event loop)."""
    cases, refusal = _parse_cases(text, sample_size)
    if refusal is not None:
        raise CasesError(refusal)
    return list(cases)


@functools.lru_cache(maxsize=8)
def _parse_cases(text: str, sample_size: int | None) -> tuple[tuple[Case, ...], str | None]:
    """(cases, None) or ((), why): a refusal is remembered too, or a list that fails late
    would have its patterns compiled again at every evaluation."""
    try:
        return _read_cases(text, sample_size), None
    except CasesError as e:
        return (), str(e)


def _read_cases(text: str, sample_size: int | None) -> tuple[Case, ...]:
    cases: list[Case] = []
    patterns = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            doc = loads(line.encode(), max_depth=MAX_CASE_DEPTH)
        except MalformedJSON as e:
            raise CasesError(f"line {number}: {e}") from None
        if isinstance(doc, dict) and doc.get("scorer") == "regex":
            patterns += 1
            if patterns > MAX_REGEX_CASES:
                raise CasesError(f"line {number}: more than {MAX_REGEX_CASES} regex cases; "
                                 "a case list may hold at most that many")
        cases.append(_case(number, doc))
    if not cases:
        raise CasesError("no cases (one JSON object per line)")
    return tuple(cases if sample_size is None else cases[:sample_size])
