"""Namespace confinement of PromQL: every vector selector gets ``namespace="<the rollout's>"``.

Why: one Prometheus usually holds every namespace's metrics, and a custom ``query`` is sent as the
tenant wrote it, so without this a tenant could read another namespace's numbers into its own
status and Events.  With the operator setting ``--confine-queries`` every selector of every query
is confined before it is sent.

How: the query is parsed by a real PromQL parser (``promql-parser``, the Rust parser of GreptimeDB
exposed to Python), never matched as a string.  In each selector (in each ``or`` group of its
matchers):

* no ``namespace`` matcher: ``namespace="<ns>"`` is added;
* ``namespace="<ns>"``: kept;
* ``namespace="<another>"``: rejected (:class:`ConfinementError`), a query that can only mean
  another namespace;
* ``namespace=~…``, ``!=``, ``!~``: kept, and ``namespace="<ns>"`` added beside it: matchers are
  ANDed, so ``namespace=~".*"`` reads only ``<ns>`` (and ``{__name__=~".+"}`` only ``<ns>``'s
  series).

A query whose every selector already carries ``namespace="<ns>"`` (the built-in templates, and any
custom query written with ``{{selector}}`` or ``namespace="{{namespace}}"``) is sent exactly as
written.  Otherwise the confined query is printed from the syntax tree by :func:`render` here, not
by the library (its printer drops string escapes and turns ``x[5m:]`` into ``x[5m]``), and parsed
again to check that every selector of what is sent is confined.  Functions that read series the
query does not select (``info``) are rejected.

Bounds: the parser is a native extension that holds the event loop (and the GIL) while it runs,
takes time quadratic in the nesting (0.35-0.6 s for 2000 nested unary minuses) and overflows its
stack (a segfault of the whole operator) at about 8000 levels; its ``walk`` is slower still
(cubic: 400 nested parentheses took 5 s).  So a query to confine is at most
:data:`MAX_QUERY_LENGTH` characters with at most :data:`MAX_OPERATORS` brackets and operators --
arithmetic, comparison and word operators -- outside its strings and comments (counted before
parsing), the tree is walked here
(iteratively), and answers -- refusals included -- are cached: the same queries come back every
analysis interval.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import promql_parser as pp

from .promql import quote

NAMESPACE = "namespace"
#: The longest query (after placeholders are filled) this module parses; see "Bounds" above.
MAX_QUERY_LENGTH = 16384  # the error-rate template: ~3,500 with a 60-character selector
#: Brackets and operator symbols outside strings and comments: what the parser's time grows with.
MAX_OPERATORS = 200
_OPERATOR_CHARS = frozenset("([{-+*/%^")
#: Binary operators written as words (PromQL's set operators, and atan2).
_WORD_OPERATORS = frozenset({"and", "or", "unless", "atan2"})
#: What one range or subquery may ask of the shared Prometheus (:func:`_check_cost`).
MAX_RANGE = timedelta(days=31)
MIN_SUBQUERY_STEP = timedelta(seconds=1)
MAX_SUBQUERY_POINTS = 11_000
#: Functions that read series other than their arguments' (info() joins target_info series of any
#: namespace by instance/job): no confinement of selectors can bound them.
UNCONFINABLE_FUNCTIONS = frozenset({"info"})
_IDENTIFIER = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


class ConfinementError(ValueError):
    """The query cannot be confined to the namespace; the message says why and what to write."""


def confine(query: str, namespace: str) -> str:
    """``query`` with every vector selector confined to ``namespace`` (see the module doc)."""
    confined, refusal = _confine_cached(query, namespace)
    if refusal is not None:
        raise ConfinementError(refusal)
    assert confined is not None
    return confined


@functools.lru_cache(maxsize=1024)
def _confine_cached(query: str, namespace: str) -> tuple[str | None, str | None]:
    try:
        return _confine(query, namespace), None
    except ConfinementError as e:
        return None, str(e)


def _confine(query: str, namespace: str) -> str:
    if len(query) > MAX_QUERY_LENGTH:
        raise ConfinementError(f"the query is {len(query)} characters long; queries are confined "
                               f"to a namespace only up to {MAX_QUERY_LENGTH}")
    if _operators(query) > MAX_OPERATORS:
        raise ConfinementError(f"the query has more than {MAX_OPERATORS} brackets and operators "
                               "(comparisons and and/or/unless included); "
                               "queries that large are not confined (split it into metrics)")
    tree = _parse(query, "the query does not parse as PromQL")
    if not _check(tree, namespace):
        return query
    try:
        confined = render(tree, namespace)
    except RecursionError:
        raise ConfinementError("the query is nested too deep to confine") from None
    again = _parse(confined, "the confined query does not parse")  # never send what we cannot check
    if _check(again, namespace):
        raise ConfinementError(f"the confined query is not confined: {confined[:200]}")
    return confined


def _operators(query: str) -> int:
    """The operators of a query, counted as PromQL's lexer reads it (outside string literals --
    "…" and '…' with backslash escapes, `…` raw -- and ``#`` comments): brackets, arithmetic,
    comparisons (``>``, ``<``, ``>=``, ``<=``, ``==``, and ``!=`` outside a selector's braces)
    and the word operators ``and``, ``or``, ``unless``, ``atan2``. Each makes the parser nest
    once more: 12 KB of chained ``>`` alone overflowed its stack and killed the operator, when
    only brackets and arithmetic were counted (issue 29)."""
    count, i, n, braces = 0, 0, len(query), 0
    while i < n:
        c = query[i]
        if c in "\"'`":
            i += 1
            while i < n and query[i] != c:
                i += 2 if query[i] == "\\" and c != "`" else 1
        elif c == "#":
            while i < n and query[i] != "\n":
                i += 1
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (query[j].isalnum() or query[j] in "_:"):
                j += 1
            if braces == 0 and query[i:j].lower() in _WORD_OPERATORS:
                count += 1
            i = j
            continue
        elif c in _OPERATOR_CHARS:
            count += 1
            braces += c == "{"
        elif c == "}":
            braces = max(0, braces - 1)
        elif c in "<>":
            count += 1
        elif c in "=!" and query[i + 1:i + 2] == "=" and braces == 0:
            count += 1
            i += 1
        i += 1
    return count


def _parse(query: str, why: str) -> Any:
    try:
        return pp.parse(query)
    except ValueError as e:  # a syntax error
        raise ConfinementError(f"{why}: {str(e)[:200]}") from None
    except BaseException as e:  # a panic inside the parser (pyo3's PanicException)
        if type(e).__name__ != "PanicException":
            raise
        raise ConfinementError(f"{why}: the parser failed ({str(e)[:120]})") from None


def _nodes(tree: Any) -> Iterator[Any]:
    """Every node of the tree, iteratively (``promql_parser.walk`` is cubic in the depth)."""
    stack = [tree]
    while stack:
        e = stack.pop()
        yield e
        if isinstance(e, pp.BinaryExpr):
            stack += [e.lhs, e.rhs]
        elif isinstance(e, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
            stack.append(e.expr)
        elif isinstance(e, pp.AggregateExpr):
            stack += [x for x in (e.param, e.expr) if x is not None]
        elif isinstance(e, pp.Call):
            stack += list(e.args)
        elif isinstance(e, pp.MatrixSelector):
            stack.append(e.vector_selector)


def _groups(m: pp.Matchers) -> list[list[pp.Matcher]]:
    """The matcher groups ORed in a selector (one group without ``or``)."""
    if m.or_matchers and m.matchers:
        raise ConfinementError(f"selector {m} mixes plain and 'or' matchers; write one group each")
    return [list(g) for g in m.or_matchers] if m.or_matchers else [list(m.matchers)]


def _check(tree: Any, namespace: str) -> bool:
    """Whether some selector lacks ``namespace="<ns>"``; raises for what cannot be confined."""
    missing = False
    for e in _nodes(tree):
        if isinstance(e, pp.Call) and e.func.name in UNCONFINABLE_FUNCTIONS:
            raise ConfinementError(f"{e.func.name}() reads series of every namespace; it cannot "
                                   "be used while the operator confines queries")
        if isinstance(e, pp.SubqueryExpr | pp.MatrixSelector):
            _check_cost(e)
        if isinstance(e, pp.VectorSelector):
            for group in _groups(e.matchers):
                equal = [m.value for m in group if m.name == NAMESPACE and _is(m, "Equal")]
                other = sorted({v for v in equal if v != namespace})
                if other:
                    raise ConfinementError(
                        f'a selector asks for namespace="{other[0]}"; this rollout may read only '
                        f'namespace "{namespace}": write namespace="{{{{namespace}}}}" or use '
                        "{{selector}}")
                missing = missing or not equal
    return missing


def _check_cost(e: Any) -> None:
    """A range or subquery the shared Prometheus can answer within reason: a confined but costly
    ``[30d:1ms]`` kept it busy after both timeouts had given up on the answer (issue 29)."""
    if e.range is not None and e.range > MAX_RANGE:
        raise ConfinementError(f"a range of {_duration(e.range)}; at most "
                               f"{_duration(MAX_RANGE)}")
    if isinstance(e, pp.SubqueryExpr) and e.range is not None:
        step = e.step or MIN_SUBQUERY_STEP  # no step: Prometheus' evaluation interval
        if step < MIN_SUBQUERY_STEP or e.range / step > MAX_SUBQUERY_POINTS:
            raise ConfinementError(
                f"the subquery [{_duration(e.range)}:{_duration(step)}] evaluates "
                f"{e.range / step:,.0f} points; at most {MAX_SUBQUERY_POINTS:,}, each step at "
                f"least {_duration(MIN_SUBQUERY_STEP)} (Prometheus' own limit for a range query)")


def _is(m: pp.Matcher, op: str) -> bool:
    return bool(m.op == getattr(pp.MatchOp, op))


# --- printing -----------------------------------------------------------------------------------


def render(e: Any, namespace: str | None = None) -> str:
    """PromQL text for the tree ``e``; with ``namespace``, each selector group that lacks
    ``namespace="<ns>"`` gets it.  Every operand is parenthesised, so no precedence is lost."""
    r: Callable[[Any], str] = lambda x: render(x, namespace)  # noqa: E731
    if isinstance(e, pp.VectorSelector):
        return _selector(e, namespace) + _at_offset(e.at, e.offset)
    if isinstance(e, pp.MatrixSelector):
        vs = e.vector_selector
        return f"{_selector(vs, namespace)}[{_duration(e.range)}]" + _at_offset(vs.at, vs.offset)
    if isinstance(e, pp.SubqueryExpr):
        step = _duration(e.step) if e.step else ""
        if e.range is None:
            raise ConfinementError("a subquery without a range")
        return f"({r(e.expr)})[{_duration(e.range)}:{step}]" + _at_offset(e.at, e.offset)
    if isinstance(e, pp.ParenExpr):
        return f"({r(e.expr)})"
    if isinstance(e, pp.UnaryExpr):
        return f"-({r(e.expr)})"
    if isinstance(e, pp.BinaryExpr):
        return f"({r(e.lhs)}) {e.op}{_bin_modifier(e.modifier)} ({r(e.rhs)})"
    if isinstance(e, pp.AggregateExpr):
        by = ""
        if e.modifier is not None:
            kind = "by" if e.modifier.type == pp.AggModifierType.By else "without"
            by = f" {kind} ({_labels(e.modifier.labels)})"
        args = ([r(e.param)] if e.param is not None else []) + [r(e.expr)]
        return f"{e.op}{by}{' ' if by else ''}({', '.join(args)})"
    if isinstance(e, pp.Call):
        return f"{e.func.name}({', '.join(r(a) for a in e.args)})"
    if isinstance(e, pp.NumberLiteral):
        return _number(e.val)
    if isinstance(e, pp.StringLiteral):
        return f'"{quote(e.val)}"'
    raise ConfinementError(f"unsupported PromQL construct {type(e).__name__}")


def _selector(vs: pp.VectorSelector, namespace: str | None) -> str:
    groups = _groups(vs.matchers)
    if vs.name is not None and not _METRIC_NAME.match(vs.name):
        groups = [[pp.Matcher(pp.MatchOp.Equal, "__name__", vs.name), *g] for g in groups]
    if namespace is not None:
        groups = [g if any(m.name == NAMESPACE and _is(m, "Equal") for m in g)
                  else [*g, pp.Matcher(pp.MatchOp.Equal, NAMESPACE, namespace)] for g in groups]
    name = vs.name if vs.name is not None and _METRIC_NAME.match(vs.name) else ""
    body = " or ".join(",".join(_matcher(m) for m in g) for g in groups)
    return f"{name}{{{body}}}"


_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def _matcher(m: pp.Matcher) -> str:
    op = next(sym for name, sym in _OPS.items() if _is(m, name))
    return f'{_label(m.name)}{op}"{quote(m.value)}"'


def _label(name: str) -> str:
    return name if _IDENTIFIER.match(name) else f'"{quote(name)}"'


def _labels(names: list[str]) -> str:
    return ", ".join(_label(n) for n in names)


def _bin_modifier(mod: pp.BinModifier | None) -> str:
    if mod is None:
        return ""
    fill = mod.fill_values
    if fill is not None and (fill.lhs is not None or fill.rhs is not None):
        raise ConfinementError("fill modifiers of binary operators are not supported")
    out = " bool" if mod.return_bool else ""
    if mod.matching is not None:
        kind = "on" if mod.matching.type == pp.LabelModifierType.Include else "ignoring"
        out += f" {kind} ({_labels(mod.matching.labels)})"
    if mod.card == pp.VectorMatchCardinality.ManyToOne:
        out += f" group_left ({_labels(mod.group_labels or [])})"
    elif mod.card == pp.VectorMatchCardinality.OneToMany:
        out += f" group_right ({_labels(mod.group_labels or [])})"
    return out


def _duration(d: timedelta) -> str:
    text = pp.display_duration(abs(d))
    if pp.parse_duration(text) != abs(d):  # never a rounded duration
        text = f"{round(abs(d).total_seconds() * 1000)}ms"
    return f"-{text}" if d < timedelta(0) else text


def _at_offset(at: pp.AtModifier | None, offset: timedelta | None) -> str:
    out = ""
    if at is not None:
        if at.type == pp.AtModifierType.Start:
            out += " @ start()"
        elif at.type == pp.AtModifierType.End:
            out += " @ end()"
        elif at.at is not None:
            out += f" @ {at.at.timestamp():.3f}"
    if offset is not None and offset:
        out += f" offset {_duration(offset)}"
    return out


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)
