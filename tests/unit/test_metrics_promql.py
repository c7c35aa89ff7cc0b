"""Escaping and placeholders: no name can break out of a PromQL string or regex."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_rollout.metrics.promql import (
    NO_POD,
    PlaceholderError,
    Revision,
    format_window,
    quote,
    regex_escape,
    substitute,
)

HOSTILE = ['a"b', "a\\b", "trailing\\", ".*", 'x",pod=~".+', '"} or vector(1) or {a="', "l\ni\tne",
           "(a|b)[c]{2}^$?+", "\x00\x1f\x7f", "ünï©ødé"]


@given(st.text())
def test_quote_round_trips_as_a_go_string(text: str) -> None:
    # PromQL strings use Go escapes; the ones quote() emits are a subset JSON shares.
    body = quote(text)
    assert json.loads(f'"{body}"') == text
    # No unescaped quote and no raw newline: the literal cannot end early.
    assert not re.search(r'(?<!\\)(\\\\)*"', body)
    assert "\n" not in body


@given(st.text())
def test_regex_escape_matches_only_itself(text: str) -> None:
    pattern = regex_escape(text)
    assert re.fullmatch(pattern, text, flags=re.DOTALL)
    if text:
        assert not re.fullmatch(pattern, text + "x", flags=re.DOTALL)


def test_regex_escape_touches_only_re2_metacharacters() -> None:
    assert regex_escape("chat-v1_2") == "chat-v1_2"  # '-' and '_' stay readable
    assert regex_escape(".*+?()|[]{}^$\\") == "\\.\\*\\+\\?\\(\\)\\|\\[\\]\\{\\}\\^\\$\\\\"


def test_selector_of_a_revision() -> None:
    rev = Revision("prod", "chat", "7d9f8c6b5")
    assert rev.selector == 'namespace="prod",pod=~"chat-7d9f8c6b5-[a-z0-9]+-[a-z0-9]+"'


def test_pod_regex_selects_only_this_revisions_pods() -> None:
    rx = Revision("prod", "chat", "abc").pod_regex
    assert re.fullmatch(rx, "chat-abc-7c9f6d5b8-x2k9q")
    assert not re.fullmatch(rx, "chat-abc-def-7c9f6d5b8-x2k9q")  # rollout "chat-abc", rev "def"
    assert not re.fullmatch(rx, "chat-abcd-7c9f6d5b8-x2k9q")  # another revision
    assert not re.fullmatch(rx, "xchat-abc-7c9f6d5b8-x2k9q")


def test_named_pods_select_exactly_those_pods() -> None:
    """A serving version of a rollout with adapters names its pods (their names are the
    template's, shared with the other serving version)."""
    rx = Revision("prod", "chat", "a1a1a1a1a1", pods=("chat-abc-7c9f6d5b8-x2k9q",
                                                     "chat-abc-7c9f6d5b8-pp4zz")).pod_regex
    assert re.fullmatch(rx, "chat-abc-7c9f6d5b8-x2k9q")
    assert re.fullmatch(rx, "chat-abc-7c9f6d5b8-pp4zz")
    assert not re.fullmatch(rx, "chat-abc-7c9f6d5b8-x2k9")  # a prefix of one
    assert not re.fullmatch(rx, "chat-abc-7c9f6d5b8-x2k9qq")
    assert not re.fullmatch(rx, "chat-abc-7c9f6d5b8-other")  # the other set's pod


def test_a_serving_version_with_no_pod_selects_none_not_unlabelled_series() -> None:
    rx = Revision("prod", "chat", "a1a1a1a1a1", pods=()).pod_regex
    assert rx == NO_POD
    assert not re.fullmatch(rx, "")  # an empty regex would match series without a pod label
    assert not re.fullmatch(rx, "chat-abc-7c9f6d5b8-x2k9q")


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_pod_names_stay_inside_their_string(hostile: str) -> None:
    rev = Revision("prod", "chat", "a1a1a1a1a1", pods=(hostile, "chat-x-y-z"))
    m = re.fullmatch(r'namespace="prod",pod=~"((?:[^"\\]|\\.)*)"', rev.selector,
                     flags=re.DOTALL)
    assert m is not None, rev.selector
    pod_regex = json.loads(f'"{m.group(1)}"')
    assert re.fullmatch(pod_regex, hostile, flags=re.DOTALL)
    assert not re.fullmatch(pod_regex, "chat-x-y", flags=re.DOTALL)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_stay_inside_their_strings(hostile: str) -> None:
    rev = Revision(hostile, hostile, hostile)
    # Exactly two matchers, each a single well-formed string: parse the selector back.
    m = re.fullmatch(r'namespace="((?:[^"\\]|\\.)*)",pod=~"((?:[^"\\]|\\.)*)"', rev.selector,
                     flags=re.DOTALL)
    assert m is not None, rev.selector
    namespace, pod_regex = (json.loads(f'"{g}"') for g in m.groups())
    assert namespace == hostile
    assert re.fullmatch(pod_regex, f"{hostile}-{hostile}-abc-def", flags=re.DOTALL)
    assert not re.fullmatch(pod_regex, "chat-7d9f8c6b5-abc-def")


def test_substitute_every_placeholder() -> None:
    rev = Revision("prod", "chat", "7d9f8c6b5")
    q = ('sum(rate(x{{{selector}}}[{{window}}])) / '
         'sum(y{namespace="{{ namespace }}",rollout="{{name}}",rev="{{revision}}"})')
    assert substitute(q, rev, "60s") == (
        'sum(rate(x{namespace="prod",pod=~"chat-7d9f8c6b5-[a-z0-9]+-[a-z0-9]+"}[60s])) / '
        'sum(y{namespace="prod",rollout="chat",rev="7d9f8c6b5"})'
    )


def test_substitute_escapes_values_and_never_re_expands() -> None:
    rev = Revision('a"b', "{{selector}}", "r\\")
    out = substitute('x{n="{{namespace}}",m="{{name}}",r="{{revision}}"}', rev, "5s")
    assert out == 'x{n="a\\"b",m="{{selector}}",r="r\\\\"}'


def test_unknown_placeholder_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(PlaceholderError, match=r"\{\{pod\}\}.*\{\{selector\}\}"):
        substitute('x{pod="{{pod}}"}', Revision("a", "b", "c"), "5s")


def test_format_window_whole_seconds() -> None:
    assert format_window(60) == "60s"
    assert format_window(89.6) == "90s"
    assert format_window(0.2) == "1s"
