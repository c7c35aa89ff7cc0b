"""The tenant boundary on a real API server (issue 29): two tenant namespaces under the chart's RBAC
(namespaces mode, secure defaults), every cross-namespace attempt from tenant A refused by the CRD
naming the field, and -- from the API server's own audit log -- nothing of tenant B's read or
written by the operator while it serves tenant A.

The sandbox's audit policy (sandbox/up.sh) records the metadata of every request of the
ServiceAccounts of one namespace, ``IR_AUDITED_NAMESPACE``; the chart is installed there, and the
operator runs as a process with a token of the chart's ServiceAccount, so its every request is in
the log: the answer to "what did it touch", not a belief about the code.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_delivery_chart import helm_binary
from test_delivery_rbac import TOKEN_SECRET, install_for_a_process, other_operators
from test_delivery_rbac import cluster as rbac_cluster

from irsandbox.cluster import GROUP, PLURAL, VERSION, Cluster
from irsandbox.common import free_port, wait_for
from irsandbox.harness import OperatorProcess
from irsandbox.manifests import httproute, sandbox_rollout
from irsandbox.story import Release

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(600)]

cluster = rbac_cluster  # the same fixture: the sandbox's cluster, with the CRD installed



@dataclass
class Tenants:
    a: str
    b: str
    release_ns: str
    user: str  # the operator's identity: system:serviceaccount:<release ns>:<sa>
    kubeconfig: Path


@pytest.fixture(scope="module")
def tenants(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    audit_log = cluster.env.get("IR_AUDIT_LOG", "")
    release_ns = cluster.env.get("IR_AUDITED_NAMESPACE", "")
    if not audit_log or not release_ns or not Path(audit_log).exists():
        pytest.fail("this sandbox's API server writes no audit log (IR_AUDIT_LOG, "
                    "IR_AUDITED_NAMESPACE in .sandbox/env): it was started before the audit "
                    "policy; restart it: bash sandbox/down.sh && bash sandbox/up.sh",
                    pytrace=False)
    run = uuid.uuid4().hex[:5]
    a, b = f"tenant-a-{run}", f"tenant-b-{run}"
    for ns in (a, b):
        others = other_operators(ns)
        if others:
            pytest.fail("another operator watches every namespace: the audit log would mix "
                        "its requests in; stop it first:\n" + "\n".join(others), pytrace=False)
    kubeconfig = cluster.env["KUBECONFIG"]
    release = "tenancy"
    cluster.delete_namespace(release_ns)  # a previous run's, if it was interrupted
    wait_for(lambda: cluster.namespace_gone(release_ns), 120, f"namespace {release_ns} gone")
    for ns in (a, b):
        cluster.create_namespace(ns)
    try:
        sa, path = install_for_a_process(
            cluster, release, release_ns, [a, b], tmp_path_factory.mktemp("tenancy"),
            f"tenancy.prometheusAllow={{{cluster.env['PROMETHEUS_URL']}}}")
        yield Tenants(a, b, release_ns, f"system:serviceaccount:{release_ns}:{sa}", path)
    finally:
        subprocess.run([str(helm_binary()), "--kubeconfig", kubeconfig, "uninstall", release,
                        "--namespace", release_ns], capture_output=True, timeout=120,
                       check=False)
        for ns in (a, b, release_ns):
            cluster.delete_namespace(ns)
        # the operator (the module's other fixture) stopped first: finish tenant A's rollout's
        # deletion as a user would, or its namespace stays Terminating for every later run
        assert not cluster.finish_deletions(f"tenant-a-{run}"), "tenant A stayed Terminating"


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tenants: Tenants) -> Iterator[OperatorProcess]:
    env = {**cluster.env, "KUBECONFIG": str(tenants.kubeconfig)}
    op = OperatorProcess(env, log_name=f"operator-{tenants.a}", namespaces=[tenants.a, tenants.b],
                         metrics_port=free_port(), liveness_port=free_port())
    op.start()
    yield op
    op.stop()


def hostile(name: str, field_path: list[str], value: Any, prometheus: str) -> dict[str, Any]:
    """A rollout of tenant A with one name pointing into tenant B's namespace."""
    m = sandbox_rollout(name, prometheus=prometheus, replicas=1)
    node = m["spec"]
    for key in field_path[:-1]:
        node = node.setdefault(key, {})
    node[field_path[-1]] = value
    return m


