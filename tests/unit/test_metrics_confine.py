"""Namespace confinement of PromQL (metrics/confine.py): every selector ends up with the rollout's
namespace, through every construct that holds a selector, and nothing that could read another
namespace is sent.  Each confined query is parsed again here and every selector checked."""

from __future__ import annotations

import time

import promql_parser as pp
import pytest

from inference_rollout.metrics.confine import (
    MAX_OPERATORS,
    MAX_QUERY_LENGTH,
    ConfinementError,
    _nodes,
    confine,
)
from inference_rollout.metrics.promql import Revision, substitute

NS = "team-a"


def selectors(query: str) -> list[list[tuple[str, str, str]]]:
    """Every selector's matcher groups as (name, op, value), the metric name as __name__."""
    out = []
    for e in _nodes(pp.parse(query)):
        if isinstance(e, pp.VectorSelector):
            groups = e.matchers.or_matchers or [e.matchers.matchers]
            out += [[(m.name, str(m.op).rsplit(".", 1)[-1], m.value) for m in g] for g in groups]
    return out


def assert_confined(query: str) -> None:
    groups = selectors(query)
    assert groups, query
    for g in groups:
        assert ("namespace", "Equal", NS) in g, (query, g)
        assert all(v == NS for n, op, v in g if n == "namespace" and op == "Equal"), (query, g)


@pytest.mark.parametrize(("query", "expected"), [
    ("up", 'up{namespace="team-a"}'),
    ('sum(rate(http_requests_total{code=~"5.."}[5m]))',
     'sum(rate(http_requests_total{code=~"5..",namespace="team-a"}[5m]))'),
    # subqueries, with the range and step kept (the library's printer turns x[5m:] into x[5m])
    ("max_over_time(rate(x[1m])[1h:30s])",
     'max_over_time((rate(x{namespace="team-a"}[1m]))[1h:30s])'),
    ("x[5m:]", '(x{namespace="team-a"})[5m:]'),
    # offset (also negative) and @, on selectors, ranges and subqueries
    ("rate(x[5m] offset 1h30m)", 'rate(x{namespace="team-a"}[5m] offset 1h30m)'),
    ("x offset -2m", 'x{namespace="team-a"} offset -2m'),
    ("x @ 1700000000.5 offset 1m", 'x{namespace="team-a"} @ 1700000000.500 offset 1m'),
    ("rate(x[5m])[1h:] @ end()", '(rate(x{namespace="team-a"}[5m]))[1h:] @ end()'),
    ("x @ start()", 'x{namespace="team-a"} @ start()'),
    # functions and aggregations with parameters
    ('histogram_quantile(0.99, sum by (le) (rate(lat_bucket[5m])))',
     'histogram_quantile(0.99, sum by (le) (rate(lat_bucket{namespace="team-a"}[5m])))'),
    ('count_values("v", up)', 'count_values("v", up{namespace="team-a"})'),
    ("topk(3, up)", 'topk(3.0, up{namespace="team-a"})'),
    ('label_replace(up, "namespace", "other", "", "")',
     'label_replace(up{namespace="team-a"}, "namespace", "other", "", "")'),
    ("absent(nothing)", 'absent(nothing{namespace="team-a"})'),
    # binary operators, vector matching, bool, unary minus; precedence kept by parentheses
    ("a / on(pod) group_left(node) b",
     '(a{namespace="team-a"}) / on (pod) group_left (node) (b{namespace="team-a"})'),
    ("a > bool 1", '(a{namespace="team-a"}) > bool (1.0)'),
    ("a unless ignoring(x) b",
     '(a{namespace="team-a"}) unless ignoring (x) (b{namespace="team-a"})'),
    ("-a ^ 2", '-((a{namespace="team-a"}) ^ (2.0))'),
    ("a + b * c",
     '(a{namespace="team-a"}) + ((b{namespace="team-a"}) * (c{namespace="team-a"}))'),
    # strings with escapes survive printing
    ('x{a="q\\"uote\\\\n"}', 'x{a="q\\"uote\\\\n",namespace="team-a"}'),
    # regex and negative matchers on namespace stay, ANDed with the rollout's namespace
    ('up{namespace=~".*"}', 'up{namespace=~".*",namespace="team-a"}'),
    ('up{namespace!="team-a"}', 'up{namespace!="team-a",namespace="team-a"}'),
    ('up{namespace!~"team-a"}', 'up{namespace!~"team-a",namespace="team-a"}'),
    ('{__name__=~".+"}', '{__name__=~".+",namespace="team-a"}'),
    # every 'or' group of a selector
    ('x{a="1" or b="2"}', 'x{a="1",namespace="team-a" or b="2",namespace="team-a"}'),
    # UTF-8 metric and label names are quoted
    ('{"my.metric"}', '{__name__="my.metric",namespace="team-a"}'),
    ('x{"weird.label"="1"}', 'x{"weird.label"="1",namespace="team-a"}'),
])
def test_every_selector_gets_the_namespace(query: str, expected: str) -> None:
    confined = confine(query, NS)
    assert confined == expected
    assert_confined(confined)


@pytest.mark.parametrize("query", [
    'up{namespace="team-a"}',
    'sum(rate(x{namespace="team-a",pod=~"chat-abc-.*"}[5m]))'
    ' / sum(rate(y{namespace="team-a"}[5m]))',
    "vector(1)",
    "time() - 5",
])
def test_a_query_already_confined_is_sent_as_written(query: str) -> None:
    assert confine(query, NS) == query


