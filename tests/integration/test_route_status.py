"""The operator reads the route's status on a REAL API server (irsandbox.control_plane):
the test plays the gateway, writing the HTTPRoute's status subresource as a conformant Gateway
API implementation does (Accepted / ResolvedRefs per parent, with observedGeneration), and plays
the Deployment controller (readiness).  The operator is :func:`reconcile`, called directly.

Checked: a written weight is pending until the gateway accepts the route's generation that
carries it (a stale generation keeps it pending), the hold starts at the acceptance, a rejection
rolls the release back with the gateway's reason in the condition and the Event, the rollback's
route write does not wait for the gateway, and a route without any status (a gateway that writes
none) does not hold a release under the default ``routeStatus``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.rollout_world import kube_for

from inference_rollout.api import reasons as r
from inference_rollout.core.revision import template_hash
from inference_rollout.core.types import RecordEvent
from inference_rollout.kube import KubeError
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.reconciler import Deps, reconcile
from irsandbox.control_plane import ControlPlane
from irsandbox.manifests import container, inference_rollout

pytestmark = pytest.mark.integration

GATEWAY = {"name": "sandbox", "namespace": "gateway-system"}
ROUTE = "chat"
CONTROLLER = "traefik.io/gateway-controller"


class Operator:
    """The reconciler against the API server, one namespace, one rollout named ``chat``."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.ns = namespace
        self.loop = asyncio.new_event_loop()
        self.kube = self.loop.run_until_complete(kube_for(cp))
        self.events: list[RecordEvent] = []

        async def post(_body: dict[str, Any], event: RecordEvent) -> None:
            self.events.append(event)

        self.deps = Deps(kube=self.kube, post_event=post)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.kube.close())
        self.loop.close()

    # --- the API server ---

    def get(self, path: str) -> dict[str, Any]:
        return dict(self.run(self.kube.get(path)))

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.run(self.kube.merge_patch(path, body)))

    @property
    def rollout(self) -> dict[str, Any]:
        return self.get(rollout_path(self.ns, ROUTE))

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.rollout.get("status") or {})

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.status.get("conditions", []) if c["type"] == type_)

    def reconcile(self) -> float:
        return float(self.run(reconcile(self.deps, self.rollout)))

    # --- the route, as the gateway sees it ---

    @property
    def route_path(self) -> str:
        return ns_path("gateway.networking.k8s.io", "v1", self.ns, "httproutes", ROUTE)

    @property
    def route(self) -> dict[str, Any]:
        return self.get(self.route_path)

    def weights(self) -> dict[str, int]:
        refs = self.route["spec"]["rules"][0]["backendRefs"]
        return {ref["name"].removeprefix("chat-"): ref["weight"] for ref in refs}

    def gateway_writes(self, *, generation: int | None = None, accepted: str = "True",
                       reason: str = "Accepted", message: str = "",
                       resolved: str = "True") -> None:
        """Write the route's status as the gateway does (for ``generation``, default the
        route's current one)."""
        gen = self.route["metadata"]["generation"] if generation is None else generation
        conditions = [
            {"type": "Accepted", "status": accepted, "reason": reason, "message": message,
             "observedGeneration": gen, "lastTransitionTime": "2026-12-03T12:00:00Z"},
            {"type": "ResolvedRefs", "status": resolved,
             "reason": "ResolvedRefs" if resolved == "True" else "BackendNotFound",
             "message": "", "observedGeneration": gen,
             "lastTransitionTime": "2026-12-03T12:00:00Z"},
        ]
        self.patch(self.route_path + "/status", {"status": {"parents": [
            {"parentRef": GATEWAY, "controllerName": CONTROLLER, "conditions": conditions}]}})

    # --- the Deployment controller ---

    def ready(self, revision: str) -> None:
        path = ns_path("apps", "v1", self.ns, "deployments", f"chat-{revision}")
        replicas = self.get(path)["spec"]["replicas"]
        self.patch(path + "/status", {"status": {
            "replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
            "availableReplicas": replicas, "observedGeneration": 1}})


