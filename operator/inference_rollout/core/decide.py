"""The decision function: observed world + spec + status + now → actions + new status.

Everything the operator does flows from :func:`decide`.  It reads no clock and performs no I/O:
the handler passes ``now`` and what it observed, applies the returned actions in order, and then
writes the returned status.  Because the whole state of a release lives in the status, calling
``decide`` again after a crash, with the status as it was last written, repeats at most the last
idempotent writes and never skips, repeats or reverses a step.

The rules, in the order they are checked (DESIGN §4):

1. deletion returns all traffic to stable;
2. the first revision is deployed as stable with all traffic;
3. a template equal to stable ends any release (a revert);
4. an invalid release never receives traffic;
5. a new template starts a release at step 1 (abandoning an older canary);
6. an aborted release keeps traffic on stable until retry or a new template;
7. requests (abort, pause, resume), then analysis verdicts (fail → roll back, errors → policy);
8. capacity for the current step, then its weight once enough canary pods are Ready, then the
   hold and analysis, then the next step or promotion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..api import reasons as r
from ..api.duration import format_duration
from ..api.spec import InferenceRolloutSpec, MetricSpec, Step
from ..api.status import InferenceRolloutStatus, MetricResult, Requests
from . import cost, header_routes, route_gate
from . import evaluation_gate as gate
from . import verdicts as an
from .capacity import (
    canary_target,
    carried_weight,
    ready_enough,
    release_pod_counts,
    stable_within_quota,
)
from .conditions import apply_conditions, step_message
from .scale import serving_pods, serving_selector
from .serving_versions import in_place
from .steps import carries_traffic, current_step, fit_index, testers_step
from .timeutil import from_iso, seconds_since, to_iso
from .types import (
    Action,
    Decision,
    DeleteRevision,
    EnsureRevision,
    EvaluationOutcome,
    Measurement,
    MeasurementError,
    Observation,
    OrphanRevision,
    RecordEvent,
    RouteAcceptance,
    RouteApplied,
    RouteRejected,
    SetWeights,
)

#: How often to look again while waiting for pods or the gateway: the fallback, since the
#: handlers wake the rollout on its Deployments' and route's watch events (core.wakeups).
POLL_SECONDS = 2.0
#: The longest the operator sleeps on a rollout with nothing due (drift is re-checked this often).
IDLE_SECONDS = 30.0


@dataclass
class _Run:
    """One call's working state: the status being built and the actions collected so far."""

    spec: InferenceRolloutSpec
    status: InferenceRolloutStatus
    world: Observation
    now: datetime
    actions: list[Action] = field(default_factory=list)
    wakeups: list[float] = field(default_factory=list)
    #: Set by a rollback decided in this call: its reason and message.
    rolled_back: tuple[str, str] | None = None

    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(RecordEvent("Warning" if type_ == "Warning" else "Normal", reason,
                                        message))

    def wake_in(self, seconds: float) -> None:
        self.wakeups.append(max(0.0, seconds))

    def cancel_scaling(self, revision: str) -> None:
        """Drop any scaling of ``revision`` decided earlier in this call."""
        self.actions = [a for a in self.actions
                        if not (isinstance(a, EnsureRevision) and a.revision == revision)]

    def ensure(self, revision: str, replicas: int) -> None:
        """Scale ``revision`` to ``replicas``; a later call for the same revision in one decision
        replaces an earlier one (e.g. a rollback after the step's scaling was computed)."""
        self.cancel_scaling(revision)
        seen = self.world.revisions.get(revision)
        if seen is None or seen.desired != replicas:
            self.actions.append(EnsureRevision(revision, replicas))


#: The soonest a look follows the previous one when a probe brought bad news.
NEWS_LOOK_SECONDS = 1.0


def analysis_due(spec: InferenceRolloutSpec, status: InferenceRolloutStatus, now: datetime,
                 bad_news_at: datetime | None = None) -> bool:
    """Whether the handler should measure before calling :func:`decide`.

    Due while a canary carries traffic: right after each weight change, then every interval (or
    every scrape, under ``Sequential``: ``look_every_seconds``), and once more when the step's
    hold ends, so the verdict that promotes covers the whole hold.  ``bad_news_at``: when the
    operator's own probes last saw the canary answer badly; a look is due then, at most every
    :data:`NEWS_LOOK_SECONDS` (evidence that can fail the canary is read as it arrives).
    """
    if not spec.analysis.effective_metrics or status.aborted:
        return False
    if not carries_traffic(spec, status):
        return False
    last = from_iso(status.last_analysis_at)
    started = from_iso(status.step_started_at)
    if last is None:
        return True
    if started is not None and last <= started:
        return True  # a measurement at the instant the weight changed saw the previous weight
    if (now - last).total_seconds() >= _look_every(spec, status):
        return True
    if (bad_news_at is not None and bad_news_at > last
            and (now - last).total_seconds() >= NEWS_LOOK_SECONDS):
        return True
    hold_end = _hold_end(spec, status)
    return hold_end is not None and now >= hold_end > last


def decide(
    spec: InferenceRolloutSpec,
    status: InferenceRolloutStatus,
    world: Observation,
    now: datetime,
) -> Decision:
    # A private copy to build the new status in (validating a dump is ~3× faster than deepcopy).
    run = _Run(spec, InferenceRolloutStatus.model_validate(status.model_dump()), world, now)
    if world.invalid and not world.deleting:
        _note_invalid(run)
    if world.deleting:
        _on_delete(run)
    elif run.status.stable_revision is None:
        _first_release(run)
    elif world.template_hash == run.status.stable_revision:
        _at_stable(run)
    elif world.invalid:
        _invalid_release(run)
    else:
        _release(run)
    if not world.deleting:
        _old_revisions(run)
        _reconcile_route(run)
        _note_rejection(run)
        _recheck_backends(run)
        _record_drill(run)
    st = run.status
    if not world.deleting:
        st.release_cost, ended = cost.account(spec, st, world, run.actions, now)
        if ended is not None:
            run.event("Normal", r.RELEASE_COST, cost.summary(ended))
    st.replicas = serving_pods(st, world, run.actions)
    st.selector = serving_selector(world.rollout, st, world.templates)
    st.message = _message(run)
    apply_conditions(spec, st, world, now)
    requeue = min([*run.wakeups, IDLE_SECONDS])
    return Decision(actions=tuple(run.actions), status=st, requeue_after=requeue,
                    rolled_back=run.rolled_back[0] if run.rolled_back else None,
                    deletion_hold=_deletion_hold(run) if world.deleting else 0.0)


