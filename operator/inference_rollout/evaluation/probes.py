"""Evidence on demand (issue 30, item 4): the operator's own requests to a release's canary and
stable Services, measured as a client sees them.

At low traffic the canary's share of users is a trickle (5 % of 4 req/s is one request every
5 s), so a verdict waits minutes for evidence, and a gross breach is only seen once users have
met it.  ``spec.analysis.probes`` lets the operator make the evidence itself: one streamed chat
completion to each Service every ``1 / ratePerSecond`` seconds, the same prompt to both, from the
canary's first Ready pod until the release ends.  Each probe records its time to the first
token and whether it failed, where "failed" is what a user would call it: an error status, no
answer within the timeout, or a stream cut after its 200 (no ``data: [DONE]``), which neither the
gateway's nor the server's counters can see (docs/traffic.md).

The probes' metrics (``probe-ttft-p99``, ``probe-error-rate``: :mod:`..api.effective`) are judged
by the same rules as every other metric: :func:`measurement` turns the samples of the evidence
period into the counts the sequential tests read.

Bounds: a rollout's probes run one task; at most :data:`IN_FLIGHT_PER_SIDE` probes per side are
in flight (a slow canary does not pile up requests); ``maxRequests`` per release; the operator's
evaluation budget (:data:`.runner.BUDGET`) caps requests in flight across all tenants; and a
rollout whose reconciles stop asking for probes has them stopped after :data:`IDLE_STOP_SECONDS`.
Samples live in the operator's memory: a restarted operator starts the evidence of the step
again from its probes (conservative: less evidence, never invented).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import httpx

from ..api.spec import MetricSpec, ProbesSpec
from ..bounded_http import sanitize
from ..core.types import Evidence, Measurement, MeasurementError
from .runner import BUDGET, RequestBudget

log = logging.getLogger(__name__)

Side = Literal["canary", "stable"]
#: Probes of one side in flight at once; a tick that finds them all busy sends none.
IN_FLIGHT_PER_SIDE = 4
#: A rollout's probes stop when no reconcile has asked for them this long.
IDLE_STOP_SECONDS = 300.0
#: Samples kept per rollout (the newest; about 80 bytes each): at 5 req/s per side, half an
#: hour of them, at 0.5 req/s five and a half hours.
KEPT_SAMPLES = 20_000
#: Rollouts probed at once by this operator: with :data:`KEPT_SAMPLES`, at most ~100 MiB of
#: samples whatever the tenants ask.  A rollout beyond it gets no probes (its probe metrics say
#: so) until another's release ends.
MAX_PROBING_ROLLOUTS = 64
#: The longest a streamed answer may be read (its events, not its tokens: max_tokens is small).
MAX_STREAM_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One probe's result.  ``at``: when it was sent (unix seconds); ``ttft``: seconds to its
    first content token (None if it failed before one); ``seconds``: until its last byte."""

    side: Side
    at: float
    ok: bool
    ttft: float | None
    seconds: float
    problem: str = ""


@dataclass(frozen=True)
class ProbeTarget:
    """What a rollout's probes are sent to, for one canary."""

    namespace: str
    rollout: str
    canary: str
    canary_url: str
    stable_url: str
    model: str
    spec: ProbesSpec
    #: The probes' TTFT limit (the probe-ttft-p99 metric's max): a canary answer over it, or
    #: a failed one, is news the analysis should look at now (None: failures only).
    ttft_limit: float | None = None


async def probe_once(client: httpx.AsyncClient, url: str, model: str, spec: ProbesSpec,
                     side: Side) -> ProbeSample:
    """One streamed chat completion, timed from the request to its first content token."""
    body = {"model": model, "messages": [{"role": "user", "content": spec.prompt}],
            "max_tokens": spec.max_tokens, "temperature": 0, "stream": True}
    sent_at, began = time.time(), time.monotonic()
    ttft: float | None = None

    def failed(problem: str) -> ProbeSample:
        return ProbeSample(side, sent_at, False, ttft, time.monotonic() - began, problem)

    try:
        async with asyncio.timeout(spec.timeout_seconds), client.stream(
                "POST", url, json=body, timeout=spec.timeout_seconds) as resp:
            if resp.status_code // 100 != 2:
                await resp.aclose()
                return failed(f"HTTP {resp.status_code}")
            done, size = False, 0
            async for line in resp.aiter_lines():
                size += len(line) + 1
                if size > MAX_STREAM_BYTES:
                    return failed("stream larger than 256 KiB")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                if ttft is None and '"content"' in data:
                    ttft = time.monotonic() - began
            if not done:
                return failed("stream ended without [DONE] (cut after its 200)")
    except TimeoutError:
        return failed(f"no complete answer within {spec.timeout_seconds:g}s")
    except httpx.HTTPError as e:
        return failed(f"{type(e).__name__}: {sanitize(e, 120)}".rstrip(": "))
    if ttft is None:
        ttft = time.monotonic() - began  # an empty answer: its end is its first token
    return ProbeSample(side, sent_at, True, ttft, time.monotonic() - began)


