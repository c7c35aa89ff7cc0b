"""The InferenceRollout status: everything needed to continue a release after a restart.

The operator keeps no state in memory that matters: the step, the weight, when the step's hold
began, the analysis counters and the abort flag all live here, so killing the operator at any
instant never skips, repeats or reverses a step.  The user's steering requests (promote, abort,
…) live here too, written by the CLI through the status subresource, so steering never edits the
spec and a git-synced manifest never drifts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from . import DRILL_ID_PATTERN, HASH_LENGTH, REVISION_PATTERN, TIMESTAMP_PATTERN
from .spec import MAX_ADAPTER_SOURCE, MAX_ADAPTERS

Phase = Literal["Healthy", "Progressing", "Paused", "Degraded"]
Verdict = Literal["Pass", "Fail", "Error", "Inconclusive"]
ConditionStatus = Literal["True", "False", "Unknown"]
#: A revision the status names: the template hash, nothing else. The operator derives object names
#: and API paths from it (``<rollout>-<revision>``), and anyone allowed to steer may write the
#: status: so the CRD refuses any other value, and a status that holds one (written before this
#: rule) is ``Valid=False`` and acted on by nothing (reconciler.py).
Revision = Annotated[str, Field(pattern=REVISION_PATTERN, max_length=64)]
DrillId = Annotated[str, Field(pattern=DRILL_ID_PATTERN, max_length=32)]
#: Every moment the status holds: the core parses them, so anything else is refused by the CRD
#: (and a status that holds one from before this rule is Valid=False, never a crash loop).
Timestamp = Annotated[str, Field(pattern=TIMESTAMP_PATTERN, max_length=40)]
#: At most this many old revisions wait for their scale-down (each promotion adds one; each goes
#: after its delay): a bound the CRD's CEL cost estimate needs.
MAX_OLD_REVISIONS = 100
#: The CRD cannot put a pattern on map keys: a CEL rule checks them.
OldRevisions = Annotated[
    dict[Revision, Timestamp],
    WithJsonSchema({
        "type": "object", "maxProperties": MAX_OLD_REVISIONS,
        "additionalProperties": {"type": "string", "maxLength": 40,
                                 "pattern": TIMESTAMP_PATTERN},
        "x-kubernetes-validations": [{
            "rule": f"self.all(r, r.matches('{REVISION_PATTERN}'))",
            "message": "status.oldRevisions: keys must be revisions (the pod template's hash: "
                       f"{HASH_LENGTH} lower-case hex characters)"}],
    }),
]


class StatusModel(BaseModel):
    """Status models tolerate unknown fields (an older/newer operator may have written them)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(StatusModel):
    """The metav1.Condition shape."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: Timestamp
    observed_generation: int | None = None


#: Restart points of the late-breakage detector kept per metric (core/sequential.py).
KEPT_RESTARTS = 4


class RestartPoint(StatusModel):
    """The step's counts at one earlier look: the sequential test also weighs the evidence
    since then (a canary that breaks late, core/sequential.py)."""

    index: int = Field(ge=1, description="The look's number in the step (1: the first that "
                                         "counted requests).")
    requests: float = Field(ge=0)
    bad_requests: float = Field(ge=0)


class CarriedCounts(StatusModel):
    """The release's earlier steps, as the pass side counts them (core/sequential.py: the pass
    side counts the whole release)."""

    requests: int = Field(ge=0, description="Canary requests of the earlier steps' evidence.")
    bad_requests: int = Field(ge=0, description="Of those, possibly over the limit (latency) or "
                                                "failed (error rate).")


class MetricResult(StatusModel):
    """The latest measurement of one metric and its running counters."""

    value: float | None = None
    stable_value: float | None = None
    threshold: str = ""
    verdict: Verdict | None = None
    samples: float | None = None
    error: str | None = None
    measured_at: Timestamp | None = None
    consecutive_failures: int = 0
    consecutive_errors: int = 0
    passes: int = 0
    requests: float | None = Field(
        None, description="Canary requests counted by the sequential test this step.")
    bad_requests: float | None = Field(
        None, description="Of those, over the limit (latency) or failed (error rate).")
    test: str | None = Field(
        None, description="The sequential test's state, e.g. `5/5 over 0.45 s, p < 0.001: Fail`.")
    requests_to_verdict: int | None = Field(
        None, description="More canary requests, none bad, that a Pass still needs.")
    request_rate: float | None = Field(
        None, description="Canary requests per second over the evidence period.")
    restarts: list[RestartPoint] = Field(
        default_factory=list, max_length=KEPT_RESTARTS,
        description="The latest looks the sequential test restarts from (late breakage).")
    restart_step: Timestamp | None = Field(
        None, description="The step the restarts belong to (its stepStartedAt).")
    carried: CarriedCounts | None = Field(
        None, description="The release's earlier steps' counts, which the sequential test's "
        "pass side adds to this step's (the canary is the same revision).")


class ReleaseCost(StatusModel):
    """What one release cost, counted by the operator as it runs (docs/report.md, "Cost"):
    kept for the current release, and for the last one until the next begins."""

    revision: Revision = Field(description="The release's (canary) revision.")
    started_at: Timestamp = Field(description="When the operator saw the new template.")
    steps_reached_after: list[float] = Field(
        default_factory=list, max_length=64,
        description="Seconds from the start until each step's weight was in force (the "
        "gateway accepted it).")
    outcome: Literal["Promoted", "RolledBack", "Replaced"] | None = Field(
        None, description="How it ended; empty while it runs.")
    decided_after: float | None = Field(None, description="Seconds from the start to the outcome.")
    pod_seconds: float = Field(
        0.0, ge=0, description="Pod-seconds beyond the steady state (pods of every revision "
        "above spec.replicas: canary and surge pods, and those kept draining after the outcome).")
    gpu_seconds: float = Field(
        0.0, ge=0, description="The same times the GPUs each pod asks for (nvidia.com/gpu).")
    pods_started: int = Field(
        0, ge=0, description="Canary pods the operator scaled its Deployment up by: each one "
        "loads the model.")
    canary_requests: float = Field(
        0.0, ge=0, description="Canary requests the analysis counted (each step's evidence "
        "period: from its weight in force to its last look).")
    rolled_back_requests: float = Field(
        0.0, ge=0, description="Of those, answered by a canary that was then rolled back.")
    accounted_at: Timestamp | None = Field(
        None, description="Until when pod-seconds are counted (the last reconcile).")
    step_requests: dict[str, float] = Field(
        default_factory=dict, max_length=64,
        description="Canary requests counted per step, by the step's stepStartedAt.")
    probe_requests: int = Field(
        0, ge=0, description="The operator's probe requests (spec.analysis.probes) to canary "
        "and stable for this release.")
    probe_seconds: float = Field(
        0.0, ge=0, description="Their answer time, summed: the serving seconds they cost.")
    canary_desired: int = Field(0, ge=0, description="The canary's pods when last seen.")
    extra_pods: int = Field(0, ge=0, description="Pods beyond the steady state the last "
                            "decision left (charged until the next one).")


class EvaluationResult(StatusModel):
    """The business evaluation gate's latest result for one canary revision (Principle 11)."""

    revision: Revision
    canary_score: float | None = Field(None, description="Canary's score, points 0-100.")
    stable_score: float | None = Field(None, description="Stable's score, points 0-100.")
    verdict: Literal["Pass", "Fail", "Error"]
    measured_at: Timestamp | None = Field(
        None, description="When it ran; empty after a resume (the next run is due at once).")
    message: str = ""
    consecutive_errors: int = 0