# --- the paths ----------------------------------------------------------------------------------


def _on_delete(run: _Run) -> None:
    """All traffic to stable, and the canary off the route (its Service is about to be
    garbage-collected with the rollout).  With a user-owned route the stable's objects are then
    orphaned, so the route keeps a live backend.  A route that is gone (a GitOps prune that took
    it first) carries no traffic to protect: nothing is written and nothing orphaned.

    The canary leaves like an aborted one: its pods are kept ``abortScaleDownDelay`` after it
    left the route (``oldRevisions``), because a gateway applies a route change a moment after
    the API server holds it and sends the canary its share until then; collected at once, those
    requests would fail (502s from Traefik in the sandbox).  :func:`_deletion_hold` keeps the
    rollout, and so its revisions, until then."""
    st = run.status
    if run.world.route is None:
        return
    if st.stable_revision and st.canary_revision:
        _abandon_canary(run)
        run.event("Normal", r.DELETING, r.DELETING_MSG.format(
            stable=st.stable_revision, delay=run.spec.strategy.abort_scale_down_delay))
    if st.stable_revision:
        _reconcile_route(run)
        if run.spec.traffic.gateway_api.http_route_ref is not None:
            run.actions.append(OrphanRevision(st.stable_revision))


#: A deletion waits for draining revisions at most this long after it was asked for: time for a
#: gateway to follow the route (seconds), not the hour an ``abortScaleDownDelay`` kept for
#: forensics may say.
DELETION_DRAIN_LIMIT_SECONDS = 30.0


def _deletion_hold(run: _Run) -> float:
    """Seconds the deleted rollout must stay: until every revision that left the route is past
    its scale-down time, so no pod a gateway may still send to is collected; at most
    :data:`DELETION_DRAIN_LIMIT_SECONDS` after the deletion.  Only where the route outlives the
    rollout (a user-owned ``httpRouteRef``): an owned route is collected with the revisions,
    and the host's traffic ends with it, as the deletion asked."""
    if run.world.route is None or run.spec.traffic.gateway_api.http_route_ref is None:
        return 0.0
    dues = [from_iso(due) for rev, due in run.status.old_revisions.items()
            if rev in run.world.revisions]
    until = max([due for due in dues if due is not None], default=run.now)
    if run.world.deleting_since is not None:
        until = min(until, run.world.deleting_since
                    + timedelta(seconds=DELETION_DRAIN_LIMIT_SECONDS))
    return max(0.0, (until - run.now).total_seconds())


def _record_drill(run: _Run) -> None:
    """A drill's result, once: an Event (and so a ``Drill`` notice) the first time the operator
    sees a result id, remembered in ``status.drillRecorded``. The CLI wrote the result; telling
    people is the operator's, which knows the rollout's notification settings."""
    drill = run.world.drill
    if drill is None or drill.id == run.status.drill_recorded:
        return
    run.status.drill_recorded = drill.id
    if drill.passed:
        run.event("Normal", r.DRILL_PASSED, drill.summary)
    else:
        run.event("Warning", r.DRILL_FAILED, drill.summary)


def _note_invalid(run: _Run) -> None:
    """One Warning Event when a release becomes invalid (the condition carries it after)."""
    valid = next((c for c in run.status.conditions if c.type == "Valid"), None)
    if valid is None or valid.status != "False":
        run.event("Warning", r.INVALID_SPEC,
                  r.INVALID_SPEC_MSG.format(problems="; ".join(run.world.invalid)))


def _first_release(run: _Run) -> None:
    if run.world.invalid:
        return
    st, rev = run.status, run.world.template_hash
    st.stable_revision = rev
    st.canary_weight = 0
    run.event("Normal", r.FIRST_RELEASE,
              r.FIRST_RELEASE_MSG.format(revision=rev, replicas=run.spec.replicas))
    run.ensure(rev, run.spec.replicas)
    run.wake_in(POLL_SECONDS)


def _at_stable(run: _Run) -> None:
    """No release: the template is the stable one (also after a revert mid-release)."""
    st = run.status
    if st.canary_revision:
        _abandon_canary(run)
    st.aborted, st.abort_reason, st.aborted_at, st.paused_reason = False, None, None, None
    st.requests = Requests()
    assert st.stable_revision is not None
    run.ensure(st.stable_revision, _stable_pods(run, run.spec.replicas))
    stable = run.world.revisions.get(st.stable_revision)
    if stable is None or stable.ready < run.spec.replicas:
        run.wake_in(POLL_SECONDS)


def _invalid_release(run: _Run) -> None:
    """An invalid template never receives traffic; the stable keeps serving."""
    st = run.status
    if st.canary_revision:
        _abandon_canary(run)
    assert st.stable_revision is not None
    run.ensure(st.stable_revision, _stable_pods(run, run.spec.replicas))


def _release(run: _Run) -> None:
    st = run.status
    if st.canary_revision != run.world.template_hash:
        if st.canary_revision:
            run.event("Normal", r.TEMPLATE_CHANGED, r.TEMPLATE_CHANGED_MSG.format(
                old=st.canary_revision, new=run.world.template_hash))
            _abandon_canary(run)
        _start_release(run, r.NEW_RELEASE, r.NEW_RELEASE_MSG.format(
            canary=run.world.template_hash, stable=st.stable_revision,
            steps=len(run.spec.strategy.steps)))
    if st.aborted:
        if not st.requests.retry:
            _stay_aborted(run)
            return
        _start_release(run, r.RETRY_REQUESTED, r.RETRY_REQUESTED_MSG.format(
            canary=st.canary_revision))
    if st.requests.abort:
        _abort(run, r.ABORT_REQUESTED, r.ABORT_REQUESTED_MSG)
        return
    _fit_steps(run)
    _steer_pause(run)
    # Measurements are of the traffic the canary carried; a release (re)started in this call
    # carries none, and what was measured belonged to the canary it replaced.
    if run.world.measurements is not None and carries_traffic(run.spec, st) and _analyse(run):
        return
    outcome = run.world.evaluation or gate.interrupted(st)
    if outcome is not None and _evaluate(run, outcome):
        return
    _progress(run)


