"""Delivering notices: a bounded queue drained by a few worker tasks, so a slow or dead
receiver never delays a reconcile (``offer`` never awaits and never raises).

* **Where.**  A Secret in the rollout's namespace: the one ``spec.notifications.secretRef`` names,
  else the namespace's notification Secret (``--notify-secret``, conventionally
  ``inference-rollout-notifications``; none by default).  Its key ``webhookURL`` gets the
  generic JSON document, ``slackURL`` the Slack-compatible message; either or both.  A URL is
  a credential (a Slack webhook URL is one): read when sending, never logged, never copied into
  a status.
* **Which addresses.**  With ``--notify-allow`` (repeatable base URLs, compared as
  ``--prometheus-allow`` compares them) only URLs below an entry; without it only hosts whose
  every address is public, so a tenant's Secret cannot make the operator POST into the cluster
  network, its loopback or a cloud metadata address.  Redirects are never followed.
* **Retries.**  A transport error, a timeout, 408, 429 or 5xx is retried with exponential backoff
  (1 s, 2 s, 4 s … at most 60 s between attempts, 6 attempts); other answers are final.
* **Bounded.**  At most ``queue_size`` notices wait.  When the queue is full a rollback evicts
  the oldest notice that is not one; other notices are dropped (counted and logged).  A rollback
  is thus lost only if the queue is full of rollbacks -- and it is recorded in the rollout's
  status and Events before it is offered here either way.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import httpx

from .. import operator_metrics
from ..addresses import address_allowed, public_host
from ..bounded_http import sanitize
from ..core.notices import Notice
from ..kube import Kube, KubeError
from ..paths import ns_path
from .messages import Outgoing, slack_payload, webhook_payload

log = logging.getLogger("inference_rollout.notify")

#: The conventional name of the namespace-wide Secret (docs/notifications.md).
DEFAULT_SECRET = "inference-rollout-notifications"
#: The Secret's keys, and the message format each one gets.
FORMATS: dict[str, Callable[[Outgoing], dict[str, Any]]] = {
    "webhookURL": webhook_payload, "slackURL": slack_payload}
RETRIED_STATUSES = frozenset({408, 425, 429})

Result = Literal["sent", "failed", "refused", "dropped", "no-endpoint"]


@dataclass(frozen=True)
class Settings:
    allow: tuple[str, ...] = ()
    namespace_secret: str | None = None
    queue_size: int = 256
    workers: int = 2
    attempts: int = 6
    first_delay: float = 1.0
    max_delay: float = 60.0
    timeout: float = 10.0


@dataclass(frozen=True)
class Queued:
    outgoing: Outgoing
    secret: str | None  # spec.notifications.secretRef.name, None: the namespace's Secret


@dataclass
class Notifier:
    """The operator's notifier (one per process); the CLI uses :meth:`deliver` directly."""

    kube: Kube
    settings: Settings = field(default_factory=Settings)
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    _queue: deque[Queued] = field(default_factory=deque)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _client: httpx.AsyncClient | None = None
    _sending: int = 0  # notices taken off the queue and not yet delivered (or given up)

    def offer(self, namespace: str, name: str, secret: str | None,
              events: Sequence[str] | None, notices: Sequence[Notice]) -> None:
        """Queue the notices the rollout wants; returns at once (called inside a reconcile)."""
        if secret is None and self.settings.namespace_secret is None:
            return  # nowhere to send them: the operator runs without notifications
        for notice in notices:
            if events is not None and notice.kind not in events:
                continue
            item = Queued(Outgoing(namespace, name, notice, self.now()), secret)
            if len(self._queue) >= self.settings.queue_size and not self._evict_for(item):
                _count(notice, "dropped")
                log.warning("%s/%s: notification queue full, %s notice dropped", namespace,
                            name, notice.kind)
                continue
            self._queue.append(item)
        if self._queue:
            self._start_workers()
            self._ready.set()

    def _evict_for(self, item: Queued) -> bool:
        """Make room for a rollback by dropping the oldest notice that is not one."""
        if not item.outgoing.notice.rolled_back:
            return False
        for old in self._queue:
            if not old.outgoing.notice.rolled_back:
                self._queue.remove(old)
                _count(old.outgoing.notice, "dropped")
                return True
        return False

    def _start_workers(self) -> None:
        self._workers = [w for w in self._workers if not w.done()]
        while len(self._workers) < self.settings.workers:
            self._workers.append(asyncio.create_task(self._work()))

    async def _work(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            item = self._queue.popleft()
            self._sending += 1
            try:
                await self.deliver(item.outgoing, item.secret)
            except Exception:  # a worker must outlive any one notice
                log.exception("notification for %s/%s failed", item.outgoing.namespace,
                              item.outgoing.name)
            finally:
                self._sending -= 1

    def pending(self) -> int:
        """Notices queued or being sent."""
        return len(self._queue) + self._sending

    async def aclose(self, drain_seconds: float = 0.0) -> None:
        """Stop the workers, after giving queued notices up to ``drain_seconds`` to go out."""
        deadline = asyncio.get_running_loop().time() + drain_seconds
        while self.pending() and self._workers and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def deliver(self, out: Outgoing, secret: str | None) -> dict[str, Result]:
        """Send one notice to every endpoint of its Secret, with retries; the result per key."""
        endpoints = await self._endpoints(out.namespace, secret)
        if not endpoints:
            _count(out.notice, "no-endpoint")
            return {}
        results = await asyncio.gather(*(self._send(out, key, url)
                                         for key, url in endpoints.items()))
        return dict(zip(endpoints, results, strict=True))

    async def _endpoints(self, namespace: str, secret: str | None) -> dict[str, str]:
        name = secret or self.settings.namespace_secret
        if name is None:
            return {}
        try:
            body = await self.kube.get(ns_path("", "v1", namespace, "secrets", name))
        except KubeError as e:
            if e.status != 404 or secret is not None:  # a missing namespace default is normal
                log.warning("notifications: Secret %s/%s: %s", namespace, name, e.message)
            return {}
        data = body.get("data") or {}
        out = {}
        for key in FORMATS:
            try:
                url = base64.b64decode(data.get(key, ""), validate=True).decode().strip()
            except (ValueError, TypeError):
                url = ""
            if url:
                out[key] = url
        return out

    async def _permitted(self, url: str) -> bool:
        if self.settings.allow:
            return address_allowed(url, self.settings.allow)
        return await public_host(url)

    async def _send(self, out: Outgoing, key: str, url: str) -> Result:
        where = f"{out.namespace}/{out.name} {out.notice.kind} via {key}"  # never the URL
        if not await self._permitted(url):
            log.warning("notifications: %s refused: the address is not allowed (--notify-allow, "
                        "chart value notifications.allow; without it only public addresses)",
                        where)
            _count(out.notice, "refused")
            return "refused"
        payload = FORMATS[key](out)
        s = self.settings
        for attempt in range(1, s.attempts + 1):
            problem = await self._post(url, payload)
            if problem is None:
                _count(out.notice, "sent")
                log.info("notifications: %s sent (attempt %d)", where, attempt)
                return "sent"
            final = not problem[1]
            log.warning("notifications: %s attempt %d/%d: %s", where, attempt, s.attempts,
                        problem[0])
            if final or attempt == s.attempts:
                break
            await asyncio.sleep(min(s.max_delay, s.first_delay * 2 ** (attempt - 1)))
        _count(out.notice, "failed")
        return "failed"

    async def _post(self, url: str, payload: dict[str, Any]) -> tuple[str, bool] | None:
        """None when delivered; else what went wrong and whether it is worth retrying."""
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        try:
            async with asyncio.timeout(self.settings.timeout):
                # Streamed and never read: only the status code matters, whatever the body's size.
                async with self._client.stream("POST", url, json=payload) as resp:
                    status = resp.status_code
        except (httpx.TransportError, TimeoutError) as e:
            return sanitize(f"{type(e).__name__}: {e}".replace(url, "<url>"), 200), True
        if 200 <= status < 300:
            return None
        return f"HTTP {status}", status >= 500 or status in RETRIED_STATUSES


def _count(notice: Notice, result: Result) -> None:
    operator_metrics.REGISTRY.inc("inference_rollout_notifications_total", kind=notice.kind,
                                  result=result)
