"""PromQL text building: escaping, the per-revision selector, and custom-query placeholders.

Everything that ends up inside a PromQL string literal goes through :func:`quote` (and, for regex
matchers, :func:`regex_escape` first), so a namespace, rollout or revision name can never close the
string and inject matchers or operators.  Kubernetes names are DNS labels today, but the escaping
does not rely on that: the spec is user input and names reach us through several layers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Go's regexp.QuoteMeta set: exactly the characters RE2 treats as special.  Python's re.escape
# also escapes '-', '#', '&', '~' and whitespace; RE2 accepts a backslash before any punctuation,
# but escaping only what is special keeps the selector readable in status and logs.
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")

# Pod names of a Deployment are <deployment>-<pod-template-hash>-<suffix>; both generated parts
# use Kubernetes' SafeEncodeString alphabet (lower-case consonants and digits), never '-'.  Matching
# exactly two such segments keeps rollout "chat" revision "abc" from also selecting the pods of a
# rollout named "chat-abc" (whose pods have more segments).
_POD_SUFFIX = "-[a-z0-9]+-[a-z0-9]+"
#: The pod pattern of a serving version with no pod in its set (see ``Revision.pods``).
NO_POD = "\\(no pod\\)"

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
PLACEHOLDERS = ("namespace", "name", "revision", "selector", "window")


class PlaceholderError(ValueError):
    """A custom query uses a ``{{placeholder}}`` this operator does not define."""


def regex_escape(text: str) -> str:
    """Escape RE2 metacharacters so ``text`` matches itself literally."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def quote(text: str) -> str:
    """The body of a PromQL double-quoted string (without the quotes) that evaluates to ``text``.

    PromQL strings use Go escapes: a raw newline is a syntax error and ``\\`` / ``"`` must be
    escaped.  Other control characters are written as ``\\u00XX``.
    """
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


@dataclass(frozen=True)
class Revision:
    """One revision of one rollout: what PromQL needs to select its pods."""

    namespace: str
    rollout: str
    revision: str
    #: The pods that serve it, by name, when their names do not say so: a rollout with
    #: adapters, whose serving versions share their template's pods (docs/adapters.md).  Each
    #: set's pods change only while a step's weight is not yet in force, so a window that starts
    #: when the weight was reached counts each pod's traffic for this serving version only.
    pods: tuple[str, ...] | None = None

    @property
    def pod_regex(self) -> str:
        """RE2 pattern (unquoted) matching exactly this revision's pod names."""
        if self.pods is not None:
            # No pod (all moving): a name no pod can have (Kubernetes names hold no parentheses),
            # so the query finds no series, rather than an empty regex matching unlabelled ones.
            return "|".join(regex_escape(p) for p in sorted(self.pods)) or NO_POD
        return regex_escape(f"{self.rollout}-{self.revision}") + _POD_SUFFIX

    @property
    def selector(self) -> str:
        """Label matchers without braces: ``namespace="ns",pod=~"chat-abc-[a-z0-9]+-[a-z0-9]+"``."""
        return f'namespace="{quote(self.namespace)}",pod=~"{quote(self.pod_regex)}"'


def counted_increase(metric: str, sel: str, w: str) -> str:
    """Per series, the events in the window, counting the event that created the series.

    A labelled counter (``finished_reason="error"``, ``status="5xx"``) has no series until its
    first event and appears at 1; ``increase()`` sees 1 → 1 and counts nothing, so the first
    error of every pod went unseen and a 5 % error canary needed a second one to fail.  Series
    with a sample in the hour before the window keep ``increase()``; a series whose first sample
    is inside the window counts its whole value (counters start at 0).  An hour, not the 5 m
    an instant ``offset`` looks back: after a Prometheus or scrape outage of minutes, a series
    is not reborn (its whole life would count as the window's).  ``+ 0`` drops the metric name,
    as ``increase()`` does, so the parts share label sets with each other and with the
    revision's other series."""
    m = f"{metric}{{{sel}}}"
    seen = f"present_over_time({m}[{BORN_LOOKBACK}] offset {w})"
    return f"(increase({m}[{w}]) and {seen} or ({m} unless {seen}) + 0)"


#: How far before a window :func:`counted_increase` looks for a series' earlier samples.
BORN_LOOKBACK = "1h"


def format_window(seconds: float) -> str:
    """A PromQL range duration in whole seconds (``90s``); at least 1s."""
    return f"{max(1, round(seconds))}s"


def substitute(query: str, rev: Revision, window: str) -> str:
    """Fill ``{{namespace}}``, ``{{name}}``, ``{{revision}}``, ``{{selector}}``, ``{{window}}``.

    ``namespace``/``name``/``revision`` are escaped for a double-quoted string (write them inside
    quotes); ``selector`` is complete matchers (write it inside braces); ``window`` is a duration
    (write it inside brackets).  An unknown placeholder raises :class:`PlaceholderError` rather
    than reaching Prometheus as a confusing parse error.
    """
    values = {
        "namespace": quote(rev.namespace),
        "name": quote(rev.rollout),
        "revision": quote(rev.revision),
        "selector": rev.selector,
        "window": window,
    }
    unknown = sorted({m.group(1) for m in _PLACEHOLDER.finditer(query)} - values.keys())
    if unknown:
        raise PlaceholderError(
            f"unknown placeholder(s) {', '.join('{{' + u + '}}' for u in unknown)}; "
            f"available: {', '.join('{{' + p + '}}' for p in PLACEHOLDERS)}"
        )
    # One pass with a function: a substituted value containing "{{x}}" is never re-expanded.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], query)
