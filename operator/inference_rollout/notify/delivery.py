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
  (1 s, 2 s, 4 s … at most 60 s between attempts, 6 attempts); other answers are final.  A
  worker does one attempt at a time and is free while an endpoint waits for its next one.
* **Fair between namespaces.**  Each namespace has its own queue; workers take from them in
  turn, and a namespace has at most one attempt in flight, so one tenant's webhook that never
  answers (10 s per attempt) holds one worker at a time and never the others' notices.
* **Bounded.**  At most ``queue_size`` notices wait in all.  When that is full, a new notice
  takes the place of the oldest notice that is not a rollback of the namespace with the most
  notices waiting (a rollback may also take one of its own namespace's); else it is dropped
  (counted and logged).  A rollback is recorded in the rollout's status and Events before it is
  offered here either way.
"""

from __future__ import annotations

import asyncio
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
from ..config_objects import Missing, secret_texts
from ..core.notices import Notice
from ..kube_protocol import ObjectReader
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


@dataclass(frozen=True)
class Attempt:
    """One POST of one notice to one endpoint, the ``number``-th."""

    outgoing: Outgoing
    key: str
    url: str
    number: int = 1


@dataclass
class Notifier:
    """The operator's notifier (one per process); the CLI uses :meth:`deliver` directly."""

    kube: ObjectReader
    settings: Settings = field(default_factory=Settings)
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    _queues: dict[str, deque[Queued | Attempt]] = field(default_factory=dict)
    _turns: deque[str] = field(default_factory=deque)  # namespaces in round-robin order
    _busy: set[str] = field(default_factory=set)  # namespaces with an attempt in flight
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _retries: set[asyncio.TimerHandle] = field(default_factory=set)
    _client: httpx.AsyncClient | None = None
    _sending: int = 0  # items taken off a queue and not yet done

    def offer(self, namespace: str, name: str, secret: str | None,
              events: Sequence[str] | None, notices: Sequence[Notice]) -> None:
        """Queue the notices the rollout wants; returns at once (called inside a reconcile)."""
        if secret is None and self.settings.namespace_secret is None:
            return  # nowhere to send them: the operator runs without notifications
        for notice in notices:
            if events is not None and notice.kind not in events:
                continue
            item = Queued(Outgoing(namespace, name, notice, self.now()), secret)
            if self._waiting() >= self.settings.queue_size and not self._evict_for(item):
                _count(notice, "dropped")
                log.warning("%s/%s: notification queue full, %s notice dropped", namespace,
                            name, notice.kind)
                continue
            self._push(namespace, item)
        if self._waiting():
            self._start_workers()

    def queued(self) -> list[Queued | Attempt]:
        """What waits, namespace by namespace (for tests and debugging)."""
        return [item for q in self._queues.values() for item in q]

    def _waiting(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def _push(self, namespace: str, item: Queued | Attempt, first: bool = False) -> None:
        q = self._queues.setdefault(namespace, deque())
        q.appendleft(item) if first else q.append(item)
        if namespace not in self._turns:
            self._turns.append(namespace)
        self._ready.set()

    def _evict_for(self, item: Queued) -> bool:
        """Make room (see the module doc): the fullest namespace gives up its oldest notice that
        is not a rollback, to another namespace's notice or to a rollback."""
        fullest = max(self._queues, key=lambda ns: len(self._queues[ns]), default=None)
        if fullest is None or (fullest == item.outgoing.namespace
                               and not item.outgoing.notice.rolled_back):
            return False
        q = self._queues[fullest]
        for old in q:
            if isinstance(old, Queued) and not old.outgoing.notice.rolled_back:
                q.remove(old)
                _count(old.outgoing.notice, "dropped")
                return True
        return False

    def _start_workers(self) -> None:
        self._workers = [w for w in self._workers if not w.done()]
        while len(self._workers) < self.settings.workers:
            self._workers.append(asyncio.create_task(self._work()))

    def _next(self) -> tuple[str, Queued | Attempt] | None:
        """The next namespace's next item, in turn, skipping namespaces with one in flight."""
        for _ in range(len(self._turns)):
            ns = self._turns.popleft()
            q = self._queues.get(ns)
            if not q:
                self._queues.pop(ns, None)
                continue
            self._turns.append(ns)
            if ns not in self._busy:
                return ns, q.popleft()
        return None

    async def _work(self) -> None:
        while True:
            picked = self._next()
            if picked is None:
                self._ready.clear()
                await self._ready.wait()
                continue
            ns, item = picked
            self._busy.add(ns)
            self._sending += 1
            try:
                if isinstance(item, Queued):
                    await self._expand(ns, item)
                else:
                    await self._attempt(ns, item)
            except Exception:  # a worker must outlive any one notice
                log.exception("notification for %s/%s failed", item.outgoing.namespace,
                              item.outgoing.name)
            finally:
                self._sending -= 1
                self._busy.discard(ns)
                self._ready.set()  # the namespace may have more

    async def _expand(self, ns: str, item: Queued) -> None:
        """A notice becomes one attempt per permitted endpoint of its Secret (queued first, so
        they go before the namespace's later notices)."""
        out = item.outgoing
        endpoints = await self._endpoints(out.namespace, item.secret)
        if not endpoints:
            _count(out.notice, "no-endpoint")
        for key, url in reversed(list(endpoints.items())):
            if await self._refused(out, key, url) is None:
                self._push(ns, Attempt(out, key, url), first=True)

    async def _attempt(self, ns: str, a: Attempt) -> None:
        """One POST; a retry is scheduled, not waited for: the worker is free meanwhile."""
        result = await self._try(a)
        if result is not None:
            return
        delay = min(self.settings.max_delay, self.settings.first_delay * 2 ** (a.number - 1))
        nxt = Attempt(a.outgoing, a.key, a.url, a.number + 1)

        def again() -> None:
            self._retries.discard(handle)
            self._push(ns, nxt)
        handle = asyncio.get_running_loop().call_later(delay, again)
        self._retries.add(handle)

    def pending(self) -> int:
        """Notices (and endpoint attempts) queued, being sent, or waiting for a retry."""
        return self._waiting() + self._sending + len(self._retries)

    async def aclose(self, drain_seconds: float = 0.0) -> None:
        """Stop the workers, after giving queued notices up to ``drain_seconds`` to go out."""
        deadline = asyncio.get_running_loop().time() + drain_seconds
        while self.pending() and self._workers and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for handle in self._retries:
            handle.cancel()
        self._retries.clear()
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
        texts = await secret_texts(self.kube, namespace, name)
        if isinstance(texts, Missing):
            if texts.status != 404 or secret is not None:  # a missing namespace default: normal
                log.warning("notifications: %s/%s", namespace, texts)
            return {}
        return {key: url for key in FORMATS if (url := texts.get(key))}

    async def _permitted(self, url: str) -> bool:
        if self.settings.allow:
            return address_allowed(url, self.settings.allow)
        return await public_host(url)

    def _where(self, out: Outgoing, key: str) -> str:
        return f"{out.namespace}/{out.name} {out.notice.kind} via {key}"  # never the URL

    async def _refused(self, out: Outgoing, key: str, url: str) -> Result | None:
        if await self._permitted(url):
            return None
        log.warning("notifications: %s refused: the address is not allowed (--notify-allow, "
                    "chart value notifications.allow; without it only public addresses)",
                    self._where(out, key))
        _count(out.notice, "refused")
        return "refused"

    async def _try(self, a: Attempt) -> Result | None:
        """One attempt: its result when final (sent, or failed for good), None to retry."""
        problem = await self._post(a.url, FORMATS[a.key](a.outgoing))
        where, s = self._where(a.outgoing, a.key), self.settings
        if problem is None:
            _count(a.outgoing.notice, "sent")
            log.info("notifications: %s sent (attempt %d)", where, a.number)
            return "sent"
        log.warning("notifications: %s attempt %d/%d: %s", where, a.number, s.attempts,
                    problem[0])
        if not problem[1] or a.number >= s.attempts:
            _count(a.outgoing.notice, "failed")
            return "failed"
        return None

    async def _send(self, out: Outgoing, key: str, url: str) -> Result:
        """Every attempt of one endpoint, waiting between them (the CLI's direct delivery)."""
        refused = await self._refused(out, key, url)
        if refused is not None:
            return refused
        a = Attempt(out, key, url)
        while (result := await self._try(a)) is None:
            s = self.settings
            await asyncio.sleep(min(s.max_delay, s.first_delay * 2 ** (a.number - 1)))
            a = Attempt(out, key, url, a.number + 1)
        return result

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
