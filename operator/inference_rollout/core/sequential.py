"""Sequential tests: decide as soon as the evidence suffices, in either direction, at a stated
error rate, however often the operator looks.

A percentile SLO ``p99 ≤ L`` is a statement about counts: at most ``p0 = 1%`` of requests take
longer than ``L``.  An error-rate limit ``≤ max`` likewise: at most ``p0 = max`` of requests fail.
So each request is a coin flip (bad or not), and the question is whether the coin's bad side
comes up at most ``p0`` of the time or at least ``p1 = 5·p0`` of the time (the alternative: a
canary with 5× the allowed share of bad requests must never be promoted).

Wald's likelihood ratio of ``k`` bad out of ``n`` is
``LR(p1:p0) = (p1/p0)^k · ((1-p1)/(1-p0))^(n-k)``.  When the canary is healthy (its true share
is ≤ p0) this ratio, followed request by request, is a nonnegative supermartingale starting at 1,
so by Ville's inequality the chance that it *ever* reaches ``1/α`` is at most ``α``: looking
after every interval, or every request, does not inflate the error.  Pass when the mirror ratio
``LR(p0:p1) ≥ 1/β`` (the same argument bounds the chance that a canary whose share is ≥ p1
ever passes by ``β``).

**The fail side tests a mixture of alternatives** (issue 30): ``M = ½·LR(p1:p0) +
¼·LR(½:p0) + ¼·LR(0.95:p0)``, roll back when ``M ≥ 1/α``.  A weighted mean of nonnegative
supermartingales that start at 1 is one too, so Ville's bound holds for ``M`` with the same ``α``
(no split of ``α`` between the alternatives: the weights are the split).  Against ``p1 = 5·p0``
alone, each surely-bad request multiplied the evidence by 5 and a canary whose every request is
bad needed 5 of them (ln 5 each against ln(1/α) ≈ 7.1); the gross alternatives multiply it by 50
and 95 (at p0 = 1%), so it fails at its 2nd bad request (3rd at p0 = 5%), while a canary just over
5·p0 needs about ln 2 / ln 5 ≈ 0.4 of a bad request more than before (its component weighs ½).

**Late breakage: the same test restarted at every look** (issue 30, item 2).  The whole-step
test weighs all the step's requests: a canary that turns bad after 10,000 good ones needs about
250 bad ones before those outweigh the good (each good request multiplies the evidence by
0.96).  So the fail side's statistic is itself a mixture over *where the evidence starts*:
``E = w₀·M(step) + Σⱼ wⱼ·M(since look j)``, one component per earlier look ``j`` of the step,
with ``w₀ = 1 - RESTART_BUDGET`` and ``wⱼ = RESTART_BUDGET / (j·(j+1))`` (their sum is 1).
Before look ``j`` its component is the constant ``wⱼ``; from then on, a mixture LR started at
1.  Each component is a nonnegative supermartingale under the null, so ``E`` is one starting at
1 and Ville's bound holds for ``E ≥ 1/α`` with the same ``α``, however many looks (no union
bound, no split of ``α``).  Components dropped from the status only make ``E`` smaller, so the
bound holds for what is computed whichever are dropped: the status keeps the few
(``api.status.KEPT_RESTARTS``) whose components are largest now (a new look's always enters:
nothing since it yet, so nothing against it; the look just before a breakage stays, as the bad
requests raise it).  The
price: the whole-step component weighs ``w₀`` (ln 1/0.995 ≈ 0.005 nats), a restart at look ``j``
``ln(j(j+1)/RESTART_BUDGET)`` nats (≈ 16 at the 100th look), which the gross alternatives pay
with 3–5 bad requests when the good ones since that look are few.

**The pass side counts the whole release** (issue 30, item 3).  The canary is one revision
through all its steps, so the evidence that it is healthy carries from step to step: the pass
side tests the release's counts (``carried``: every earlier step's, plus this step's), while the
fail side keeps testing each step's own traffic (load changes latency).  ``1/LR(p1:p0)`` over the
release is one supermartingale when the canary's share is ≥ p1 at every step, so by Ville it
*ever* reaches ``(1/β)^c`` with probability ≤ ``β^c``.  A step that hands the canary the weight
``w`` (the next step's) asks for ``c = w/100`` of the evidence, the promotion after the last
step for ``c = 2`` (:data:`PROMOTION_EXPOSURE`): a canary with ≥ p1 bad requests is moved to
20 % with probability ≤ β^0.2, to 50 % ≤ β^0.5, to 100 % ≤ β and promoted ≤ β², while a healthy
one needs 23, 56, 112 and 224 clean requests in the whole release instead of 112 at every step
(the last ones arrive fast: that step carries all the traffic).  Each step still needs its
own evidence too: at least the requests that would fail it if every one were bad
(:func:`step_minimum`, 2 or 3), and its own counts not leaning bad (``LR(p0:p1) ≥ 1``), so a
canary that breaks grossly at a step's load is rolled back there, never moved on.

``α`` per test: the spec's ``falseRollbackRate`` divided by (metrics × steps) (Bonferroni: each
step restarts every metric's fail side, any one can roll back).  ``β``: ``falseRollbackRate``,
the chance per metric that a canary with ≥ p1 bad requests is handed all traffic (β² that it
is promoted).

Counts from Prometheus ``increase()`` are extrapolated and may be fractional: each side rounds
against itself (to fail: bad counts down, requests up; to pass: bad counts up, requests down).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

#: A canary with this many times the allowed share of bad requests must never be promoted.
ALTERNATIVE_FACTOR = 5.0
#: The fail side's gross alternatives (share of bad requests, weight); p1 = 5·p0 weighs the rest.
GROSS_ALTERNATIVES = ((0.5, 0.25), (0.95, 0.25))
#: Relative checks: the alternative is twice the allowed ratio to stable.
RELATIVE_ALTERNATIVE_FACTOR = 2.0
#: The share of requests a p99 lets exceed its limit.
P99_EXCEEDANCE = 0.01
#: Rounding tolerance for counts that are integers up to float noise (2.9999999 is 3).
SLACK = 1e-6
#: The weight the restarts at later looks share (module doc: late breakage); small, so that a
#: canary failing from its first requests is still failed at its 2nd or 3rd.
RESTART_BUDGET = 0.005


@dataclass(frozen=True)
class Restart:
    """The step's cumulative counts at look ``index`` (1 = the first look that counted any
    request): the evidence since then is ``now - these``."""

    index: int
    requests: float
    sure_bad: float


def restart_weight(index: int) -> float:
    """``wⱼ = RESTART_BUDGET / (j·(j+1))``: summed over every j ≥ 1, ``RESTART_BUDGET``."""
    return RESTART_BUDGET / (index * (index + 1))


@dataclass(frozen=True)
class Carried:
    """The pass side's counts of the release's earlier step periods (the same canary): requests
    rounded down, possibly bad ones up, each period on its own."""

    requests: int = 0
    bad: int = 0

    def plus(self, requests: int, bad: int) -> Carried:
        return Carried(self.requests + requests, self.bad + bad)


#: The first step's: nothing before it.
NOTHING_CARRIED = Carried()

#: The share of ``ln(1/β)`` a promotion needs: a promoted canary takes all traffic from then on,
#: so it must show twice a step's evidence; a canary at p1 is promoted with probability ≤ β²
#: (10⁻⁴ with the default), as when every step had to pass on its own, and the last step, which
#: carries the most traffic, pays for it in seconds (module doc).
PROMOTION_EXPOSURE = 2.0


@dataclass(frozen=True)
class ErrorRates:
    """``alpha``: a single test's chance to fail a healthy canary; ``beta``: to pass a bad one."""

    alpha: float
    beta: float