# --- releases -------------------------------------------------------------------------------------


def _start_release(run: _Run, reason: str, message: str) -> None:
    st = run.status
    st.canary_revision = run.world.template_hash
    st.current_step = 0
    st.canary_weight = 0
    st.step_entered_at = to_iso(run.now)
    st.step_started_at = None
    st.last_analysis_at = None
    st.analysis = {}
    st.evaluation = None  # the gate runs again for this canary (also on retry)
    st.evaluation_running = None
    st.aborted, st.abort_reason, st.aborted_at = False, None, None
    keep_pause = st.requests.pause
    st.requests = Requests(pause=keep_pause)
    if st.paused_reason != r.PAUSE_REQUESTED:
        st.paused_reason = None
    run.event("Normal", reason, message)


def _abandon_canary(run: _Run) -> None:
    """Traffic back to stable in one write; the canary goes after ``abortScaleDownDelay``."""
    st = run.status
    assert st.canary_revision is not None
    delay = run.spec.strategy.abort_scale_down_delay_seconds
    st.old_revisions[st.canary_revision] = to_iso(run.now + timedelta(seconds=delay))
    st.canary_revision, st.current_step, st.canary_weight = None, None, 0
    st.step_entered_at = st.step_started_at = st.last_analysis_at = None
    st.evaluation = st.evaluation_running = None


def _fit_steps(run: _Run) -> None:
    """Steps shortened mid-release: continue at the first step that still carries the canary's
    weight (see :func:`fit_index`); its hold and analysis start again."""
    st = run.status
    index = fit_index(run.spec, st)
    if index is None:
        return
    run.event("Normal", r.STEPS_CHANGED, r.STEPS_CHANGED_MSG.format(
        old=(st.current_step or 0) + 1, new=index + 1, steps=len(run.spec.strategy.steps)))
    st.current_step = index
    st.step_entered_at = to_iso(run.now)
    if run.spec.strategy.steps[index].weight != st.canary_weight:
        st.step_started_at = None


def _abort(run: _Run, reason: str, message: str) -> None:
    st = run.status
    run.rolled_back = (reason, message)
    st.aborted, st.abort_reason, st.aborted_at = True, reason, to_iso(run.now)
    st.canary_weight = 0
    st.step_started_at = None
    st.paused_reason = None
    st.requests = Requests()
    run.event("Warning", reason, message)
    _stay_aborted(run)


def _stay_aborted(run: _Run) -> None:
    """All traffic on stable; the canary keeps its pods for ``abortScaleDownDelay`` (in-flight
    requests drain, and its logs stay readable), then scales to zero but stays for a retry."""
    st = run.status
    st.requests = Requests()
    assert st.stable_revision is not None and st.canary_revision is not None
    waited = seconds_since(st.aborted_at, run.now) or 0.0
    delay = run.spec.strategy.abort_scale_down_delay_seconds
    canary = run.world.revisions.get(st.canary_revision)
    if canary is None:
        # Never created: withdraw a scale-up decided earlier in this call (the step's), so an
        # aborted canary is not born after the abort.
        run.cancel_scaling(st.canary_revision)
        canary_pods = 0
    elif waited >= delay:
        run.ensure(st.canary_revision, 0)
        canary_pods = 0
    else:
        canary_pods = canary.desired
        run.ensure(st.canary_revision, canary_pods)  # keeps its pods, grows no more
    if waited < delay:
        run.wake_in(delay - waited)
    held = 0 if _in_place(run) else canary_pods  # in place: no pod of its own in the quota
    run.ensure(st.stable_revision, _stable_pods(run, run.spec.replicas, held))


def _steer_pause(run: _Run) -> None:
    st, rq = run.status, run.status.requests
    if rq.pause:
        st.paused_reason = r.PAUSE_REQUESTED
        rq.pause = False
    if rq.resume:
        st.paused_reason = None
        _forget_errors(st)
        gate.reset_errors(st)
        rq.resume = False


def _forget_errors(st: InferenceRolloutStatus) -> None:
    """Count the metrics' errors in a row from zero again."""
    for result in st.analysis.values():
        result.consecutive_errors = 0


def _analyse(run: _Run) -> bool:
    """Record the measurements; roll back or pause per the verdicts.  True when rolled back."""
    st, spec = run.status, run.spec
    assert run.world.measurements is not None
    rates = an.rates_for(spec.analysis, len(spec.strategy.steps))
    exposure = an.pass_exposure(spec.strategy.steps, st.current_step)
    for metric in spec.analysis.effective_metrics:
        m = run.world.measurements.get(metric.name)
        if m is None:
            continue
        before = st.analysis.get(metric.name)
        after = an.record(metric, before, m, run.now, rates,
                          vanished=_series_vanished(run, before, m),
                          unscraped=_not_scraped_yet(run, metric, before),
                          step=st.step_started_at, exposure=exposure)
        st.analysis[metric.name] = after
        if before is None or before.verdict != after.verdict:
            shown = "n/a" if after.value is None else f"{after.value:.4g}"
            run.event("Warning" if after.verdict == "Fail" else "Normal", r.VERDICT_CHANGED,
                      r.VERDICT_CHANGED_MSG.format(metric=metric.name, verdict=after.verdict,
                                                   value=shown, threshold=an.judged_against(after)))
    st.last_analysis_at = to_iso(run.now)
    failing = an.failed(spec.analysis, st.analysis)
    if failing:
        _abort(run, r.ANALYSIS_FAILED,
               r.ANALYSIS_FAILED_MSG.format(details=an.summarise(st.analysis, failing)))
        return True
    stuck = an.erroring(spec.analysis, st.analysis)
    if stuck:
        details = an.summarise(st.analysis, stuck)
        count = spec.analysis.consecutive_error_limit
        if spec.analysis.on_error_limit == "Abort":
            _abort(run, r.ERROR_LIMIT,
                   r.ERROR_LIMIT_ABORT_MSG.format(details=details, count=count))
            return True
        if st.paused_reason != r.ERROR_LIMIT:
            st.paused_reason = r.ERROR_LIMIT
            run.event("Warning", r.ERROR_LIMIT,
                      r.ERROR_LIMIT_PAUSE_MSG.format(details=details, count=count))
    return _bound_inconclusive(run)


