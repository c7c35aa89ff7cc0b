"""A tiny simulated cluster for driving the pure core in tests.

It applies the core's actions the way the handler would (weights land on the route, Deployments
get their replica counts) and lets a test decide when pods become Ready and what Prometheus
measures.  It is a fake of the *world*, never of the core under test.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.decide import analysis_due, decide
from inference_rollout.core.revision import template_hash
from inference_rollout.core.types import (
    Decision,
    DeleteRevision,
    EnsureRevision,
    Measurement,
    Observation,
    RevisionState,
    SetWeights,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manifest_spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 4,
        "template": {
            "metadata": {"labels": {"app": "chat"}},
            "spec": {"containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "args": ["--model", "m1", "--max-num-seqs", "32"],
                "ports": [{"name": "http", "containerPort": 8000}],
            }]},
        },
        "traffic": {"gatewayAPI": {"httpRouteRef": {"name": "chat"}}},
        "strategy": {"steps": [{"weight": 5, "pause": "1m"}, {"weight": 20, "pause": "1m"},
                               {"weight": 50, "pause": "1m"}, {"weight": 100}]},
        "analysis": {
            "interval": "10s",
            "prometheus": {"address": "http://prom:9090"},
            "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}],
        },
    }
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
    auto_ready: bool = True
    unschedulable_above: int | None = None  # pods beyond this count per revision never schedule
    history: list[Decision] = field(default_factory=list)

    def apply(self, decision: Decision) -> None:
        for a in decision.actions:
            if isinstance(a, SetWeights):
                self.route = {a.stable_revision: 100 - a.canary_weight}
                if a.canary_revision:
                    self.route[a.canary_revision] = a.canary_weight
            elif isinstance(a, EnsureRevision):
                old = self.deployments.get(a.revision, RevisionState(0, 0, 0))
                self.deployments[a.revision] = replace(
                    old, desired=a.replicas, ready=min(old.ready, a.replicas),
                    available=min(old.available, a.replicas))
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
                deleting: bool = False) -> Observation:
        return Observation(
            generation=generation,
            template_hash=template_hash(spec["template"]),
            revisions=dict(self.deployments),
            route=None if self.route is None else dict(self.route),
            measurements=measurements,
            deleting=deleting,
        )


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