def error_rates(false_rollback_rate: float, metrics: int, steps: int) -> ErrorRates:
    """Per-test rates that keep the whole release's false-rollback chance ≤ the spec's rate."""
    return ErrorRates(false_rollback_rate / max(1, metrics * steps), false_rollback_rate)


@dataclass(frozen=True)
class Outcome:
    """A sequential test's state at one look."""

    verdict: Literal["Pass", "Fail", "Inconclusive"]
    requests: int  # counted (rounded as for the verdict shown)
    bad: int  # bad among them: surely bad for Fail, possibly bad otherwise
    p_value: float  # anytime-valid p of "the limit holds" (1 / E, the fail side, at most 1)
    more_requests: int  # further requests, none bad, that passing needs (0 once decided)
    #: A Fail carried by the evidence since a later look (its index), not the whole step's:
    #: ``requests`` and ``bad`` are then those since that look.
    since_look: int | None = None
    #: The release's earlier steps the pass side counted besides ``requests`` and ``bad``
    #: (which are always the step's own).
    carried: Carried = NOTHING_CARRIED


def alternative(p0: float) -> float:
    """``p1 = 5·p0``, kept below 1 for large limits (halfway from p0 to 1)."""
    return min(ALTERNATIVE_FACTOR * p0, (1 + p0) / 2)