def _series_vanished(run: _Run, before: MetricResult | None, m: Measurement) -> bool:
    """No data now, a value earlier in this step, and Ready canary pods enough for its weight
    (a canary that lost its pods is the capacity guard's, not a failed verdict)."""
    st = run.status
    if m.error is not MeasurementError.NO_DATA or before is None or before.value is None:
        return False
    measured, started = from_iso(before.measured_at), from_iso(st.step_started_at)
    step = current_step(run.spec, st)
    if measured is None or started is None or measured <= started or step is None:
        return False
    canary = run.world.revisions.get(st.canary_revision or "")
    ready = canary.ready if canary else 0
    return carried_weight(run.spec, step, ready, st.canary_weight,
                          _in_place(run)) >= st.canary_weight > 0


def _not_scraped_yet(run: _Run, metric: MetricSpec, before: MetricResult | None) -> str:
    """Why NoData would be expected now (empty if it would not): no value yet in this step, and
    its weight not in force, or in force for less than Prometheus needs to discover and scrape
    new pods.  A canary's first weight (and a weight raised again on pods that came back) is
    set as its pods turn Ready, seconds before Prometheus has their first samples: counted as
    errors, those NoData paused releases at ``consecutiveErrorLimit`` (e2e, 2026-12-04)."""
    st = run.status
    started = from_iso(st.step_started_at)
    measured = from_iso(before.measured_at) if before is not None else None
    if (before is not None and before.value is not None and measured is not None
            and started is not None and measured > started):
        return ""  # measured in this step: gone now is the vanish check's
    prometheus = run.spec.analysis.prometheus
    grace = an.first_scrapes_seconds(metric, prometheus.scrape_interval_seconds
                                     if prometheus else 30.0)
    held = None if started is None else (run.now - started).total_seconds()
    return an.collecting(held, grace) if held is None or held < grace else ""


def _bound_inconclusive(run: _Run) -> bool:
    """``inconclusiveLimit``: a step whose metrics are still undecided that long after its
    weight was reached pauses (lifted by itself once every metric passes) or rolls back.  True
    when rolled back."""
    st, analysis = run.status, run.spec.analysis
    names = [m.name for m in analysis.effective_metrics]
    undecided = [n for n in names if (res := st.analysis.get(n)) is None
                 or res.verdict == "Inconclusive"]
    if st.paused_reason == r.INCONCLUSIVE_LIMIT and not undecided:
        st.paused_reason = None
        run.event("Normal", r.INCONCLUSIVE_RESOLVED, r.INCONCLUSIVE_RESOLVED_MSG)
        return False
    waited = seconds_since(st.step_started_at, run.now)
    limit = analysis.inconclusive_limit_seconds
    if limit is None or waited is None or not undecided:
        return False
    if waited < limit:
        return False
    details = an.still_needed(st.analysis, undecided)
    if analysis.on_inconclusive == "Rollback":
        _abort(run, r.INCONCLUSIVE_LIMIT, r.INCONCLUSIVE_ROLLBACK_MSG.format(
            limit=format_duration(limit), details=details))
        return True
    if st.paused_reason is None:
        st.paused_reason = r.INCONCLUSIVE_LIMIT
        run.event("Warning", r.INCONCLUSIVE_LIMIT, r.INCONCLUSIVE_PAUSE_MSG.format(
            limit=format_duration(limit), details=details))
    return False


def _evaluate(run: _Run, evaluation: EvaluationOutcome) -> bool:
    """Record the business evaluation; roll back or pause per its result.  True when rolled
    back."""
    st, spec = run.status, run.spec
    assert spec.evaluation is not None
    outcome = gate.record(spec, st, evaluation, run.now)
    ev = st.evaluation
    if outcome is None or ev is None:
        return False
    scores = {"canary": st.canary_revision, "canary_score": ev.canary_score or 0.0,
              "stable_score": ev.stable_score or 0.0, "max_drop": spec.evaluation.max_drop_points,
              "cases": evaluation.cases}
    if outcome == "Fail":
        _abort(run, r.EVALUATION_FAILED, r.EVALUATION_FAILED_MSG.format(**scores))
        return True
    if outcome == "Pass":
        run.event("Normal", r.EVALUATION_PASSED, r.EVALUATION_PASSED_MSG.format(**scores))
        return False
    limit = spec.analysis.consecutive_error_limit
    if outcome == "ErrorLimit" and spec.analysis.on_error_limit == "Abort":
        _abort(run, r.EVALUATION_ERROR_LIMIT,
               r.EVALUATION_ERROR_LIMIT_ABORT_MSG.format(count=limit, detail=ev.message))
        return True
    if outcome == "ErrorLimit":
        st.paused_reason = r.EVALUATION_ERROR_LIMIT
        run.event("Warning", r.EVALUATION_ERROR_LIMIT,
                  r.EVALUATION_ERROR_LIMIT_PAUSE_MSG.format(count=limit, detail=ev.message))
        return False
    run.event("Warning", r.EVALUATION_ERROR, r.EVALUATION_ERROR_MSG.format(
        canary=st.canary_revision, count=ev.consecutive_errors, limit=limit, detail=ev.message,
        interval=spec.analysis.interval))
    return False


def _progress(run: _Run) -> None:
    """Capacity, weight, hold and analysis for the current step; at most one step advance."""
    st, spec = run.status, run.spec
    assert st.current_step is not None
    if _route_rejected(run):
        return
    if st.requests.promote_full and st.current_step < len(spec.strategy.steps) - 1:
        st.current_step = len(spec.strategy.steps) - 1
        st.step_entered_at, st.step_started_at = to_iso(run.now), None
        if st.paused_reason == r.MANUAL_STEP:  # that wait belonged to the step left behind
            st.paused_reason = None
    for _ in range(2):
        step = spec.strategy.steps[st.current_step]
        if not _capacity_and_weight(run, step):
            return
        if not _step_done(run, step):
            return
        if not _advance(run):
            return


def _capacity_and_weight(run: _Run, step: Step) -> bool:
    """Raise the weight once the canary can serve it, and scale both revisions for the step at
    the weight this call leaves (the split follows ``spec.replicas`` as it is now, so a scale by
    an autoscaler re-splits the fleet without touching the step).  True when the step's weight
    is in place."""
    st = run.status
    canary = run.world.revisions.get(st.canary_revision or "")
    ready = canary.ready if canary else 0
    if _guard_capacity(run, step, ready):
        return False
    in_place = _raise_weight(run, step, ready)
    if not st.aborted:
        _scale_for_step(run, step, ready)
    return in_place


