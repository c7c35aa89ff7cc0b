"""Bounded reads of answers from servers a tenant chose: a byte cap, JSON that cannot crash us,
and text that is safe to copy into a status.

A Prometheus address and the evaluation's model Services are named in a rollout's spec, so their
answers are untrusted input to a process that serves every rollout.  Read whole, one 300 MiB answer
took the operator past its memory limit; parsed without care, a JSON document nested ten thousand
deep raised RecursionError out of the reconcile.  Every body the operator reads from such a server
goes through :func:`read_capped` and :func:`loads`, and every piece of reply text that reaches a
status or an Event goes through :func:`sanitize`.

The whole-request deadline (``asyncio.timeout`` around sending *and* reading) is the callers': an
httpx timeout applies to each read, so a server trickling one byte per second never trips it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

MiB = 1024 * 1024
#: What a status message or an Event may quote from a reply, in characters.
QUOTE_LIMIT = 300


class AnswerTooLarge(Exception):
    """The body passed the byte cap; nothing past the cap was read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit // 1024} KiB")
        self.limit = limit


class MalformedJSON(ValueError):
    """The body is not JSON, or is JSON nested too deep to decode."""


async def read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed response, at most ``limit`` bytes; :class:`AnswerTooLarge` past it.

    A declared ``Content-Length`` over the cap fails before the first read; a body without one
    (chunked) is read chunk by chunk and abandoned as soon as it passes the cap, so memory stays
    at about ``limit`` whatever the server sends."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise AnswerTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def loads(data: bytes, max_depth: int | None = None) -> Any:
    """``json.loads`` whose every failure is :class:`MalformedJSON`: also the RecursionError of a
    deeply nested document, bytes that are not UTF-8, and (with ``max_depth``) a document nested
    deeper than the recursive code that reads it afterwards can follow."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise MalformedJSON("not valid JSON (nested too deep)") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MalformedJSON(f"not valid JSON ({sanitize(e, 120)})") from None
    if max_depth is not None and _depth_exceeds(doc, max_depth):
        raise MalformedJSON(f"JSON nested deeper than {max_depth} levels")
    return doc


def _depth_exceeds(doc: Any, max_depth: int) -> bool:
    """Whether arrays/objects nest deeper than ``max_depth`` (iterative: no recursion to blow)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) \
            else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def sanitize(text: object, limit: int = QUOTE_LIMIT) -> str:
    """``text`` as one printable line of at most ``limit`` characters: control characters
    (newlines, escapes a terminal would run) become spaces, and a longer text is cut with ``…``."""
    s = "".join(c if c.isprintable() else " " for c in str(text)[: limit + 1])
    return s if len(s) <= limit else s[: limit - 1] + "…"