class EvaluationRun(StatusModel):
    """An evaluation the operator began and has not recorded yet. Written before the run starts:
    found on the next reconcile, it means the operator stopped during the run (a restart, or a
    kill for memory), which counts as an error and waits an interval, never a run again at once."""

    revision: Revision
    started_at: Timestamp


class Requests(StatusModel):
    """Steering requests written by ``kubectl inference-rollout``.

    Every request is one-shot: the CLI sets it true, the operator acts on it and clears it in the
    same status write.  ``promoteFull`` stays true until the canary is stable (it spans steps)."""

    promote: bool = False
    promote_full: bool = False
    abort: bool = False
    retry: bool = False
    pause: bool = False
    resume: bool = False


#: Pods listed in ``status.adapterPods`` at most: a larger fleet lists its first pods by name
#: (the per-version counts in the revisions' Services cover every pod).
MAX_ADAPTER_PODS = 256


class AdapterPod(StatusModel):
    """One pod of a rollout with adapters, as its own ``/v1/models`` last listed its adapters
    (docs/adapters.md): rebuilt from the pods at every reconcile, so a crash can never leave a
    pod serving a version the status does not show."""

    pod: str = Field(max_length=253)
    version: str | None = Field(
        None, max_length=64, description="The serving version whose Service selects it; null "
        "while it is moved or new (in no Service's endpoints).")
    adapters: dict[str, Annotated[str, Field(max_length=MAX_ADAPTER_SOURCE)]] | None = Field(
        None, max_length=2 * MAX_ADAPTERS, description="Adapter name -> the source it was loaded "
        "from, of the adapters this rollout manages (the stable's and the canary's), as the pod "
        "lists them; null: the pod did not answer.")