def _scale_for_step(run: _Run, step: Step, ready: int) -> None:
    st, spec = run.status, run.spec
    assert st.canary_revision is not None and st.stable_revision is not None
    stable = run.world.revisions.get(st.stable_revision)
    counts = release_pod_counts(spec, step, ready, stable.desired if stable else spec.replicas,
                                _other_pods(run), _in_place(run))
    if stable is not None and counts.stable > stable.desired:
        run.ensure(st.canary_revision, counts.canary)  # shrink first: within quota at every write
        run.ensure(st.stable_revision, counts.stable)
    else:
        run.ensure(st.stable_revision, counts.stable)
        run.ensure(st.canary_revision, counts.canary)


def _raise_weight(run: _Run, step: Step, ready: int) -> bool:
    """The step's weight onto the canary once its Ready pods can carry it (and nothing holds
    it); the progress deadline rolls back a canary that does not get there.  True when the
    weight was already in place."""
    st, spec = run.status, run.spec
    canary = run.world.revisions.get(st.canary_revision or "")
    if st.canary_weight >= step.weight and (step.weight > 0 or st.step_started_at is not None):
        return _weight_in_force(run, step)
    if not ready_enough(spec, step, ready, _in_place(run)):
        if _deadline_passed(run):
            stuck = canary.unschedulable if canary else 0
            _abort(run, r.PROGRESS_DEADLINE, r.PROGRESS_DEADLINE_MSG.format(
                ready=ready, needed=canary_target(spec, step, _in_place(run)),
                deadline=format_duration(spec.strategy.progress_deadline_seconds),
                unschedulable=f" ({stuck} pods unschedulable: not enough GPUs)" if stuck else ""))
        return False
    if st.paused_reason:
        return False
    if gate.waiting(spec, st):
        run.wake_in(gate.retry_in(spec, st, run.now) or POLL_SECONDS)
        return False
    if _warming_up(run):
        if _deadline_passed(run):
            _abort(run, r.WARMUP_NOT_DONE, r.WARMUP_NOT_DONE_MSG.format(
                answered=_probes_answered(run), needed=_warmup_needed(run),
                deadline=format_duration(spec.strategy.progress_deadline_seconds)))
        return False
    if _latest_failed(run):
        # A failure within failureLimit is tolerated, not trusted: no more traffic until a
        # measurement passes again.
        _wake_for_analysis(run)
        return False
    if _gateway_behind(run):
        # A weight is raised only from a route the gateway serves: never onto a backend it
        # cannot find yet (it would answer that share with 500; decide() has its Service
        # checked, _recheck_backends).
        if _deadline_passed(run):
            _route_not_accepted(run, run.world.route_acceptance)
        return False
    if testers_step(step):
        return _testers_routed(run, step)
    st.canary_weight = step.weight
    st.weight_replicas = spec.replicas
    steps = len(spec.strategy.steps)
    run.event("Normal", r.STEP_WEIGHT_SET, r.STEP_WEIGHT_SET_MSG.format(
        step=st.current_step + 1 if st.current_step is not None else 0, steps=steps,
        weight=step.weight, canary=st.canary_revision))
    if route_gate.trusted_as_written(spec, run.world.route_acceptance):
        _start_hold(run, step)
    else:
        # The gateway's answer comes with the route's next generation: the hold starts once it
        # accepts it (_weight_in_force), not when the API server stores it.
        st.step_started_at = None
        run.wake_in(POLL_SECONDS)
    return False


def _warmup_needed(run: _Run) -> int:
    probes = run.spec.analysis.probes
    return probes.warmup_requests if probes is not None else 0


def _probes_answered(run: _Run) -> int:
    p = run.world.probes
    return p.canary_answered if p is not None and p.canary == run.status.canary_revision else 0


def _warming_up(run: _Run) -> bool:
    """``probes.warmupRequests``: the canary's first weight waits until that many of its probes
    answered (its prefix cache and kernels warm, so a cold first minute is not read as a
    regression).  Only before the first weight: a later step's pods are warm."""
    st = run.status
    return (st.canary_weight == 0 and (st.current_step or 0) == 0
            and _probes_answered(run) < _warmup_needed(run))


def _testers_routed(run: _Run, step: Step) -> bool:
    """A testers' step has no weight to raise: its hold starts once the route carries the
    testers' header route (core/header_routes.py turns it on with the canary's first Ready pod)
    and the gateway serves that generation."""
    st, world = run.status, run.world
    if _served(run, "testers" in world.route_header_routes and world.route == desired_route(st)):
        _start_hold(run, step)
        run.event("Normal", r.TESTERS_ROUTED, r.TESTERS_ROUTED_MSG.format(
            steps=len(run.spec.strategy.steps), canary=st.canary_revision))
    return False


def _start_hold(run: _Run, step: Step) -> None:
    run.status.step_started_at = to_iso(run.now)
    run.wake_in(0 if run.spec.analysis.effective_metrics else step.hold_seconds)


def _weight_in_force(run: _Run, step: Step) -> bool:
    """The step's weight is written.  True once the gateway serves it (:func:`_served`); a
    rollback itself never waits for the gateway."""
    st, world = run.status, run.world
    if st.step_started_at is not None:
        return True
    if not _served(run, world.route == desired_route(st)):
        return False
    _start_hold(run, step)
    if isinstance(world.route_acceptance, RouteApplied):
        run.event("Normal", r.ROUTE_ACCEPTED, r.ROUTE_HOLD_STARTS_MSG.format(
            step=(st.current_step or 0) + 1, steps=len(run.spec.strategy.steps),
            generation=world.route_acceptance.generation, weight=st.canary_weight))
    return True


def _served(run: _Run, route_holds_it: bool) -> bool:
    """Whether the gateway serves what the step needs: the route holds it and the gateway has
    accepted that generation (or nothing is awaited, see :mod:`.route_gate`).  A step's hold
    starts here, not when the API server stores the route; one the gateway has not served by
    the step's progress deadline rolls the release back."""
    if route_holds_it and route_gate.verdict(run.spec, run.world.route_acceptance) == "Applied":
        return True
    if _deadline_passed(run):
        _route_not_accepted(run, run.world.route_acceptance if route_holds_it else None)
    return False