def test_placeholders_produce_confined_queries_unchanged() -> None:
    rev = Revision(NS, "chat", "abc")
    for text in ('sum(rate(x{ {{selector}} }[{{window}}]))',
                 'sum(rate(x{namespace="{{namespace}}"}[{{window}}]))'):
        query = substitute(text, rev, "60s")
        assert confine(query, NS) == query


@pytest.mark.parametrize(("query", "message"), [
    ('up{namespace="team-b"}', 'asks for namespace="team-b"'),
    ('sum(up{namespace="team-a"}) + sum(up{namespace="kube-system"})',
     'asks for namespace="kube-system"'),
    ('x{a="1" or namespace="team-b"}', 'asks for namespace="team-b"'),
    ("info(up)", r"info\(\) reads series of every namespace"),
    ("sum(rate(x[5m]", "does not parse as PromQL"),
    ("x" * (MAX_QUERY_LENGTH + 1), "characters long"),
    ("-" * (MAX_OPERATORS + 1) + "up", f"more than {MAX_OPERATORS} brackets and operators"),
    ("+".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    # issue 29: 12 KB of chained comparisons overflowed the parser's stack (SIGSEGV: the whole
    # operator, again after every restart); comparisons and word operators count too
    (" > ".join(["up"] * 3000), "brackets and operators"),
    (" >= ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    (" == bool ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    (" != ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    (" and ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    (" OR ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    (" unless ".join(["up"] * (MAX_OPERATORS + 2)), "brackets and operators"),
    # issue 29: confined but costly; kept the shared Prometheus busy after both timeouts
    ("max_over_time(rate(up[5m])[30d:1ms])", r"evaluates 2,592,000,000 points; at most 11,000"),
    ("max_over_time(up[1d:5s])", r"evaluates 17,280 points"),
    ("max_over_time(up[10m:100ms])", r"each step at least 1s"),
    ("rate(up[60d])", r"a range of 60d; at most 31d"),
])
def test_what_cannot_be_confined_is_rejected(query: str, message: str) -> None:
    with pytest.raises(ConfinementError, match=message):
        confine(query, NS)


def test_the_largest_accepted_queries_confine_fast_enough_for_the_event_loop() -> None:
    # The parser holds the event loop, is quadratic in nesting and promql_parser.walk cubic
    # (400 nested parentheses took it 5 s): the bounds and the iterative walk keep the worst
    # accepted query small.
    n = MAX_OPERATORS
    worst = ["-" * n + "up", "(" * n + "up" + ")" * n, "+".join(["up"] * (n + 1)),
             "sum(" * (n // 2) + "up" + ")" * (n // 2), " > ".join(["up"] * (n + 1)),
             " or ".join(["up"] * (n + 1))]
    # CPU time of this thread, not wall time: the claim is about work done while holding the
    # loop, and wall time on a shared 2-core machine at load 18 failed this test with no change.
    # The least of three runs, against a bound far below the defect's seconds: one run under
    # coverage on a busy machine took 0.64 s of CPU (a bound of 0.5 s failed a tier run), while
    # the unbounded parser took 5 s at 400 nested parentheses and grows with their square.
    for query in worst:
        spent = []
        for _ in range(3):
            start = time.thread_time()
            assert_confined(confine(query, NS))
            spent.append(time.thread_time() - start)
        assert min(spent) < 2.0, (query[:20], spent)


def test_ranges_and_subqueries_within_the_bounds_are_confined() -> None:
    for query in ("max_over_time(rate(up[5m])[1h:1m])", "max_over_time(up[3h:1s])",
                  "rate(up[31d])", "max_over_time(up[5m:])"):
        assert_confined(confine(query, NS))


def test_matchers_in_selectors_are_not_operators() -> None:
    """A selector's ``=``, ``!=``, ``=~`` and a label called ``or`` are not operators: the
    built-in templates, dense with matchers, stay far inside the bound."""
    from inference_rollout.metrics.confine import _operators

    assert _operators('x{a="1",b!="2",c=~"3",or="4",unless!~"5"}') == 1  # the brace
    assert _operators("x != y and z > 1") == 3


def test_brackets_in_strings_and_comments_do_not_count() -> None:
    regex = "[a-z]+-" * 100  # 200 brackets and 100 operators, all inside a string
    query = f'sum(x{{pod=~"{regex}"}}) # {"(" * 300}\n + 1'
    assert_confined(confine(query, NS))


def test_a_refusal_is_cached_too() -> None:
    # Refused queries come back every analysis interval: they must not be parsed each time.
    from inference_rollout.metrics.confine import _confine_cached

    query = 'sum(up{namespace="team-b"}) + ' + "0" * 7
    for _ in range(3):
        with pytest.raises(ConfinementError):
            confine(query, NS)
    assert _confine_cached.cache_info().hits >= 2


def test_the_built_in_templates_are_confined_already_and_sent_unchanged() -> None:
    from inference_rollout.metrics.templates import TEMPLATES

    rev = Revision(NS, "chat", "abc123")
    for t in TEMPLATES.values():
        for query in [t.value(rev.selector, "60s")] + (
                [t.samples(rev.selector, "60s")] if t.samples else []):
            assert confine(query, NS) == query
