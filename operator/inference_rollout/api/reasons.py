"""Reasons and messages for conditions and Events, kept in pairs.

A reason is a stable CamelCase token that alerts and dashboards match on; its message template is
what a person reads in ``kubectl describe``.  Keeping them side by side means a reason is never
emitted with an ad-hoc message somewhere else.
"""

from __future__ import annotations

# Valid
SPEC_VALID = "SpecValid"
SPEC_VALID_MSG = "the release passed validation"
INVALID_SPEC = "InvalidSpec"
INVALID_SPEC_MSG = "the release will not receive traffic until fixed: {problems}"
INVALID_STATUS = "InvalidStatus"
INVALID_STATUS_MSG = (
    "the status holds what the operator will not act on, so it does nothing for this rollout "
    "until fixed (kubectl patch --subresource=status, or delete and recreate): {problems}")

# Available
STABLE_AVAILABLE = "StableAvailable"
STABLE_AVAILABLE_MSG = "stable revision {revision} has {ready}/{replicas} pods ready"
STABLE_UNAVAILABLE = "StableUnavailable"
STABLE_UNAVAILABLE_MSG = "stable revision {revision} has no ready pod"

# Progressing
NEW_RELEASE = "NewRelease"
NEW_RELEASE_MSG = "new revision {canary} to replace {stable}: starting step 1/{steps}"
FIRST_RELEASE = "FirstRelease"
FIRST_RELEASE_MSG = "first revision {revision}: deploying {replicas} pods with all traffic"
STEP_WEIGHT_SET = "StepWeightSet"
STEP_WEIGHT_SET_MSG = "step {step}/{steps}: {weight}% of traffic to canary {canary}"
TESTERS_ROUTED = "TestersRouted"
TESTERS_ROUTED_MSG = ("step 1/{steps}: only the testers' requests (spec.traffic.testers) reach "
                      "canary {canary}; 0% of other traffic")
STEP_COMPLETE = "StepComplete"
STEP_COMPLETE_MSG = "step {step}/{steps} of canary {canary} passed analysis for its whole hold"
PROMOTED = "Promoted"
PROMOTED_MSG = "revision {canary} promoted to stable; {old} scales down after {delay}"
RELEASE_COMPLETE = "ReleaseComplete"
RELEASE_COMPLETE_MSG = "revision {revision} serves all traffic"
STEPS_CHANGED = "StepsChangedMidRelease"
STEPS_CHANGED_MSG = (
    "spec.strategy.steps changed during the release: step {old} no longer exists, continuing "
    "at step {new}/{steps}"
)
CANARY_UNAVAILABLE = "CanaryUnavailable"
CANARY_UNAVAILABLE_MSG = (
    "canary {canary} has {ready} ready pods, too few for {weight}% of traffic: weight lowered to "
    "{carried}%; rolled back if its pods are not back within {deadline}"
)
CANARY_UNAVAILABLE_FAILING_MSG = (
    "rolled back: canary {canary} has {ready} ready pods, too few for {weight}% of traffic, "
    "while its latest verdict failed: {details}"
)
BACKEND_UNRESOLVED = "BackendUnresolved"
BACKEND_UNRESOLVED_MSG = (
    "{rejection}; the canary's {weight}% goes back to 0% (a gateway answers a backend it cannot "
    "find with HTTP 500) until the gateway resolves it, then the step starts again; rolled back "
    "if it does not within {deadline}"
)
BACKEND_UNRESOLVED_WAIT_MSG = (
    "step {step}/{steps}: {weight}% → {target}% (waiting for the gateway to resolve the "
    "canary's backend: {condition}=False {reason})"
)
GATEWAY_PENDING_WAIT_MSG = (
    "step {step}/{steps}: {weight}% → {target}% (canary pods ready; waiting for the gateway to "
    "accept the route at {weight}%)"
)
TEMPLATE_CHANGED = "TemplateChangedMidRelease"
TEMPLATE_CHANGED_MSG = "template changed during the release: canary {old} replaced by {new}"

# Aborted (rollback)
ANALYSIS_FAILED = "AnalysisFailed"
ANALYSIS_FAILED_MSG = "rolled back: {details}"
PROGRESS_DEADLINE = "ProgressDeadlineExceeded"
PROGRESS_DEADLINE_MSG = (
    "rolled back: canary had {ready}/{needed} ready pods after {deadline}{unschedulable}"
)
ABORT_REQUESTED = "AbortRequested"
ABORT_REQUESTED_MSG = "rolled back on request"
# One reason per limit; the policy (pause or roll back) picks the message.
ERROR_LIMIT = "AnalysisErrorLimit"
ERROR_LIMIT_ABORT_MSG = "rolled back: {details} failed to measure {count} times in a row"
EVALUATION_FAILED = "EvaluationFailed"
EVALUATION_FAILED_MSG = (
    "rolled back: business evaluation of canary {canary} scored {canary_score:.1f} points, "
    "stable {stable_score:.1f} (more than {max_drop:g} below; {cases} cases)"
)
EVALUATION_ERROR_LIMIT = "EvaluationErrorLimit"
EVALUATION_ERROR_LIMIT_ABORT_MSG = (
    "rolled back: the business evaluation failed to run {count} times in a row: {detail}"
)
# One reason for the limit; the policy (pause or roll back) picks the message.
INCONCLUSIVE_LIMIT = "InconclusiveLimit"
INCONCLUSIVE_ROLLBACK_MSG = (
    "rolled back: the analysis was still undecided {limit} after the step's weight was "
    "reached: {details}"
)
RETRY_REQUESTED = "RetryRequested"
RETRY_REQUESTED_MSG = "retrying revision {canary} from step 1"