def _route_not_accepted(run: _Run, acceptance: RouteAcceptance | None) -> None:
    """Roll back: the gateway did not serve the step's weight within the progress deadline
    (``acceptance``: what it last said of the route that holds it; None if it holds another)."""
    _abort(run, r.ROUTE_NOT_ACCEPTED, r.ROUTE_NOT_ACCEPTED_MSG.format(
        generation=acceptance.generation if acceptance else "(unknown)",
        deadline=format_duration(run.spec.strategy.progress_deadline_seconds),
        detail=route_gate.pending_detail(acceptance)))


def _deadline_passed(run: _Run) -> bool:
    """Whether the step has waited ``progressDeadline`` since it was entered; if not, look
    again within :data:`POLL_SECONDS` (the fallback for a missed watch event)."""
    waited = seconds_since(run.status.step_entered_at, run.now) or 0.0
    deadline = run.spec.strategy.progress_deadline_seconds
    if waited >= deadline:
        return True
    run.wake_in(min(POLL_SECONDS, deadline - waited))
    return False


def _route_rejected(run: _Run) -> bool:
    """The gateway refused the route's generation that carries the canary's weight: the release
    stops (rolled back; the gateway's reason and message in the condition and Event).  Judged
    only once the canary has a weight and the route holds what the status says: a canary
    added at 0% may be refused for a moment before its Service exists (BackendNotFound)."""
    st, world = run.status, run.world
    rejected = world.route_acceptance
    if (st.canary_weight == 0 or world.route != desired_route(st)
            or not isinstance(rejected, RouteRejected)
            or route_gate.verdict(run.spec, rejected) != "Rejected"):
        return False
    if _backend_unresolved(run) is not None:
        _withdraw_weight(run, rejected)
        return True
    _abort(run, r.ROUTE_REJECTED, "rolled back: " + route_gate.rejection_message(rejected))
    return True


def _gateway_behind(run: _Run) -> bool:
    """The route holds what the status implies and the gateway has not caught up with it yet
    (no answer for its generation, or a backend it cannot find yet).  A route about to be
    written here (or by a call a crash cut short) is not judged: its generation has no answer
    yet, and a restarted call must decide the same.  A final refusal is judged on the
    generation that carries the canary's weight (:func:`_route_rejected`)."""
    if run.world.route != desired_route(run.status):
        return False
    return (route_gate.verdict(run.spec, run.world.route_acceptance) == "Pending"
            or _backend_unresolved(run) is not None)


def _backend_unresolved(run: _Run) -> RouteRejected | None:
    """The gateway cannot find a backend of the route as the status wants it (route_gate)."""
    if run.world.route != desired_route(run.status):
        return None
    return route_gate.unresolved_backend(run.spec, run.world.route_acceptance)


def _recheck_backends(run: _Run) -> None:
    """While the gateway cannot find a backend, have the Services (and pools) of the route's
    revisions checked and created if missing: a revision is otherwise asked for only when its
    Deployment's size is off, so a Service deleted by hand (or never created) would stay
    missing -- the stable's too, with all traffic answered 500 by the gateway.  Called last in
    :func:`decide`, after every scaling of the call: an EnsureRevision already decided for a
    revision checks its Service as well (the handler creates backends before Deployments)."""
    if _backend_unresolved(run) is None:
        return
    for revision in desired_route(run.status):
        seen = run.world.revisions.get(revision)
        if seen is None:
            continue
        if not any(isinstance(a, EnsureRevision) and a.revision == revision
                   for a in run.actions):
            run.actions.append(EnsureRevision(revision, seen.desired))
    run.wake_in(POLL_SECONDS)


def _withdraw_weight(run: _Run, rejected: RouteRejected) -> None:
    """The canary's share back to 0% while the gateway cannot find its backend, the step
    entered again (its hold and the progress deadline count from now); :func:`_raise_weight`
    gives the weight back once the gateway resolves the backend."""
    st = run.status
    run.event("Warning", r.BACKEND_UNRESOLVED, r.BACKEND_UNRESOLVED_MSG.format(
        rejection=route_gate.rejection_message(rejected), weight=st.canary_weight,
        deadline=format_duration(run.spec.strategy.progress_deadline_seconds)))
    st.canary_weight = 0
    st.step_entered_at = to_iso(run.now)
    st.step_started_at = None
    run.wake_in(POLL_SECONDS)


def _note_rejection(run: _Run) -> None:
    """One Warning Event when the gateway starts refusing the route outside a rollback decided
    here (e.g. at stable); the condition carries it after.  Not for a route that gives a
    release's canary 0%: the refusal may be the moment before its Service exists, and the
    generation that carries its first weight is judged anyway (:func:`_route_rejected`)."""
    acceptance, st = run.world.route_acceptance, run.status
    canary_held = (run.world.route or {}).get(st.canary_revision or "", 0)
    if (run.rolled_back is not None or not isinstance(acceptance, RouteRejected)
            or route_gate.verdict(run.spec, acceptance) != "Rejected"
            or (st.canary_revision is not None and canary_held == 0 and not st.aborted)):
        return
    before = next((c for c in run.status.conditions if c.type == r.ROUTE_ACCEPTED), None)
    if before is None or before.status != "False":
        run.event("Warning", r.ROUTE_REJECTED, route_gate.rejection_message(acceptance))