class InferenceRolloutStatus(StatusModel):
    phase: Phase | None = None
    observed_generation: int | None = None
    stable_revision: Revision | None = None
    canary_revision: Revision | None = None
    current_step: int | None = Field(None, description="0-based index into spec.strategy.steps.")
    canary_weight: int = 0
    step_entered_at: Timestamp | None = Field(
        None, description="When the current step began (its progress deadline counts from here)."
    )
    step_started_at: Timestamp | None = Field(
        None, description="When the current step's weight was reached (its hold starts here)."
    )
    weight_replicas: int | None = Field(
        None, description="spec.replicas when the canary last had the Ready pods its weight "
        "needs: the capacity guard counts lost canary pods against that fleet, so a scale-up "
        "is not taken for lost pods (the weight holds while the canary grows).",
    )
    last_analysis_at: Timestamp | None = None
    aborted: bool = False
    abort_reason: str | None = None
    aborted_at: Timestamp | None = None
    paused_reason: str | None = None
    old_revisions: OldRevisions = Field(
        default_factory=dict,
        description="Revisions to scale down, with the time after which they may go.",
    )
    analysis: dict[str, MetricResult] = Field(default_factory=dict)
    evaluation: EvaluationResult | None = Field(
        None, description="The business evaluation of the current canary, once it has run."
    )
    drill_recorded: DrillId | None = Field(
        None, description="The id of the last drill result recorded as an Event and notified "
        "(annotation rollouts.inference.dev/last-drill).")
    release_cost: ReleaseCost | None = Field(
        None, description="What the current (or last) release cost: pod- and GPU-seconds beyond "
        "the steady state, pods started, canary requests, time to each step and the outcome.")
    evaluation_running: EvaluationRun | None = Field(
        None, description="The business evaluation begun and not yet recorded (a restart "
        "during it counts as an evaluation error).")
    adapter_pods: list[AdapterPod] | None = Field(
        None, max_length=MAX_ADAPTER_PODS,
        description="A rollout with adapters: each pod and the adapter versions it serves, read "
        "from the pod itself (null without adapters).")
    conditions: list[Condition] = Field(default_factory=list)
    message: str = ""
    requests: Requests = Field(default_factory=Requests)
    replicas: int = Field(
        0, description="Pods of the serving revisions (stable and canary), for the scale "
        "subresource: what `kubectl scale` and an autoscaler read as the current count.")
    selector: str = Field(
        "", description="Label selector of the serving revisions' pods, for the scale "
        "subresource (an HPA's pod metrics select by it).")

    @classmethod
    def parse(cls, body: dict[str, Any] | None) -> InferenceRolloutStatus:
        return cls.model_validate(body or {})

    def to_body(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")