@dataclass
class RolloutProbes:
    """One rollout's probing of one canary: the task, and what it measured."""

    target: ProbeTarget
    samples: deque[ProbeSample] = field(default_factory=lambda: deque(maxlen=KEPT_SAMPLES))
    sent: int = 0
    #: Canary probes that answered well, since the start (the warmup counts them).
    canary_answered: int = 0
    seconds: float = 0.0  # the probes' answer time, summed: the serving time they cost
    asked_at: float = field(default_factory=time.monotonic)
    #: When the latest bad canary answer completed (unix seconds; 0: none yet).
    bad_at: float = 0.0
    task: asyncio.Task[None] | None = None
    in_flight: dict[str, int] = field(default_factory=lambda: {"canary": 0, "stable": 0})

    @property
    def exhausted(self) -> bool:
        return self.sent >= self.target.spec.max_requests


class Probers:
    """Every rollout's probes in this operator process (the leader's)."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None,
                 proxy: str | None = None, budget: RequestBudget = BUDGET,
                 on_bad: Callable[[str, str], None] | None = None) -> None:
        """``on_bad(namespace, rollout)``: called when a canary probe answers badly, so the
        rollout's analysis can look now rather than at its next interval (a gross breach is
        then decided on the answers that show it, not on the look cadence)."""
        self.transport, self.proxy, self.budget = transport, proxy, budget
        self.on_bad = on_bad
        self.running: dict[tuple[str, str], RolloutProbes] = {}
        self._client: httpx.AsyncClient | None = None

    def ensure(self, target: ProbeTarget) -> RolloutProbes | None:
        """Probe ``target`` (start, or keep going); a new canary or spec starts afresh.  None
        when :data:`MAX_PROBING_ROLLOUTS` others are probed already."""
        key = (target.namespace, target.rollout)
        current = self.running.get(key)
        if current is not None and current.target != target:
            self.stop(*key)
            current = None
        if current is None and len(self.running) >= MAX_PROBING_ROLLOUTS:
            return None
        if current is None:
            current = RolloutProbes(target)
            current.task = asyncio.get_running_loop().create_task(
                self._run(current), name=f"probes-{target.namespace}/{target.rollout}")
            self.running[key] = current
            log.info("%s/%s: probing canary %s and stable at %g req/s each",
                     target.namespace, target.rollout, target.canary,
                     target.spec.rate_per_second)
        current.asked_at = time.monotonic()
        return current

    def get(self, namespace: str, rollout: str, canary: str | None) -> RolloutProbes | None:
        found = self.running.get((namespace, rollout))
        return found if found is not None and found.target.canary == canary else None

    def stop(self, namespace: str, rollout: str) -> None:
        found = self.running.pop((namespace, rollout), None)
        if found is not None and found.task is not None:
            found.task.cancel()

    async def aclose(self) -> None:
        for key in list(self.running):
            self.stop(*key)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self.transport, proxy=self.proxy,
                                             trust_env=False)
        return self._client

    async def _run(self, probes: RolloutProbes) -> None:
        t = probes.target
        period = 1.0 / t.spec.rate_per_second
        pending: set[asyncio.Task[None]] = set()
        try:
            while not probes.exhausted:
                if time.monotonic() - probes.asked_at > IDLE_STOP_SECONDS:
                    log.info("%s/%s: probes stopped (no reconcile asked for them)",
                             t.namespace, t.rollout)
                    break
                for side, url in (("canary", t.canary_url), ("stable", t.stable_url)):
                    if probes.in_flight[side] >= IN_FLIGHT_PER_SIDE or probes.exhausted:
                        continue
                    task = asyncio.get_running_loop().create_task(
                        self._one(probes, side, url))  # type: ignore[arg-type]
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                await asyncio.sleep(period)
            if pending:  # the last probes' answers count: wait for them (each has its timeout)
                await asyncio.wait(set(pending))
        finally:  # cancelled (the release ended): the probes in flight end with it
            for task in pending:
                task.cancel()

    async def _one(self, probes: RolloutProbes, side: Side, url: str) -> None:
        t = probes.target
        probes.in_flight[side] += 1
        probes.sent += 1
        try:
            async with self.budget.slot(t.namespace):
                sample = await probe_once(self._http(), url, t.model, t.spec, side)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a probe never takes the operator down
            sample = ProbeSample(side, time.time(), False, None, 0.0, f"{type(e).__name__}")
        finally:
            probes.in_flight[side] -= 1
        probes.seconds += sample.seconds
        probes.samples.append(sample)
        if side == "canary" and sample.ok:
            probes.canary_answered += 1
        limit = t.ttft_limit
        if side == "canary" and (not sample.ok or (limit is not None and sample.ttft is not None
                                                   and sample.ttft > limit)):
            probes.bad_at = sample.at + sample.seconds
            if self.on_bad is not None:
                self.on_bad(t.namespace, t.rollout)


def measurement(metric: MetricSpec, samples: Iterable[ProbeSample], since: float | None,
                window_s: float, now: float, min_samples: int) -> Measurement:
    """The probes' measurement of ``metric`` over the evidence period: since ``since`` (the
    step's weight, under ``Sequential``), else the last ``window_s``; only probes complete by
    ``now``.  A latency metric counts the probes that answered (a failed one is the error
    rate's); its buckets are exact at the limit, so the sequential test's "surely" and
    "possibly over" are the same count."""
    start = since if since is not None else now - window_s
    period = max(1.0, now - start)
    complete = [s for s in samples if start <= s.at and s.at + s.seconds <= now]
    canary = [s for s in complete if s.side == "canary"]
    stable = [s for s in complete if s.side == "stable"]
    if metric.template == "probe-error-rate":
        n, bad = len(canary), sum(1 for s in canary if not s.ok)
        sn, sbad = len(stable), sum(1 for s in stable if not s.ok)
        if n == 0:
            return _too_few(0)
        value, stable_value = bad / n, (sbad / sn if sn else None)
        evidence = Evidence(period, requests=float(n), errors=float(bad),
                            stable_requests=float(sn), stable_errors=float(sbad))
    else:
        ttfts = sorted(s.ttft for s in canary if s.ok and s.ttft is not None)
        stable_ttfts = sorted(s.ttft for s in stable if s.ok and s.ttft is not None)
        n = len(ttfts)
        if n == 0:
            return _too_few(0)
        value, stable_value = _p99(ttfts), (_p99(stable_ttfts) if stable_ttfts else None)
        limit = metric.max if metric.max is not None else math.inf
        within = float(sum(1 for x in ttfts if x <= limit))
        evidence = Evidence(period, buckets=((limit, within), (math.inf, float(n))))
    if since is None and n < min_samples:
        return Measurement(value, stable_value=stable_value, samples=n,
                           error=MeasurementError.TOO_FEW_SAMPLES, evidence=evidence)
    return Measurement(value, stable_value=stable_value, samples=n, evidence=evidence)


def _p99(sorted_values: list[float]) -> float:
    """The 99th percentile, nearest rank."""
    return sorted_values[min(len(sorted_values) - 1, math.ceil(0.99 * len(sorted_values)) - 1)]


def _too_few(n: int) -> Measurement:
    return Measurement(None, samples=n, error=MeasurementError.TOO_FEW_SAMPLES,
                       detail="collecting: no probe answered in this period yet")


def not_probing() -> Measurement:
    """No probes of this canary in this process: not started yet, or the operator's limit."""
    return Measurement(None, samples=0, error=MeasurementError.TOO_FEW_SAMPLES, detail=(
        "collecting: no probes of this canary yet (they start with its first Ready pod; the "
        f"operator probes at most {MAX_PROBING_ROLLOUTS} rollouts at once)"))