def _guard_capacity(run: _Run, step: Step, ready: int) -> bool:
    """Never route to what cannot serve, at every reconcile: a canary that lost Ready pods after
    its weight was set keeps only the share its Ready pods carry (0 if none), in one write, as
    far as the stable's Ready pods can take the rest.  The step then waits for pods again, and
    the progress deadline (counted from now) rolls the release back if they do not come."""
    st = run.status
    if carried_weight(run.spec, step, ready, st.canary_weight,
                      _in_place(run)) >= st.canary_weight:
        if st.canary_weight > 0:  # its own pods carry it in today's fleet: the new reference
            st.weight_replicas = run.spec.replicas
        return False
    carried = _weight_carried(run, run.spec, step, ready)
    if carried >= st.canary_weight:
        return False
    if st.weight_replicas is not None and st.weight_replicas < run.spec.replicas:
        # Scaled up since the canary last carried its weight: its pods were not lost, the fleet
        # grew (kubectl scale, an autoscaler).  The weight holds while the new pods start; a pod
        # lost meanwhile still counts, against the fleet the weight was carried at.
        before = run.spec.model_copy(update={"replicas": st.weight_replicas})
        if _weight_carried(run, before, step, ready) >= st.canary_weight:
            return False
    if _latest_failed(run):
        # Failing (within failureLimit) and losing its pods: no measurement at the lowered
        # weight could ever clear that failure, so the release ends here.
        _abort(run, r.CANARY_UNAVAILABLE, r.CANARY_UNAVAILABLE_FAILING_MSG.format(
            canary=st.canary_revision, ready=ready, weight=st.canary_weight,
            details=an.summarise(st.analysis, [m.name for m in
                                                run.spec.analysis.effective_metrics])))
        return True
    run.event("Warning", r.CANARY_UNAVAILABLE, r.CANARY_UNAVAILABLE_MSG.format(
        canary=st.canary_revision, ready=ready, weight=st.canary_weight, carried=carried,
        deadline=format_duration(run.spec.strategy.progress_deadline_seconds)))
    st.canary_weight = carried
    st.weight_replicas = run.spec.replicas
    st.step_entered_at = to_iso(run.now)
    st.step_started_at = None
    # The queries that found no canary series since its pods went (this call's among them)
    # measured the loss this guard handles, not a metric that cannot be measured: counted on,
    # they would pause the release (consecutiveErrorLimit) soon after its pods are back.
    _forget_errors(st)
    if st.paused_reason in (r.MANUAL_STEP, r.INCONCLUSIVE_LIMIT):
        # Those waits were about the step at its full weight.
        st.paused_reason = None
    return False