# The gateway's view of the route (condition RouteAccepted; docs/operator.md, route status)
ROUTE_ACCEPTED = "RouteAccepted"
ROUTE_ACCEPTED_MSG = "the gateway accepted generation {generation} of the route for every parent"
ROUTE_HOLD_STARTS_MSG = (
    "step {step}/{steps}: the gateway accepted generation {generation} of the route; "
    "{weight}% holds from now"
)
ROUTE_PENDING = "RoutePending"
ROUTE_PENDING_MSG = (
    "waiting for the gateway to accept generation {generation} of the route: {detail}"
)
ROUTE_STATUS_NOT_REPORTED = "RouteStatusNotReported"
ROUTE_STATUS_NOT_REPORTED_MSG = (
    "the route has no status.parents (generation {generation}): {policy}"
)
ROUTE_STATUS_TRUSTED = (
    "weights count as applied when the API server holds them (routeStatus: IfReported); set "
    "routeStatus: Required if the gateway should confirm them"
)
ROUTE_STATUS_AWAITED = (
    "routeStatus: Required waits for the gateway; the progress deadline rolls the release back"
)
ROUTE_REJECTED = "RouteRejected"
ROUTE_REJECTED_MSG = (
    "the gateway rejected generation {generation} of the route for {parent}: {condition}=False "
    "{reason}: {message}"
)
ROUTE_NOT_ACCEPTED = "RouteNotAccepted"
ROUTE_NOT_ACCEPTED_MSG = (
    "rolled back: the gateway did not accept generation {generation} of the route within "
    "{deadline} of the step's start ({detail})"
)

# Paused
PAUSE_REQUESTED = "PauseRequested"
PAUSE_REQUESTED_MSG = "paused on request; resume to continue"
ERROR_LIMIT_PAUSE_MSG = (
    "paused: {details} failed to measure {count} times in a row; resume to retry"
)
EVALUATION_ERROR_LIMIT_PAUSE_MSG = (
    "paused: the business evaluation failed to run {count} times in a row: {detail}; "
    "resume to retry"
)
INCONCLUSIVE_PAUSE_MSG = (
    "paused: the analysis is still undecided {limit} after the step's weight was reached: "
    "{details}; it continues by itself once every metric passes (or promote to skip)"
)
INCONCLUSIVE_RESOLVED = "InconclusiveResolved"
INCONCLUSIVE_RESOLVED_MSG = "every metric has a verdict again: the inconclusive pause is lifted"
MANUAL_STEP = "WaitingForPromote"
MANUAL_STEP_MSG = "step {step}/{steps} held; promote to continue"

# Analysis
VERDICT_CHANGED = "AnalysisVerdict"
VERDICT_CHANGED_MSG = "{metric}: {verdict} ({value} vs {threshold})"

# Business evaluation gate
DRILL_PASSED = "DrillPassed"
DRILL_FAILED = "DrillFailed"
EVALUATION_PASSED = "EvaluationPassed"
EVALUATION_PASSED_MSG = (
    "business evaluation of canary {canary}: {canary_score:.1f} points, stable "
    "{stable_score:.1f} (allowed drop {max_drop:g}; {cases} cases): traffic may shift"
)
EVALUATION_ERROR = "EvaluationError"
EVALUATION_ERROR_MSG = (
    "business evaluation of canary {canary} could not run ({count}/{limit}): {detail}; "
    "retrying in {interval}"
)
EVALUATION_PENDING_MSG = "step 1/{steps}: waiting for the business evaluation of canary {canary}"

# An unexpected failure of a reconcile (its own condition type)
RECONCILE_FAILED = "ReconcileFailed"
RECONCILE_FAILED_MSG = (
    "the operator could not reconcile this rollout ({error}); traffic is kept on stable, and "
    "reconciles are retried with backoff"
)
RECONCILED = "Reconciled"
RECONCILED_MSG = "the last reconcile succeeded"

# Deletion
RELEASE_COST = "ReleaseCost"
RELEASE_COST_MSG = ("release {revision} {outcome} after {decided}: {pod_seconds} pod-seconds "
                    "({gpu_seconds} GPU-seconds) beyond the steady state, {pods} pods started, "
                    "{requests} canary requests counted{rolled_back}{probes}; steps in force after "
                    "{steps}")
WARMUP_NOT_DONE = "WarmupNotDone"
WARMUP_NOT_DONE_MSG = ("canary's warmup not done: {answered}/{needed} probes answered within the "
                       "progress deadline {deadline} (spec.analysis.probes.warmupRequests)")
WARMING_UP_MSG = ("step 1: warming canary {canary} up before its first weight: "
                  "{answered}/{needed} probes answered (spec.analysis.probes.warmupRequests)")
DELETING = "Deleting"
DELETING_MSG = ("rollout deleted: all traffic returned to stable {stable}; the canary's pods "
                "stay {delay} while the gateway follows the route")

#: A pod of an adapter release could not be moved (relabelled, loaded): retried each reconcile.
ADAPTER_MOVE_FAILED = "AdapterMoveFailed"