def testable(p0: float) -> bool:
    return 0 < p0 < 1


def log_lr(bad: int, n: int, p0: float, p1: float) -> float:
    """ln LR(p1:p0) of ``bad`` out of ``n``."""
    return bad * math.log(p1 / p0) + (n - bad) * math.log((1 - p1) / (1 - p0))


def log_mixture_lr(bad: int, n: int, p0: float) -> float:
    """ln of the fail side's mixture ``M`` (module doc): p1 = 5·p0 and the gross alternatives
    above p0, their weights summing to 1 (a gross one at or below p0 gives its weight to p1)."""
    p1 = alternative(p0)
    gross = [(p, w) for p, w in GROSS_ALTERNATIVES if max(p0, p1) < p < 1]
    terms = [(1.0 - sum(w for _, w in gross), p1), *((w, p) for p, w in gross)]
    return _log_sum([math.log(w) + log_lr(bad, n, p0, p) for w, p in terms])


def _log_sum(logs: list[float]) -> float:
    """ln Σ exp(x), without overflow."""
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs))


def _p_value(log_lr_bad: float) -> float:
    """1 / LR, at most 1 (a large negative log LR must not overflow ``exp``)."""
    return 1.0 if log_lr_bad <= 0 else math.exp(-log_lr_bad)


def _down(x: float) -> int:
    return max(0, math.floor(x + SLACK))


def _up(x: float) -> int:
    return max(0, math.ceil(x - SLACK))


def _fail_counts(requests: float, sure_bad: float) -> tuple[int, int]:
    """(requests, bad) rounded against failing: bad down, requests up."""
    bad = _down(sure_bad)
    return max(_up(requests), bad), bad


def step_minimum(p0: float, rates: ErrorRates) -> int:
    """The requests a step must count before it can pass: as many as fail its own test when
    every one is surely bad (2 at p0 = 1 %, 3 at 5 %), so a canary that breaks grossly at this
    step's load is failed here before the evidence of earlier steps can move it on."""
    threshold = math.log(1 / rates.alpha)
    for m in range(1, 1001):
        if math.log(1 - RESTART_BUDGET) + log_mixture_lr(m, m, p0) >= threshold:
            return m
    return 1000


def restart_evidence(restart: Restart, requests: float, sure_bad: float, p0: float) -> float:
    """ln of the restart's component ``wⱼ·M(since look j)`` at these step counts."""
    n, bad = _fail_counts(requests - restart.requests, sure_bad - restart.sure_bad)
    return math.log(restart_weight(restart.index)) + log_mixture_lr(bad, n, p0)


