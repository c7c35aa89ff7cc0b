"""Pure scorers: does one reply pass its case?

``exact``
    the reply, stripped of surrounding whitespace, equals ``expected``.
``contains``
    ``expected`` occurs in the reply.
``regex``
    ``expected`` (an RE2 regular expression, https://github.com/google/re2/wiki/Syntax) matches
    somewhere in the reply.  RE2, not Python's ``re``: a pattern is user input run by the operator
    for every tenant, and RE2 matches in time linear in the reply (``^(a+)+$`` took Python 2 s on
    27 characters, doubling per character).  Backreferences and lookarounds, which only a
    backtracking engine can run, are rejected when the cases are read.
``json-valid``
    the whole reply (stripped; a Markdown code fence around it is *not* removed) is one JSON
    document.
``json-schema``
    the reply is JSON and conforms to ``schema``, in the subset this module validates:
    ``type`` (``object``, ``array``, ``string``, ``number``, ``integer``, ``boolean``, ``null``,
    or a list of them), ``required``, ``properties``, ``enum`` and ``items`` (one schema for every
    element).  Other keywords (``minimum``, ``pattern``, ``$ref``, ``anyOf`` …) are rejected when
    the cases are read, so a schema never silently checks less than it says.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from ..bounded_http import MalformedJSON, loads

#: What one pattern may cost. RE2 matches in linear time, but compiling is not free: with RE2's
#: default 8 MiB ``(\\pL|\\pN){300}`` took 0.135 s, and 40 such lines stalled every tenant 14.8 s
#: (issue 29). At 2 MiB it is refused in 9 ms ("pattern too large"), and the largest pattern that
#: compiles takes about 0.05 s. A pattern is also at most this many characters.
MAX_REGEX_MEMORY = 2 << 20
MAX_PATTERN_LENGTH = 4096
#: Compiled patterns kept for scoring (each holds up to MAX_REGEX_MEMORY): a bound on memory.
COMPILED_KEPT = 16

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is returned to the user, not logged by RE2 itself
_RE2_OPTIONS.max_mem = MAX_REGEX_MEMORY


def compile_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 within :data:`MAX_REGEX_MEMORY`; ``ValueError`` saying why
    RE2 cannot run it."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"the pattern is {len(pattern)} characters; at most "
                         f"{MAX_PATTERN_LENGTH}")
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) \
            else str(e)
        if "too large" in why:
            raise ValueError(f"{why}: the compiled pattern would need more than "
                             f"{MAX_REGEX_MEMORY >> 20} MiB (a large repetition of a Unicode "
                             "class such as (\\pL|\\pN){300}); write a smaller one") from None
        raise ValueError(f"{why} (RE2 has no backreferences or "
                         "lookarounds; see https://github.com/google/re2/wiki/Syntax)") from None


#: Scoring compiles each pattern once while it is in use (the cases were checked when read).
_compiled = functools.lru_cache(maxsize=COMPILED_KEPT)(compile_regex)


SCORERS = ("exact", "contains", "regex", "json-valid", "json-schema")
SCHEMA_KEYWORDS = frozenset({"type", "required", "properties", "enum", "items",
                             "title", "description", "$schema"})
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "number": (int, float),
    "integer": (int,), "boolean": (bool,), "null": (type(None),),
}


def schema_problems(schema: Any, where: str = "schema") -> list[str]:
    """Why ``schema`` is outside the supported subset (empty when it is inside)."""
    if not isinstance(schema, dict):
        return [f"{where}: must be an object"]
    out = [f"{where}: unsupported keyword {k!r} (supported: type, required, properties, enum, "
           "items)" for k in sorted(schema) if k not in SCHEMA_KEYWORDS]
    t = schema.get("type")
    types = t if isinstance(t, list) else [t] if t is not None else []
    out += [f"{where}.type: unknown type {x!r}" for x in types if x not in _TYPES]
    req = schema.get("required")
    if req is not None and not (isinstance(req, list) and all(isinstance(x, str) for x in req)):
        out.append(f"{where}.required: must be a list of strings")
    if "enum" in schema and not isinstance(schema["enum"], list):
        out.append(f"{where}.enum: must be a list")
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            out.append(f"{where}.properties: must be an object")
        else:
            for name, sub in props.items():
                out += schema_problems(sub, f"{where}.properties.{name}")
    if "items" in schema:
        out += schema_problems(schema["items"], f"{where}.items")
    return out


def _is_type(value: Any, name: str) -> bool:
    if name in ("number", "integer") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> str | None:
    """The first way ``value`` breaks ``schema`` (the supported subset), or None."""
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_is_type(value, x) for x in types):
            return f"{where}: expected {'|'.join(types)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: not one of {schema['enum']}"
    if isinstance(value, dict):
        for name in schema.get("required") or []:
            if name not in value:
                return f"{where}: missing required {name!r}"
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                problem = validate(value[name], sub, f"{where}.{name}")
                if problem:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = validate(item, schema["items"], f"{where}[{i}]")
            if problem:
                return problem
    return None


def score(scorer: str, reply: str, expected: str | None = None,
          schema: dict[str, Any] | None = None) -> bool:
    """Whether ``reply`` passes.  The case was checked when it was read (see
    :func:`inference_rollout.evaluation.cases.parse_cases`), so arguments are present."""
    text = reply.strip()
    if scorer == "exact":
        return text == (expected or "").strip()
    if scorer == "contains":
        return (expected or "") in reply
    if scorer == "regex":
        return _compiled(expected or "").search(reply) is not None
    if scorer in ("json-valid", "json-schema"):
        try:
            doc = loads(text.encode())
        except MalformedJSON:
            return False
        return scorer == "json-valid" or validate(doc, schema or {}) is None
    raise ValueError(f"unknown scorer {scorer!r}")