@pytest.fixture()
def op(control_plane: ControlPlane) -> Iterator[Operator]:
    ns = f"route-status-{uuid.uuid4().hex[:6]}"
    with control_plane.client() as c:
        assert c.post("/api/v1/namespaces",
                      json={"metadata": {"name": ns}}).status_code == 201
    op = Operator(control_plane, ns)
    try:
        yield op
    finally:
        op.close()


def manifest(model: str, route_status: str | None = None) -> dict[str, Any]:
    traffic: dict[str, Any] = {"gatewayAPI": {"parentRefs": [GATEWAY]}}
    if route_status is not None:
        traffic["gatewayAPI"]["routeStatus"] = route_status
    return inference_rollout(
        "chat", replicas=1, containers=[container(args=["--model", model])],
        traffic=traffic,
        strategy={"steps": [{"weight": 20, "pause": "1h"}, {"weight": 100}],
                  "progressDeadline": "10m"})


def released(op: Operator, route_status: str | None = None,
             gateway_reports: bool = True) -> tuple[str, str]:
    """The first revision Healthy, then a new template with its canary's pods Ready: returns
    (stable, canary) right after the canary's 20% was written."""
    doc = manifest("m1", route_status)
    op.run(op.kube.create(rollout_path(op.ns), doc))
    op.reconcile()
    stable = op.status["stableRevision"]
    op.ready(stable)
    if gateway_reports:
        op.gateway_writes()
    op.reconcile()
    assert op.status["phase"] == "Healthy"
    new = manifest("m2", route_status)["spec"]
    op.patch(rollout_path(op.ns, "chat"), {"spec": {"template": new["template"]}})
    canary = template_hash(new["template"])
    op.reconcile()  # the release starts: the canary joins the route at 0%
    op.ready(canary)
    if gateway_reports:
        op.gateway_writes()
    op.reconcile()  # its pods are Ready: 20% is written
    assert op.weights() == {stable: 80, canary: 20}
    return stable, canary


