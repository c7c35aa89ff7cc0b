"""Run the evaluation set against the canary's and the stable's Services.

Each case is sent as an OpenAI chat completion (``POST /v1/chat/completions``, ``temperature``
0, not streamed) to both Services, at most ``concurrency`` requests in flight per Service, each
with ``timeout`` over the whole request (connecting, sending and reading the reply: a Service that
trickles bytes fails at the timeout), and a reply is read up to ``MAX_REPLY_BYTES`` (a chat
completion of a few hundred tokens is a few KiB).  A case passes when its reply passes its scorer;
a request that fails (refused, timed out, a non-2xx answer, a reply too large or not JSON) fails
its case, as a reply the user never got.  A connection that breaks before an answer (refused,
reset, closed by a proxy reloading its config) is retried once on a new connection: the request
is read-only, and a dropped keep-alive connection says nothing about the model.  So is an answer
503 or 429 (a server still loading its model, or shedding load), retried once after
``RETRY_AFTER_S`` (a pod's Ready can precede its model by a moment).  When more than half
of one Service's requests fail, the run is an error instead (the Service is unreachable: that
says nothing about the model), which the gate retries and never passes.

Scores are points: 100 × passed / cases.

**One budget for the whole operator.** Every evaluation of every rollout draws its requests from
one pool of :data:`MAX_REQUESTS_IN_FLIGHT`, and one namespace from at most half of it
(:class:`RequestBudget`): replies are held while they are read and scored, and five evaluating
rollouts of one tenant (64 requests in flight each, 1 MiB replies) took the operator from 63 to
656 MiB, past the chart's 512 Mi limit (issue 29). With replies capped at
:data:`MAX_REPLY_BYTES`, the replies in flight hold a few MiB whatever the tenants ask, and one
tenant's evaluations leave the other half of the pool to everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..api.spec import PodTemplate
from ..bounded_http import AnswerTooLarge, MiB, loads, read_capped, sanitize
from .cases import Case
from .scorers import score

CHAT_PATH = "/v1/chat/completions"
#: A chat completion of a few thousand tokens is a few KiB; a quarter MiB is about 60,000 tokens.
MAX_REPLY_BYTES = MiB // 4
#: Evaluation requests in flight across the whole operator, and for one namespace.
MAX_REQUESTS_IN_FLIGHT = 16
MAX_REQUESTS_PER_NAMESPACE = MAX_REQUESTS_IN_FLIGHT // 2


@dataclass
class RequestBudget:
    """The operator-wide pool of evaluation requests in flight (see the module doc): a request
    takes its namespace's slot first, then the pool's, so one tenant never holds more than its
    share while others wait."""

    total: int = MAX_REQUESTS_IN_FLIGHT
    per_namespace: int = MAX_REQUESTS_PER_NAMESPACE
    _pool: asyncio.Semaphore | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _namespaces: dict[str, asyncio.Semaphore] = field(default_factory=dict)
    _users: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    most_in_flight: int = 0

    @contextlib.asynccontextmanager
    async def slot(self, namespace: str) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:  # semaphores belong to one loop
            self._pool, self._loop = asyncio.Semaphore(self.total), loop
            self._namespaces.clear()
            self._users.clear()
        ns = self._namespaces.setdefault(namespace, asyncio.Semaphore(self.per_namespace))
        self._users[namespace] = self._users.get(namespace, 0) + 1
        try:
            async with ns, self._pool:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                try:
                    yield
                finally:
                    self.in_flight -= 1
        finally:
            self._users[namespace] -= 1
            if not self._users[namespace]:  # forget idle namespaces
                del self._users[namespace], self._namespaces[namespace]


#: The operator's one budget (tests make their own).
BUDGET = RequestBudget()
#: Answers that say "not now" rather than anything about the model: retried once.
RETRIED_STATUSES = frozenset({429, 503})
RETRY_AFTER_S = 1.0


@dataclass(frozen=True)
class EvaluationResult:
    """Both scores in points (0–100); ``errors`` counts failed requests over both Services;
    ``error`` is set when the run says nothing about the model (see the module doc)."""

    canary_score: float | None
    stable_score: float | None
    cases: int
    errors: int
    detail: str = ""
    error: str | None = None


def service_url(rollout: str, revision: str, namespace: str, port: int) -> str:
    """The chat completions URL of a revision's Service (``<rollout>-<revision>``)."""
    return f"http://{rollout}-{revision}.{namespace}.svc:{port}{CHAT_PATH}"