def bernoulli(requests: float, sure_bad: float, possible_bad: float, p0: float,
              rates: ErrorRates, restarts: tuple[Restart, ...] = (),
              carried: Carried = NOTHING_CARRIED, exposure: float = 1.0) -> Outcome:
    """Test "at most ``p0`` of requests are bad" on the step's counts so far.

    ``sure_bad`` counts requests surely bad (it may undercount), ``possible_bad`` every request
    possibly bad (it may overcount): failing uses the first, passing the second, so neither
    side's guarantee depends on where the limit sits between two histogram buckets.
    ``restarts``: the step's counts at earlier looks; the fail side weighs the evidence since
    each of them too (module doc: late breakage).  ``carried``: the release's earlier steps,
    which the pass side counts too; ``exposure``: the share of ``ln(1/β)`` a pass needs, the
    weight it hands the canary over 100 (module doc: the pass side counts the whole release).
    """
    p1 = alternative(p0)
    fail_n, fail_bad = _fail_counts(requests, sure_bad)
    whole = math.log(1 - RESTART_BUDGET) + log_mixture_lr(fail_bad, fail_n, p0)
    parts = [restart_evidence(r, requests, sure_bad, p0) for r in restarts]
    evidence_bad = _log_sum([whole, *parts])
    p_value = _p_value(evidence_bad)
    if evidence_bad >= math.log(1 / rates.alpha):
        best = max(range(len(parts)), key=parts.__getitem__, default=None)
        if best is not None and parts[best] > whole:
            r = restarts[best]
            n, bad = _fail_counts(requests - r.requests, sure_bad - r.sure_bad)
            return Outcome("Fail", n, bad, p_value, 0, since_look=r.index)
        return Outcome("Fail", fail_n, fail_bad, p_value, 0)
    pass_n = _down(requests)
    pass_bad = min(_up(possible_bad), pass_n)
    release = -log_lr(pass_bad + carried.bad, pass_n + carried.requests, p0, p1)
    own = -log_lr(pass_bad, pass_n, p0, p1)
    needed = max(0.0, exposure) * math.log(1 / rates.beta)
    minimum = step_minimum(p0, rates)
    if release >= needed and own >= 0 and pass_n >= minimum:
        return Outcome("Pass", pass_n, pass_bad, p_value, 0, carried=carried)
    per_good_request = math.log((1 - p0) / (1 - p1))
    more = max(math.ceil((needed - release) / per_good_request - SLACK), minimum - pass_n,
               math.ceil(-own / per_good_request - SLACK), 1)
    return Outcome("Inconclusive", pass_n, pass_bad, p_value, more, carried=carried)


def two_sample(canary_requests: float, canary_bad: float, stable_requests: float,
               stable_bad: float, max_ratio: float, rates: ErrorRates) -> Outcome:
    """Fail side of "canary's bad share ≤ ``max_ratio`` × stable's", measured over one period.

    Given ``k`` bad requests in all, each one is the canary's with probability
    ``q = r·n_c / (r·n_c + n_s)`` when the canary's share is exactly ``r`` times stable's (the
    conditional binomial test); the same likelihood ratio as :func:`bernoulli` on the canary's
    part of the bad requests, against ``q1`` for twice the ratio.  Never passes: a relative check
    passes on its point comparison (few bad requests on both sides cannot show a ratio holds).
    """
    n_c, n_s = _up(canary_requests), _down(stable_requests)
    k_c, k_s = _down(canary_bad), _up(stable_bad)
    if n_c == 0 or n_s == 0 or k_c == 0:
        return Outcome("Inconclusive", n_c, k_c, 1.0, 0)
    q0 = max_ratio * n_c / (max_ratio * n_c + n_s)
    r1 = RELATIVE_ALTERNATIVE_FACTOR * max_ratio
    q1 = r1 * n_c / (r1 * n_c + n_s)
    evidence_bad = log_lr(k_c, k_c + k_s, q0, q1)
    p_value = _p_value(evidence_bad)
    verdict: Literal["Fail", "Inconclusive"] = (
        "Fail" if evidence_bad >= math.log(1 / rates.alpha) else "Inconclusive")
    return Outcome(verdict, n_c, k_c, p_value, 0)


def exceedances(buckets: tuple[tuple[float, float], ...], limit: float) -> tuple[float, float,
                                                                                  float]:
    """(requests, surely over ``limit``, possibly over ``limit``) from cumulative buckets.

    Surely over: above the smallest bucket bound ≥ limit.  Possibly over: above the largest
    bound ≤ limit (every request when no bound is that small).  ``increase()`` extrapolates each
    bucket separately, so a bucket may show a little more than the next one: counts are clamped
    to [0, requests].
    """
    total = max(0.0, buckets[-1][1]) if buckets else 0.0
    at_or_above = [count for bound, count in buckets if bound >= limit]
    at_or_below = [count for bound, count in buckets if bound <= limit]
    sure = total - at_or_above[0] if at_or_above else 0.0
    possible = total - at_or_below[-1] if at_or_below else total
    return total, min(total, max(0.0, sure)), min(total, max(0.0, possible))


def describe_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
