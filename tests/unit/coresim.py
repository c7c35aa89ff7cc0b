"""A tiny simulated cluster for driving the pure core in tests.

It applies the core's actions the way the handler would (weights land on the route, Deployments
get their replica counts) and lets a test decide when pods become Ready and what Prometheus
measures.  It is a fake of the *world*, never of the core under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from inference_rollout.api.effective import effective_metrics
from inference_rollout.api.spec import InferenceRolloutSpec, MetricSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.decide import analysis_due, decide
from inference_rollout.core.revision import template_hash
from inference_rollout.core.types import (
    NO_HEADER_ROUTES,
    Decision,
    DeleteRevision,
    EnsureRevision,
    EvaluationOutcome,
    HeaderRoute,
    Measurement,
    MeasurementError,
    Observation,
    ProbeCounts,
    RevisionState,
    SetWeights,
)
from irsandbox.manifests import container, inference_rollout

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manifest_spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = inference_rollout(
        "chat", replicas=4,
        containers=[container(args=["--model", "m1", "--max-num-seqs", "32"])],
        strategy={"steps": [{"weight": 5, "pause": "1m"}, {"weight": 20, "pause": "1m"},
                            {"weight": 50, "pause": "1m"}, {"weight": 100}]},
        analysis={"interval": "10s", "prometheus": {"address": "http://prom:9090"},
                  "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]},
    )["spec"]
    spec.update(over)
    return spec


def with_model(spec: dict[str, Any], model: str) -> dict[str, Any]:
    out = {**spec, "template": {**spec["template"]}}
    c = dict(spec["template"]["spec"]["containers"][0])
    c["args"] = ["--model", model, "--max-num-seqs", "32"]
    out["template"] = {"metadata": spec["template"]["metadata"], "spec": {"containers": [c]}}
    return out


@dataclass
class World:
    """Deployments, the route and the clock; pods become Ready when the test says so."""

    now: datetime = T0
    deployments: dict[str, RevisionState] = field(default_factory=dict)
    route: dict[str, int] | None = None
    header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES
    auto_ready: bool = True
    unschedulable_above: int | None = None  # pods beyond this count per revision never schedule
    history: list[Decision] = field(default_factory=list)
    #: The operator's probes as the reconciler would report them (spec.analysis.probes).
    probes: ProbeCounts | None = None

    def apply(self, decision: Decision, clamp_ready: bool = True) -> None:
        """Apply the actions in order.  ``clamp_ready=False`` leaves ready counts as they were (a
        scale-down whose pods have not terminated yet: nothing settled)."""
        for a in decision.actions:
            if isinstance(a, SetWeights):
                self.route = {a.stable_revision: 100 - a.canary_weight}
                if a.canary_revision:
                    self.route[a.canary_revision] = a.canary_weight
                self.header_routes = a.header_routes
            elif isinstance(a, EnsureRevision):
                old = self.deployments.get(a.revision, RevisionState(0, 0, 0))
                if clamp_ready:
                    old = replace(old, ready=min(old.ready, a.replicas),
                                  available=min(old.available, a.replicas))
                self.deployments[a.revision] = replace(old, desired=a.replicas)
            elif isinstance(a, DeleteRevision):
                self.deployments.pop(a.revision, None)

    def settle(self) -> None:
        """Pods of every Deployment become Ready (up to the schedulable limit)."""
        if not self.auto_ready:
            return
        for rev, d in self.deployments.items():
            cap = d.desired if self.unschedulable_above is None else min(
                d.desired, self.unschedulable_above)
            self.deployments[rev] = RevisionState(
                desired=d.desired, ready=cap, available=cap, unschedulable=d.desired - cap)

    def observe(self, spec: dict[str, Any], generation: int = 1,
                measurements: dict[str, Measurement] | None = None,
                deleting: bool = False, invalid: tuple[str, ...] = ()) -> Observation:
        return Observation(
            generation=generation,
            template_hash=template_hash(spec["template"]),
            revisions=dict(self.deployments),
            route=None if self.route is None else dict(self.route),
            route_header_routes=self.header_routes,
            measurements=measurements,
            deleting=deleting,
            invalid=invalid,
            rollout="chat",
            probes=self.probes,
        )

    def set_ready(self, revision: str, ready: int, unschedulable: int = 0) -> None:
        d = self.deployments[revision]
        self.deployments[revision] = RevisionState(
            desired=d.desired, ready=ready, available=ready, unschedulable=unschedulable)

    def copy(self) -> World:
        return replace(self, deployments=dict(self.deployments),
                       route=None if self.route is None else dict(self.route), history=[])


def step(world: World, spec_body: dict[str, Any], status: InferenceRolloutStatus,
         measure: Any = None, **obs: Any) -> InferenceRolloutStatus:
    """One reconcile as the handler does it: measure if due, decide, apply, settle."""
    spec = InferenceRolloutSpec.parse(spec_body)
    measurements = None
    if measure is not None and analysis_due(spec, status, world.now):
        measurements = measure(world, status)
    d = decide(spec, status, world.observe(spec_body, measurements=measurements, **obs), world.now)
    world.history.append(d)
    world.apply(d)
    world.settle()
    return d.status


def advance(world: World, seconds: float) -> None:
    world.now += timedelta(seconds=seconds)


# --- a harness for scenario tests --------------------------------------------------------------

#: What Prometheus answers for one metric in one measurement.
KINDS = ("pass", "fail", "error", "inconclusive")


def measurement_for(metric: MetricSpec, kind: str) -> Measurement:
    """A measurement that gives ``kind`` for ``metric`` (whose thresholds are all of one sense)."""
    if kind == "error":
        return Measurement(None, error=MeasurementError.UNREACHABLE, detail="connection refused")
    if kind == "nodata":
        return Measurement(None, error=MeasurementError.NO_DATA)
    if kind == "inconclusive":
        return Measurement(None, samples=3, error=MeasurementError.TOO_FEW_SAMPLES)
    ok = kind == "pass"
    stable = 1.0
    if metric.max is not None:
        value = metric.max * 0.5 if ok else metric.max * 2 + 1
    elif metric.min is not None:
        value = metric.min * 2 + 1 if ok else metric.min * 0.5 - 1
    elif metric.max_ratio_to_stable is not None:
        value = stable * metric.max_ratio_to_stable * (0.5 if ok else 2)
    else:
        assert metric.min_ratio_to_stable is not None
        value = stable * metric.min_ratio_to_stable * (2 if ok else 0.5)
    return Measurement(value, stable_value=stable, samples=100)


@dataclass
class Sim:
    """One InferenceRollout driven reconcile by reconcile, as the handler will drive it.

    ``verdicts`` is what Prometheus measures: one kind for every metric, or a kind per metric
    name (missing names pass).  Requests are written into the status before a reconcile, as the
    CLI writes them through the status subresource.
    """

    body: dict[str, Any]
    world: World = field(default_factory=World)
    status: InferenceRolloutStatus = field(default_factory=InferenceRolloutStatus)
    verdicts: str | dict[str, str] = "pass"
    generation: int = 1
    decisions: list[Decision] = field(default_factory=list)
    measured: list[datetime] = field(default_factory=list)
    #: The gateway's view of the route at each reconcile (``gateway(sim)``); None: not read.
    gateway: Any = None

    @property
    def spec(self) -> InferenceRolloutSpec:
        return InferenceRolloutSpec.parse(self.body)

    @property
    def now(self) -> datetime:
        return self.world.now

    @property
    def last(self) -> Decision:
        return self.decisions[-1]

    @property
    def stable(self) -> str | None:
        return self.status.stable_revision

    @property
    def canary(self) -> str | None:
        return self.status.canary_revision

    def scale(self, replicas: int) -> None:
        """``kubectl scale`` or an autoscaler: a new ``spec.replicas`` (a new generation)."""
        self.body = {**self.body, "replicas": replicas}
        self.generation += 1

    def release(self, model: str) -> str:
        """Change the template (a new release); returns the new revision."""
        self.body = with_model(self.body, model)
        self.generation += 1
        return template_hash(self.body["template"])

    def measure(self) -> dict[str, Measurement]:
        out = {}
        for metric in effective_metrics(self.spec.analysis):
            kind = (self.verdicts if isinstance(self.verdicts, str)
                    else self.verdicts.get(metric.name, "pass"))
            out[metric.name] = measurement_for(metric, kind)
        return out

    def evaluate(self) -> EvaluationOutcome | None:
        """The business evaluation's outcome when it is due (none in this world)."""
        return None

    def reconcile(self, *, measure: bool = True, settle: bool = True, deleting: bool = False,
                  invalid: tuple[str, ...] = (), deleting_since: datetime | None = None,
                  **requests: bool) -> Decision:
        for name, value in requests.items():
            setattr(self.status.requests, name, value)
        spec = self.spec
        measurements = None
        if measure and analysis_due(spec, self.status, self.now):
            measurements = self.measure()
            self.measured.append(self.now)
        obs = self.observe(measurements, invalid=invalid, deleting=deleting,
                           deleting_since=deleting_since)
        d = decide(spec, self.status, obs, self.now)
        self.decisions.append(d)
        self.world.history.append(d)
        self.world.apply(d)
        if settle:
            self.world.settle()
        self.status = d.status
        return d

    def observe(self, measurements: dict[str, Measurement] | None, **kw: Any) -> Observation:
        """What the handler would hand ``decide`` now (a subclass may observe more)."""
        return Observation(
            generation=self.generation, template_hash=template_hash(self.body["template"]),
            revisions=dict(self.world.deployments),
            route=None if self.world.route is None else dict(self.world.route),
            route_header_routes=self.world.header_routes,
            measurements=measurements, evaluation=self.evaluate(),
            route_acceptance=self.gateway(self) if self.gateway else None, rollout="chat",
            probes=self.world.probes, **kw)

    def advance(self, seconds: float) -> None:
        advance(self.world, seconds)

    def run(self, seconds: float, **kw: Any) -> list[Decision]:
        """Reconcile whenever the core asks to (at least every second) for ``seconds``."""
        end = self.now + timedelta(seconds=seconds)
        out = []
        while self.now < end:
            d = self.reconcile(**kw)
            out.append(d)
            self.advance(min(max(d.requeue_after or 0.0, 1.0),
                             (end - self.now).total_seconds()) or 1.0)
        return out

    def run_until(self, done: Any, limit: float = 3600, **kw: Any) -> Decision:
        """Reconcile as asked until ``done(sim)``; fails after ``limit`` simulated seconds."""
        end = self.now + timedelta(seconds=limit)
        while True:
            d = self.reconcile(**kw)
            if done(self):
                return d
            assert self.now < end, f"not done after {limit}s: {self.status.message}"
            self.advance(max(d.requeue_after or 0.0, 1.0))


def started(body: dict[str, Any] | None = None, **kw: Any) -> Sim:
    """A Sim whose first revision is deployed, Ready and serving all traffic."""
    sim = Sim(body or manifest_spec(), **kw)
    sim.reconcile()
    sim.reconcile()
    assert sim.status.phase == "Healthy", sim.status
    return sim