def served_model(template: PodTemplate) -> str:
    """The model name requests must carry: ``--served-model-name`` (its first value), else
    ``--model`` (or the positional model of ``vllm serve``)."""
    args = template.serving_args()
    for i, a in enumerate(args):
        if a.startswith("--served-model-name="):
            return a.split("=", 1)[1]
        if a == "--served-model-name" and i + 1 < len(args):
            return args[i + 1]
    for i, a in enumerate(args):
        if a.startswith("--model="):
            return a.split("=", 1)[1]
        if a == "--model" and i + 1 < len(args):
            return args[i + 1]
    if "serve" in args and args.index("serve") + 1 < len(args):
        return args[args.index("serve") + 1]
    raise ValueError("the serving container names no model (--model or --served-model-name)")


def reply_text(doc: Any) -> str:
    """The first choice's message content of a chat completion response."""
    try:
        content = doc["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("response has no choices[0].message.content") from None
    return content if isinstance(content, str) else ""


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any],
                timeout: float) -> tuple[int, bytes]:
    """One chat completion: the HTTP status and the body, within ``timeout`` in all."""
    async with asyncio.timeout(timeout), client.stream("POST", url, json=body,
                                                       timeout=timeout) as resp:
        return resp.status_code, await read_capped(resp, MAX_REPLY_BYTES)


@dataclass(frozen=True)
class _SideResult:
    passed: int
    failed_requests: int
    first_problem: str


async def _run_side(client: httpx.AsyncClient, url: str, model: str, cases: Sequence[Case],
                    concurrency: int, timeout: float, budget: RequestBudget,
                    namespace: str) -> _SideResult:
    limit = asyncio.Semaphore(concurrency)
    problems: list[str] = []

    async def one(case: Case) -> tuple[bool, bool]:
        body = {"model": model, "messages": list(case.messages), "temperature": 0,
                "max_tokens": case.max_tokens, "stream": False}
        async with limit, budget.slot(namespace):
            try:
                try:
                    status, data = await _post(client, url, body, timeout)
                except httpx.TimeoutException:
                    raise
                except httpx.TransportError:
                    status, data = await _post(client, url, body, timeout)
                if status in RETRIED_STATUSES:
                    await asyncio.sleep(RETRY_AFTER_S)
                    status, data = await _post(client, url, body, timeout)
                if status // 100 != 2:
                    problems.append(f"line {case.line}: HTTP {status}")
                    return False, True
                text = reply_text(loads(data))
            except TimeoutError:
                problems.append(f"line {case.line}: no reply within {timeout:g}s")
                return False, True
            except (httpx.HTTPError, httpx.InvalidURL, ValueError, AnswerTooLarge) as e:
                problems.append(f"line {case.line}: {type(e).__name__}: {sanitize(e)}"
                                .rstrip(": "))
                return False, True
        return score(case.scorer, text, case.expected, case.schema), False

    results = await asyncio.gather(*(one(c) for c in cases))
    return _SideResult(sum(1 for ok, _ in results if ok), sum(1 for _, err in results if err),
                       problems[0] if problems else "")


async def run_evaluation(cases: Sequence[Case], canary_url: str, stable_url: str, model: str, *,
                         concurrency: int = 4, timeout: float = 30.0, proxy: str | None = None,
                         transport: httpx.AsyncBaseTransport | None = None,
                         namespace: str = "", budget: RequestBudget = BUDGET
                         ) -> EvaluationResult:
    """Send every case to both URLs and score the replies, within ``budget`` (the operator's
    pool, shared by ``namespace``'s evaluations)."""
    n = len(cases)
    async with httpx.AsyncClient(proxy=proxy, transport=transport, trust_env=False) as client:
        canary, stable = await asyncio.gather(
            _run_side(client, canary_url, model, cases, concurrency, timeout, budget, namespace),
            _run_side(client, stable_url, model, cases, concurrency, timeout, budget, namespace))
    errors = canary.failed_requests + stable.failed_requests
    for side, res in (("canary", canary), ("stable", stable)):
        if res.failed_requests * 2 > n:
            return EvaluationResult(None, None, n, errors, error=(
                f"{side} Service: {res.failed_requests}/{n} requests failed "
                f"(first: {res.first_problem})"))
    detail = "; ".join(f"{side}: {res.failed_requests} failed requests (first: "
                       f"{res.first_problem})" for side, res in (("canary", canary),
                                                                 ("stable", stable))
                       if res.failed_requests)
    return EvaluationResult(100.0 * canary.passed / n, 100.0 * stable.passed / n, n, errors,
                            detail)