def _weight_carried(run: _Run, spec: InferenceRolloutSpec, step: Step, ready: int) -> int:
    """The share ``ready`` canary pods carry in a fleet of ``spec.replicas``, never below what
    the stable's Ready pods cannot take (in swap mode the stable has shrunk for the canary)."""
    stable = run.world.revisions.get(run.status.stable_revision or "")
    stable_share = min(100, 100 * (stable.ready if stable else 0) // spec.replicas)
    return max(carried_weight(spec, step, ready, run.status.canary_weight, _in_place(run)),
               100 - stable_share)


def _latest_failed(run: _Run) -> bool:
    names = {m.name for m in run.spec.analysis.effective_metrics}
    return any(res.verdict == "Fail" for n, res in run.status.analysis.items() if n in names)


def _step_done(run: _Run, step: Step) -> bool:
    """The hold has elapsed and every metric's latest verdict, taken at or after the hold's end,
    is Pass (or the user asked to promote)."""
    st, spec = run.status, run.spec
    hold_end = _hold_end(spec, st)
    started = from_iso(st.step_started_at)
    assert hold_end is not None and started is not None
    if run.now <= started:
        # The weight was set at this instant: a step lasts at least until a later call (also
        # when promoted, or without hold or metrics), so the call that set it is a fixed point.
        run.wake_in(0)
        return False
    if st.requests.promote or st.requests.promote_full:
        return True
    if st.paused_reason:
        return False
    if run.now < hold_end:
        run.wake_in((hold_end - run.now).total_seconds())
        _wake_for_analysis(run)
        return False
    for metric in spec.analysis.effective_metrics:
        result = st.analysis.get(metric.name)
        measured = from_iso(result.measured_at) if result else None
        # Taken after the weight was set (one taken at that instant saw the previous weight) and
        # at or after the hold's end, so it covers the whole hold at this step's weight.
        if (result is None or result.verdict != "Pass" or measured is None
                or measured < hold_end or measured <= started):
            _wake_for_analysis(run)
            return False
    if step.manual:
        st.paused_reason = r.MANUAL_STEP
        return False
    return True


def _advance(run: _Run) -> bool:
    """Go to the next step, or promote after the last.  True when there is a next step."""
    st, spec = run.status, run.spec
    assert st.current_step is not None
    steps = len(spec.strategy.steps)
    st.requests.promote = False
    if st.paused_reason == r.MANUAL_STEP:
        st.paused_reason = None
    run.event("Normal", r.STEP_COMPLETE,
              r.STEP_COMPLETE_MSG.format(step=st.current_step + 1, steps=steps,
                                         canary=st.canary_revision))
    if st.current_step + 1 >= steps:
        _promote(run)
        return False
    st.current_step += 1
    st.step_entered_at, st.step_started_at = to_iso(run.now), None
    return True


def _promote(run: _Run) -> None:
    """The canary becomes stable by relabelling, never by copying pods (a model reload costs
    minutes of GPU time); the old stable scales down after ``scaleDownDelay``."""
    st, spec = run.status, run.spec
    assert st.canary_revision is not None and st.stable_revision is not None
    old, new = st.stable_revision, st.canary_revision
    # It keeps its pods until it goes: grows no more (nor returns, if already gone).
    run.cancel_scaling(old)
    delay = spec.strategy.scale_down_delay_seconds
    st.old_revisions[old] = to_iso(run.now + timedelta(seconds=delay))
    st.stable_revision = new
    st.canary_revision, st.current_step, st.canary_weight = None, None, 0
    st.step_entered_at = st.step_started_at = None
    st.requests, st.paused_reason = Requests(), None
    run.event("Normal", r.PROMOTED,
              r.PROMOTED_MSG.format(canary=new, old=old, delay=format_duration(delay)))
    run.ensure(new, _stable_pods(run, spec.replicas))
    run.wake_in(delay)


# --- capacity -----------------------------------------------------------------------------


def _leaves_now(run: _Run, rev: str) -> bool:
    """Whether :func:`_old_revisions` deletes ``rev`` in this call (it is neither stable nor
    canary, and its delay has passed)."""
    due_text = run.status.old_revisions.get(rev)
    if due_text is None:  # an orphan: adopted now, deleted after scaleDownDelay
        return run.spec.strategy.scale_down_delay_seconds == 0
    due = from_iso(due_text)
    return due is None or run.now >= due


def _other_pods(run: _Run) -> int:
    """Pods of revisions that are neither stable nor canary and stay after this call: in swap
    mode they hold GPUs of the quota until they are deleted.  An in-place serving version (an
    abandoned adapter canary, the old stable of a promoted one) holds none: its pods are the
    stable's."""
    live = {run.status.stable_revision, run.status.canary_revision}
    return sum(s.desired for rev, s in run.world.revisions.items()
               if rev not in live and not _leaves_now(run, rev)
               and not in_place(run.world.templates, run.status.stable_revision, rev))


def _in_place(run: _Run) -> bool:
    """The canary runs on the stable's own pods (an adapter release): sized by
    ``capacity.in_place_canary_pods``, never by adding pods.  Judged against the status as
    this call leaves it: after a promotion in this call the old stable is the one in place."""
    return in_place(run.world.templates, run.status.stable_revision, run.status.canary_revision)


def _stable_pods(run: _Run, wanted: int, also_held: int = 0) -> int:
    """The stable's pod count toward ``wanted`` within the swap quota (``also_held``: the aborted
    canary's pods, still running)."""
    stable = run.world.revisions.get(run.status.stable_revision or "")
    return stable_within_quota(run.spec, wanted, stable.desired if stable else 0,
                               _other_pods(run) + also_held)


# --- always --------------------------------------------------------------------------------


def _old_revisions(run: _Run) -> None:
    """Scale down revisions no route points at once their delay has passed; adopt orphans (a
    revision Deployment the status does not know, e.g. after a lost status write)."""
    st = run.status
    live = {rev for rev in (st.stable_revision, st.canary_revision) if rev}
    for rev in run.world.revisions:
        if rev not in live and rev not in st.old_revisions:
            delay = run.spec.strategy.scale_down_delay_seconds
            st.old_revisions[rev] = to_iso(run.now + timedelta(seconds=delay))
    for rev, due_text in sorted(st.old_revisions.items()):
        due = from_iso(due_text)
        if rev in live or rev not in run.world.revisions:
            del st.old_revisions[rev]
        elif due is None or run.now >= due:
            run.cancel_scaling(rev)
            # Deletions go before any scaling: the pods they free are counted as free already.
            first_scale = next((i for i, a in enumerate(run.actions)
                                if isinstance(a, EnsureRevision)), len(run.actions))
            run.actions.insert(first_scale, DeleteRevision(rev))
            del st.old_revisions[rev]
        else:
            run.wake_in((due - run.now).total_seconds())


def desired_route(status: InferenceRolloutStatus) -> dict[str, int]:
    """Backend weights by revision that the status implies.  The canary stays on the route at 0%
    while a release is open (a user sees it there); after promotion only the stable remains."""
    out: dict[str, int] = {}
    if status.stable_revision:
        out[status.stable_revision] = 100 - status.canary_weight
    if status.canary_revision:
        out[status.canary_revision] = status.canary_weight
    return out


def _reconcile_route(run: _Run) -> None:
    """Make the route hold what the status says, in one write placed before any scaling, so
    traffic has left a revision before its pods go (and a drifted route is put back)."""
    st = run.status
    if not st.stable_revision:
        return
    routes = header_routes.wanted(run.spec, st, run.world)
    if run.world.route != desired_route(st) or run.world.route_header_routes != routes:
        run.actions.insert(0, SetWeights(st.stable_revision, st.canary_revision, st.canary_weight,
                                         routes))


def _hold_end(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> datetime | None:
    started = from_iso(status.step_started_at)
    step = current_step(spec, status)
    if started is None or step is None:
        return None
    return started + timedelta(seconds=step.hold_seconds)


def _wake_for_analysis(run: _Run) -> None:
    if not run.spec.analysis.effective_metrics:
        return
    last = from_iso(run.status.last_analysis_at)
    every = _look_every(run.spec, run.status)
    run.wake_in(every if last is None else every - (run.now - last).total_seconds())


def _look_every(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> float:
    """After every scrape under ``Sequential`` (``look_every_seconds``), but every ``interval``
    while a metric's last measurement was an error: ``consecutiveErrorLimit`` then still means
    that many intervals of a broken Prometheus, not that many scrapes."""
    if any(r.verdict == "Error" for r in status.analysis.values()):
        return spec.analysis.interval_seconds
    return spec.analysis.look_every_seconds


def _waiting_for_gateway(run: _Run) -> str:
    """The message while the next weight waits for the gateway (:func:`_gateway_behind`) rather
    than for canary pods; empty otherwise."""
    st = run.status
    step = current_step(run.spec, st)
    if step is None or st.canary_weight >= step.weight or not _gateway_behind(run):
        return ""
    where = dict(step=(st.current_step or 0) + 1, steps=len(run.spec.strategy.steps),
                 weight=st.canary_weight, target=step.weight)
    unresolved = _backend_unresolved(run)
    if unresolved is not None:
        return r.BACKEND_UNRESOLVED_WAIT_MSG.format(
            **where, condition=unresolved.condition, reason=unresolved.reason)
    canary = run.world.revisions.get(st.canary_revision or "")
    if not ready_enough(run.spec, step, canary.ready if canary else 0, _in_place(run)):
        return ""
    return r.GATEWAY_PENDING_WAIT_MSG.format(**where)


def _message(run: _Run) -> str:
    st = run.status
    if run.world.invalid:
        return r.INVALID_SPEC_MSG.format(problems="; ".join(run.world.invalid))
    if st.aborted:
        if run.rolled_back is not None:
            return run.rolled_back[1]
        return (st.message if st.message.startswith("rolled back") else
                f"rolled back ({st.abort_reason}); retry or change the template")
    if st.paused_reason == r.MANUAL_STEP and st.current_step is not None:
        return r.MANUAL_STEP_MSG.format(step=st.current_step + 1,
                                        steps=len(run.spec.strategy.steps))
    text = _waiting_for_gateway(run) or step_message(run.spec, st, run.now)
    if st.canary_revision and _warming_up(run):
        text = r.WARMING_UP_MSG.format(answered=_probes_answered(run),
                                       needed=_warmup_needed(run), canary=st.canary_revision)
    if gate.waiting(run.spec, st) and st.current_step is not None:
        canary = run.world.revisions.get(st.canary_revision or "")
        if ready_enough(run.spec, run.spec.strategy.steps[st.current_step],
                        canary.ready if canary else 0, _in_place(run)):
            text = r.EVALUATION_PENDING_MSG.format(steps=len(run.spec.strategy.steps),
                                                   canary=st.canary_revision)
    if st.paused_reason:
        text = f"paused ({st.paused_reason}); {text}" if text else f"paused ({st.paused_reason})"
    if text:
        return text
    return r.RELEASE_COMPLETE_MSG.format(revision=st.stable_revision or "(none)")