def test_the_hold_starts_only_when_the_gateway_accepts_that_generation(op: Operator) -> None:
    _, canary = released(op)
    st = op.status
    assert st["canaryWeight"] == 20 and st.get("stepStartedAt") is None
    assert "waiting for the gateway to accept the route" in st["message"]
    generation = op.route["metadata"]["generation"]

    # the gateway still shows the previous generation: pending, whatever it says of it
    op.gateway_writes(generation=generation - 1)
    op.reconcile()
    assert op.status.get("stepStartedAt") is None
    pending = op.condition(r.ROUTE_ACCEPTED)
    assert (pending["status"], pending["reason"]) == ("Unknown", r.ROUTE_PENDING)
    assert f"is for generation {generation - 1}, the route is at {generation}" in \
        pending["message"]

    op.gateway_writes()  # accepted at the current generation
    op.reconcile()
    st = op.status
    assert st["stepStartedAt"] is not None and st["canaryWeight"] == 20
    accepted = op.condition(r.ROUTE_ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("True", r.ROUTE_ACCEPTED)
    assert any(e.reason == r.ROUTE_ACCEPTED and f"generation {generation}" in e.message
               for e in op.events)
    assert not st.get("aborted")
    assert canary == st["canaryRevision"]


def test_a_rejected_route_rolls_back_with_the_gateways_reason(op: Operator) -> None:
    stable, canary = released(op)
    reason = "NotAllowedByListeners"
    message = "no listener of gateway-system/sandbox admits routes from this namespace"
    op.gateway_writes(accepted="False", reason=reason, message=message)
    op.reconcile()
    st = op.status
    assert st["aborted"] and st["abortReason"] == r.ROUTE_REJECTED
    assert op.weights() == {stable: 100, canary: 0}  # traffic back to stable at once
    rejected = op.condition(r.ROUTE_ACCEPTED)
    assert (rejected["status"], rejected["reason"]) == ("False", r.ROUTE_REJECTED)
    assert reason in rejected["message"] and message in rejected["message"]
    aborted = op.condition("Aborted")
    assert aborted["status"] == "True" and reason in aborted["message"]
    warnings = [e for e in op.events if e.reason == r.ROUTE_REJECTED]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert reason in warnings[0].message and message in warnings[0].message


def test_the_rollback_does_not_wait_for_the_gateway(op: Operator) -> None:
    stable, canary = released(op)
    op.patch(rollout_path(op.ns, "chat").sub("status"), {"status": {"requests": {"abort": True}}})
    generation = op.route["metadata"]["generation"]
    op.reconcile()  # the gateway never answers for this generation nor the next
    assert op.weights() == {stable: 100, canary: 0}
    assert op.route["metadata"]["generation"] == generation + 1
    st = op.status
    assert st["aborted"] and st["abortReason"] == r.ABORT_REQUESTED
    op.reconcile()
    assert op.status["aborted"] and op.weights() == {stable: 100, canary: 0}


def test_a_backend_the_gateway_cannot_resolve_gets_its_share_back_once_resolved(
        op: Operator) -> None:
    """BackendNotFound for the canary's Service is the gateway lagging behind the API server:
    the canary's share goes back to 0% (the gateway would answer it with 500) and the step
    starts again once the gateway resolves it; no rollback."""
    stable, canary = released(op)
    op.gateway_writes(resolved="False")
    op.reconcile()
    st = op.status
    assert not st.get("aborted")
    assert op.weights() == {stable: 100, canary: 0}
    assert st["canaryWeight"] == 0 and st.get("stepStartedAt") is None
    warning = next(e for e in op.events if e.reason == r.BACKEND_UNRESOLVED)
    assert warning.type == "Warning" and "ResolvedRefs=False BackendNotFound" in warning.message

    op.gateway_writes(resolved="False")  # the 0% generation: still not found, still waiting
    op.reconcile()
    assert op.weights() == {stable: 100, canary: 0} and not op.status.get("aborted")
    assert "waiting for the gateway to resolve the canary's backend" in op.status["message"]

    op.gateway_writes()  # resolved: the weight comes back
    op.reconcile()
    assert op.weights() == {stable: 80, canary: 20}
    op.gateway_writes()
    op.reconcile()
    st = op.status
    assert st["canaryWeight"] == 20 and st["stepStartedAt"] is not None and not st.get("aborted")


def test_a_gateway_that_writes_no_status_does_not_hold_the_release(op: Operator) -> None:
    released(op, gateway_reports=False)
    st = op.status
    assert st["stepStartedAt"] is not None  # held from the write, as before
    unknown = op.condition(r.ROUTE_ACCEPTED)
    assert (unknown["status"], unknown["reason"]) == ("Unknown", r.ROUTE_STATUS_NOT_REPORTED)


def test_required_waits_for_a_gateway_that_writes_no_status(op: Operator) -> None:
    """Under Required a silent gateway gives the canary no traffic at all: the first weight
    waits for the gateway to accept the 0% route that brought the canary's Service in."""
    doc = manifest("m1", "Required")
    op.run(op.kube.create(rollout_path(op.ns), doc))
    op.reconcile()
    op.ready(op.status["stableRevision"])
    op.reconcile()
    stable = op.status["stableRevision"]
    new = manifest("m2", "Required")["spec"]
    op.patch(rollout_path(op.ns, "chat"), {"spec": {"template": new["template"]}})
    canary = template_hash(new["template"])
    op.reconcile()
    op.ready(canary)
    op.reconcile()
    op.reconcile()
    st = op.status
    assert op.weights() == {stable: 100, canary: 0}
    assert st["canaryWeight"] == 0 and st.get("stepStartedAt") is None
    assert "canary pods ready; waiting for the gateway to accept the route at 0%" in \
        st["message"]
    assert "routeStatus: Required" in op.condition(r.ROUTE_ACCEPTED)["message"]


def healthy(op: Operator) -> str:
    """The first revision Healthy (the gateway answering every route write); its hash."""
    op.run(op.kube.create(rollout_path(op.ns), manifest("m1")))
    op.reconcile()
    stable = str(op.status["stableRevision"])
    op.ready(stable)
    op.gateway_writes()
    op.reconcile()
    assert op.status["phase"] == "Healthy"
    return stable


def exists(op: Operator, group: str, kind: str, name: str) -> bool:
    version = "v1"
    return op.run(op.kube.get_or_none(ns_path(group, version, op.ns, kind, name))) is not None


def test_a_crash_between_the_canarys_creations_cannot_leave_its_service_missing(
        op: Operator) -> None:
    """The Service is created before the Deployment: the core asks for a revision again only
    while its Deployment is missing, so a reconcile cut short between the two (here: the API
    server refusing the Deployment, by an admission policy) must leave the Deployment missing."""
    healthy(op)
    new = manifest("m2")["spec"]
    canary = template_hash(new["template"])
    with refused_deployment(op, f"chat-{canary}"):
        op.patch(rollout_path(op.ns, "chat"), {"spec": {"template": new["template"]}})
        with pytest.raises(Exception, match="refused by the test"):
            op.reconcile()
        assert exists(op, "", "services", f"chat-{canary}")
        assert not exists(op, "apps", "deployments", f"chat-{canary}")
    op.reconcile()
    assert exists(op, "apps", "deployments", f"chat-{canary}")


@contextlib.contextmanager
def refused_deployment(op: Operator, name: str) -> Iterator[None]:
    """The API server refuses to create the Deployment ``name`` in the test's namespace (a
    ValidatingAdmissionPolicy), as a crash would cut the reconcile short at that call."""
    policy = f"refuse-{op.ns}"
    admission = "/apis/admissionregistration.k8s.io/v1"
    op.run(op.kube.create(f"{admission}/validatingadmissionpolicies", {
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                     "resources": ["deployments"]}]},
                 "validations": [{"expression": f"object.metadata.name != '{name}'",
                                  "message": "refused by the test"}]}}))
    op.run(op.kube.create(f"{admission}/validatingadmissionpolicybindings", {
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": op.ns}}}}}))
    labels = {"app": "probe"}
    probe = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
             "spec": {"selector": {"matchLabels": labels}, "template": {
                 "metadata": {"labels": labels},
                 "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    deadline = time.monotonic() + 30
    while True:  # the policy takes effect once the API server's informer has it
        try:
            op.run(op.kube.request("POST", ns_path("apps", "v1", op.ns, "deployments"), probe,
                                   params={"dryRun": "All"}))
        except KubeError as e:
            assert "refused by the test" in str(e)
            break
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.2)
    try:
        yield
    finally:
        op.run(op.kube.delete(f"{admission}/validatingadmissionpolicybindings/{policy}"))
        op.run(op.kube.delete(f"{admission}/validatingadmissionpolicies/{policy}"))
        time.sleep(2)  # the API server's informer drops the policy


def test_a_canary_service_gone_is_created_again_while_the_gateway_cannot_find_it(
        op: Operator) -> None:
    """Someone deletes the canary's Service: the gateway reports BackendNotFound, and the
    operator creates the Service again (its Deployment's size alone would not ask for it)."""
    stable = healthy(op)
    new = manifest("m2")["spec"]
    op.patch(rollout_path(op.ns, "chat"), {"spec": {"template": new["template"]}})
    canary = template_hash(new["template"])
    op.reconcile()
    op.ready(canary)
    op.run(op.kube.delete(ns_path("", "v1", op.ns, "services", f"chat-{canary}")))
    op.gateway_writes(resolved="False")
    op.reconcile()
    assert exists(op, "", "services", f"chat-{canary}")
    assert op.weights() == {stable: 100, canary: 0}  # not before the gateway resolves it
    op.gateway_writes()
    op.reconcile()
    assert op.weights() == {stable: 80, canary: 20}


def test_a_stable_service_gone_is_created_again_while_the_gateway_cannot_find_it(
        op: Operator) -> None:
    """At rest: someone deletes the stable's Service, the gateway answers every request 500 and
    reports BackendNotFound; the operator creates the Service again."""
    stable = healthy(op)
    op.run(op.kube.delete(ns_path("", "v1", op.ns, "services", f"chat-{stable}")))
    op.reconcile()  # the gateway has not said anything yet: nothing to go on
    assert not exists(op, "", "services", f"chat-{stable}")
    op.gateway_writes(resolved="False")
    op.reconcile()
    assert exists(op, "", "services", f"chat-{stable}")
    assert op.weights() == {stable: 100} and op.status["phase"] == "Healthy"
