"""A throwaway aiohttp server on a loopback port, for the sandbox's own unit tests."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start ``app`` on 127.0.0.1 and a free port; returns its runner (``cleanup()`` it) and URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def echo_reply(request: web.Request, text: str, *, headers: dict[str, str] | None = None,
                     chunk: int = 4, delay: float = 0.001,
                     role_first: bool = False) -> web.StreamResponse:
    """Answer an OpenAI chat completion with ``text``, as llm-d-inference-sim --mode echo does:
    one JSON body, or (``stream``) ``chunk``-character deltas ``delay`` seconds apart, after a
    role-only delta when ``role_first``."""
    headers = headers or {}
    body = await request.json()
    if not body.get("stream"):
        return web.json_response(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]},
            headers=headers)
    resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if role_first:
        await resp.write(b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n')
    for i in range(0, len(text), chunk):
        delta = {"choices": [{"index": 0, "delta": {"content": text[i:i + chunk]}}]}
        await resp.write(f"data: {json.dumps(delta)}\n\n".encode())
        await asyncio.sleep(delay)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