def audit_events(log: str, user: str, since: float) -> list[dict[str, Any]]:
    out = []
    for p in (Path(log), *sorted(Path(log).parent.glob("audit-*.log"))):
        if not p.exists():
            continue
        for line in p.read_text(errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (ev.get("user") or {}).get("username") != user:
                continue
            ts = ev.get("requestReceivedTimestamp", "")
            if ts and datetime.fromisoformat(ts).timestamp() < since - 1:
                continue
            out.append(ev)
    return out


def test_tenant_a_cannot_reach_tenant_b_and_the_operator_touches_nothing_of_b(
        cluster: Cluster, tenants: Tenants, operator: OperatorProcess) -> None:
    started = time.time()
    a, b, prom = tenants.a, tenants.b, cluster.env["PROMETHEUS_URL"]
    # Tenant B's objects a name could point at: its route, its token Secret, a ConfigMap
    cluster.create(b, httproute("bank", [("placeholder", 1)], ["bank.test"]))
    cluster.core.create_namespaced_secret(b, client.V1Secret(
        metadata=client.V1ObjectMeta(name=TOKEN_SECRET), string_data={"token": "b-secret"}))
    cluster.core.create_namespaced_config_map(b, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cases"), data={"cases.jsonl": "{}"}))

    # 1. names from the spec: every path into B refused by the CRD, naming the field
    attempts = {
        "spec.traffic.gatewayAPI.httpRouteRef.name": (
            ["traffic", "gatewayAPI"], {"httpRouteRef": {"name": f"../../{b}/httproutes/bank"}}),
        "spec.analysis.prometheus.bearerTokenSecretRef.name": (
            ["analysis", "prometheus", "bearerTokenSecretRef"],
            {"name": f"../../{b}/secrets/{TOKEN_SECRET}", "key": "token"}),
        "spec.evaluation.configMapRef.name": (
            ["evaluation"], {"configMapRef": {"name": f"../{b}/configmaps/cases"}}),
    }
    for i, (field_name, (path, value)) in enumerate(attempts.items()):
        with pytest.raises(ApiException) as refused:
            cluster.apply_rollout(a, hostile(f"evil-{i}", path, value, prom))
        assert refused.value.status == 422, refused.value.body
        assert field_name in str(refused.value.body), (field_name, refused.value.body)

    # 2. a rollout of A the operator serves (Healthy: its Deployment, Service and route in A)
    rel = Release(cluster, operator, a, sandbox_rollout("chat", prometheus=prom, replicas=1))
    rel.apply()
    stable = rel.wait_healthy()["stableRevision"]

    # 3. names from the status (anyone allowed to steer may patch it): refused by the CRD
    for field_name, value in (("canaryRevision", f"../../{b}/deployments/bank"),
                              ("stableRevision", "bank"), ("stepStartedAt", "yesterday")):
        with pytest.raises(ApiException) as refused:
            cluster.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, a, PLURAL, "chat", {"status": {field_name: value}})
        assert refused.value.status == 422 and field_name in str(refused.value.body)
    assert cluster.status(a, "chat")["stableRevision"] == stable  # nothing half-applied

    # 4. the audit log: what the operator's identity asked for
    time.sleep(2)  # the log is written after the response
    events = audit_events(cluster.env["IR_AUDIT_LOG"], tenants.user, started)
    in_a = [e for e in events if (e.get("objectRef") or {}).get("namespace") == a]
    assert any(e["verb"] == "create" and e["objectRef"]["resource"] == "deployments"
               for e in in_a), "the audit log shows none of the operator's work in A"
    touched_b = sorted({(e["verb"], e["objectRef"].get("resource", ""),
                         e["objectRef"].get("name", ""))
                        for e in events if (e.get("objectRef") or {}).get("namespace") == b})
    # B is served too (no rollout there): kopf's list and watch of the kinds it handles in each
    # served namespace, whole collections (its label filters apply client-side), and nothing
    # else: no object of B read by name, none written
    assert touched_b and all(verb in ("list", "watch") and not name
                             for verb, _, name in touched_b), touched_b
    assert {res for _, res, _ in touched_b} <= {"inferencerollouts", "deployments", "httproutes"}
    secrets = [e for e in events if (e.get("objectRef") or {}).get("resource") == "secrets"]
    assert secrets == [], secrets  # no analysis ran: not even A's token was read
    elsewhere = sorted({(e["verb"], (e.get("objectRef") or {}).get("namespace", ""),
                         (e.get("objectRef") or {}).get("resource", "")) for e in events
                        if (e.get("objectRef") or {}).get("namespace") not in (a, b, None,
                                                                                tenants.release_ns)})
    assert elsewhere == [], elsewhere
