"""The Helm chart rendered by the real helm binary: RBAC per mode, least privilege, the operator
Deployment's settings, the values schema.

Every test runs under Helm 4 and Helm 3 (the libraries Argo CD and Flux render charts with), the
binaries sandbox/build.sh builds into the cache. The rendering tests need no cluster; the last
ones install the chart on the sandbox's API server (``--dry-run=server``, then an install and an
upgrade). It lives in the sandbox tier because that tier runs after the build; a missing helm is a
failure, not a skip. tests/sandbox/test_delivery_rbac.py proves the same rules against a real API
server.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from irsandbox.common import REPO, cache_dir, versions

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(120)]

CHART = REPO / "charts" / "inference-rollout"

#: The least-privilege contract: (apiGroup, resource) -> verbs, derived from the operator's code
#: (the reasons are comments in charts/inference-rollout/templates/_rbac_rules.tpl). A change here
#: is a change to what the operator may do: review it as such.
NAMESPACED_RULES = {
    ("rollouts.inference.dev", "inferencerollouts"): ["get", "list", "watch", "patch"],
    ("rollouts.inference.dev", "inferencerollouts/status"): ["patch"],
    ("rollouts.inference.dev", "inferencerollouts/finalizers"): ["update"],
    ("apps", "deployments"): ["list", "watch", "create", "patch", "delete"],
    ("", "services"): ["get", "create", "patch", "delete"],
    ("", "pods"): ["list"],
    ("", "configmaps"): ["get"],  # the evaluation gate reads spec.evaluation's cases
    ("gateway.networking.k8s.io", "httproutes"): ["get", "list", "watch", "create", "patch"],
    ("", "events"): ["create", "get", "patch"],
}
CRD_SCANNING = {("apiextensions.k8s.io", "customresourcedefinitions"): ["list", "watch"]}
NAMESPACE_SCANNING = {("", "namespaces"): ["list", "watch"]}


#: The helm majors the chart is tested with: (build.sh step, its version in versions.env).
HELMS = {"helm4": ("helm", "HELM_VERSION"), "helm3": ("helm3", "HELM3_VERSION")}
#: The one this module's tests run with now (set by the ``helm_major`` fixture).
_current = {"major": "helm4"}


def helm_binary(major: str = "helm4") -> Path:
    """A helm that sandbox/build.sh builds: $IR_CACHE/bin/<step>-<version>."""
    step, key = HELMS[major]
    path = cache_dir() / "bin" / f"{step}-{versions()[key]}"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{major} is missing: {path} is not an executable; build it with "
                    f"`bash sandbox/build.sh {step}` (make test does this)", pytrace=False)
    return path


@pytest.fixture(params=sorted(HELMS), scope="module", autouse=True)
def helm_major(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test of this module, once per helm major."""
    _current["major"] = request.param
    yield request.param
    _current["major"] = "helm4"


def helm(*args: str, check: bool = True, kubeconfig: str | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm_binary(_current["major"]))]
    if kubeconfig:
        cmd += ["--kubeconfig", kubeconfig]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}",
                    pytrace=False)
    return proc


def render(*sets: str, namespace: str = "ir-system", release: str = "ir",
           include_crds: bool = False, strings: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """`helm template` of the chart with ``--set`` (and ``--set-string``) values; the
    documents, parsed."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    for s in sets:
        args += ["--set", s]
    for s in strings:
        args += ["--set-string", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def rule_map(rules: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, resource)
                assert key not in out, f"{key} granted twice"
                out[key] = rule["verbs"]
    return out


#: The Role for the replicas' Lease in the release's namespace (leaderElection.enabled).
LEADER_ROLE = "ir-inference-rollout-leader-election"


def all_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules on rollouts and their objects (every Role but the Lease's)."""
    return [r for d in operator_roles(docs) for r in d.get("rules", [])]


def operator_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Role", "ClusterRole")
            and d["metadata"]["name"] != LEADER_ROLE]


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = of_kind(docs, "Deployment")
    return dep


# --- RBAC ----------------------------------------------------------------------------------------


def test_cluster_mode_is_one_clusterrole_with_exactly_the_operators_rules() -> None:
    docs = render()
    assert [r["metadata"]["name"] for r in of_kind(docs, "Role")] == [LEADER_ROLE]
    (role,) = of_kind(docs, "ClusterRole")
    assert rule_map(role["rules"]) == {**NAMESPACED_RULES, **CRD_SCANNING}
    (binding,) = of_kind(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ir-inference-rollout",
                                    "namespace": "ir-system"}]
    assert deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"][0] == \
        "--all-namespaces"


def test_namespaces_mode_renders_a_role_per_namespace() -> None:
    docs = render("watch.mode=namespaces", "watch.namespaces={team-a,team-b}")
    roles = [r for r in operator_roles(docs) if r["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rule_map(role["rules"]) == NAMESPACED_RULES
    bindings = [b for b in of_kind(docs, "RoleBinding") if b["metadata"]["name"] != LEADER_ROLE]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["roleRef"]["kind"] == "Role"
        assert b["subjects"][0]["namespace"] == "ir-system"  # the operator's own namespace
    # the only cluster-wide grant: kopf's scanning of CRDs and namespaces, metadata reads
    (cluster_role,) = of_kind(docs, "ClusterRole")
    assert rule_map(cluster_role["rules"]) == {**CRD_SCANNING, **NAMESPACE_SCANNING}
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["--namespace", "team-a", "--namespace", "team-b"]
    assert "--all-namespaces" not in args


def test_namespaces_mode_without_scanning_grants_nothing_cluster_wide() -> None:
    docs = render("watch.mode=namespaces", "watch.namespaces={team-a}", "rbac.kopfScanning=false")
    assert not of_kind(docs, "ClusterRole") and not of_kind(docs, "ClusterRoleBinding")
    assert len(operator_roles(docs)) == 1


@pytest.mark.parametrize("mode", [(), ("watch.mode=namespaces", "watch.namespaces={a}")])
def test_no_wildcards_and_no_secrets_by_default(mode: tuple[str, ...]) -> None:
    rules = all_rules(render(*mode))
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"wildcard in {field}: {rule}"
        assert "secrets" not in rule["resources"], rule
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
        if "update" in rule["verbs"]:  # only to set blockOwnerDeletion on owned objects
            assert rule["resources"] == ["inferencerollouts/finalizers"], rule


@pytest.mark.parametrize("mode", [(), ("watch.mode=namespaces", "watch.namespaces={a,b}")])
def test_a_prometheus_token_secret_is_readable_by_name_only(mode: tuple[str, ...]) -> None:
    docs = render(*mode, "prometheus.bearerTokenSecret=prometheus-token")
    secret_rules = [r for r in all_rules(docs) if "secrets" in r["resources"]]
    assert secret_rules, "the named Secret must be readable"
    for rule in secret_rules:
        assert rule == {"apiGroups": [""], "resources": ["secrets"],
                        "resourceNames": ["prometheus-token"], "verbs": ["get"]}
    assert len(secret_rules) == (1 if not mode else 2)  # one per Role in namespaces mode


@pytest.mark.parametrize("mode", [(), ("watch.mode=namespaces", "watch.namespaces={a,b}")])
def test_inference_pools_are_granted_only_when_asked(mode: tuple[str, ...]) -> None:
    pool = ("inference.networking.k8s.io", "inferencepools")
    assert all(pool not in rule_map([r]) for r in all_rules(render(*mode)))
    docs = render(*mode, "rbac.inferencePools=true")
    granted = [rule_map([r])[pool] for r in all_rules(docs) if pool in rule_map([r])]
    assert granted == [["get", "create", "delete"]] * (1 if not mode else 2)


def test_rbac_can_be_left_to_the_user() -> None:
    docs = render("rbac.create=false")
    assert not [d for d in docs if d["kind"].endswith(("Role", "RoleBinding"))]
    assert of_kind(docs, "ServiceAccount")


# --- the operator Deployment ---------------------------------------------------------------------


def test_deployment_runs_two_locked_down_replicas_under_leader_election() -> None:
    docs = render()
    dep = deployment(docs)
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    args = spec["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--leader-elect"):] == [
        "--leader-elect", "--leader-election-id", "ir-inference-rollout", "--lease-duration",
        "8", "--renew-deadline", "5", "--retry-period", "1"]
    (pdb,) = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == spec["selector"]
    (lease_role,) = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == LEADER_ROLE]
    assert lease_role["metadata"]["namespace"] == "ir-system"
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["ir-inference-rollout"], "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "topologyKey"] == "kubernetes.io/hostname"


def test_one_replica_without_leader_election_recreates_and_more_are_refused() -> None:
    docs = render("replicas=1", "leaderElection.enabled=false")
    spec = deployment(docs)["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert "--leader-elect" not in spec["template"]["spec"]["containers"][0]["args"]
    assert not of_kind(docs, "PodDisruptionBudget") and LEADER_ROLE not in {
        r["metadata"]["name"] for r in of_kind(docs, "Role")}
    with pytest.raises(pytest.fail.Exception, match=r"replicas > 1 needs leaderElection\.enabled"):
        render("leaderElection.enabled=false")


def test_deployment_runs_locked_down() -> None:
    dep = deployment(render())
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ir-inference-rollout"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["requests"].keys() == {"cpu", "memory"}
    assert "memory" in c["resources"]["limits"]
    # probes and ports: kopf's /healthz on 8080, metrics on 8081, JSON logs
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"healthz": 8080, "metrics": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    args = c["args"]
    assert args[args.index("--log-format") + 1] == "json"
    assert args[args.index("--liveness-port") + 1] == "8080"
    assert args[args.index("--metrics-port") + 1] == "8081"
    assert c["image"] == "inference-rollout:0.1.0"  # appVersion when image.tag is empty
    # the only writable path is an emptyDir on /tmp
    assert c["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]


def settings_flags(args: list[str]) -> list[str]:
    """The flags the tenancy and notification values add: after the ports, before the leader
    election flags (on by default: replicas 2)."""
    end = args.index("--leader-elect") if "--leader-elect" in args else len(args)
    return args[args.index("--metrics-port") + 2:end]


def test_tenancy_settings_become_operator_flags() -> None:
    # secure by default: no address allowed (the operator's default), queries confined (its
    # default too): no tenancy flag at all
    args = deployment(render())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_flags(args) == []
    docs = render("tenancy.prometheusAllow={http://prometheus.monitoring:9090,"
                  "https://thanos.example.com/tenant-a}")
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_flags(args) == [
        "--prometheus-allow", "http://prometheus.monitoring:9090",
        "--prometheus-allow", "https://thanos.example.com/tenant-a"]
    # the opt-outs, explicit
    docs = render("tenancy.allowAnyPrometheus=true", "tenancy.confineQueries=false")
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_flags(args) == ["--prometheus-allow-any", "--no-confine-queries"]
    # both at once is a mistake, refused by the render
    both = helm("template", "ir", str(CHART), "--set", "tenancy.allowAnyPrometheus=true",
                "--set", "tenancy.prometheusAllow={http://p:9090}", check=False)
    assert both.returncode != 0 and "exclude each other" in both.stderr


def test_notification_settings_become_flags_and_grant_exactly_their_secrets() -> None:
    args = deployment(render())["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--notify-secret" not in args and "--notify-allow" not in args  # off by default
    docs = render("notifications.namespaceSecret=inference-rollout-notifications",
                  "notifications.secretNames={chat-oncall}",
                  "notifications.allow={https://hooks.slack.com/services}")
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_flags(args) == [
        "--notify-secret", "inference-rollout-notifications",
        "--notify-allow", "https://hooks.slack.com/services"]
    (rule,) = [r for r in all_rules(docs) if "secrets" in r["resources"]]
    assert rule == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                    "resourceNames": ["inference-rollout-notifications", "chat-oncall"]}


def test_metrics_service_and_optional_service_monitor() -> None:
    docs = render()
    (svc,) = of_kind(docs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8081, "targetPort": "metrics",
                                     "protocol": "TCP"}]
    dep_labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= dep_labels.items()
    assert not of_kind(docs, "ServiceMonitor"), "off by default"
    (sm,) = of_kind(render("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_crds_come_from_the_chart_crds_directory() -> None:
    crds = of_kind(render(include_crds=True), "CustomResourceDefinition")
    assert [c["metadata"]["name"] for c in crds] == ["inferencerollouts.rollouts.inference.dev"]
    top = yaml.safe_load((REPO / "crds" / "rollouts.inference.dev_inferencerollouts.yaml")
                         .read_text())
    assert crds[0] == top


# --- values validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(("sets", "message"), [
    (["watch.mode=everything"], "/watch/mode"),
    (["watch.mode=namespaces"], "/watch/namespaces"),
    (["watch.namespaces={a}"], "/watch/namespaces"),       # a list without namespaces mode
    (["watch.mode=namespaces", "watch.namespaces={Not_A_Namespace}"], "/watch/namespaces"),
    (["prometheus.bearerTokenSecret=bad name"], "/prometheus/bearerTokenSecret"),
    (["operator.logFormat=xml"], "/operator/logFormat"),
    (["replicaCount=2"], "additional properties"),         # one operator, by design
    (["tenancy.prometheusAllow={prometheus:9090}"], "/tenancy/prometheusAllow/0"),
    (["tenancy.confineQueries=maybe"], "/tenancy/confineQueries"),
    (["tenancy.allowAnyPrometheus=yes"], "/tenancy/allowAnyPrometheus"),
])
def test_the_schema_rejects_bad_values(sets: list[str], message: str) -> None:
    args = ["template", "ir", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = helm(*args, check=False)
    assert proc.returncode != 0, f"helm accepted {sets}"
    assert message in proc.stderr, proc.stderr


def test_helm_lint_passes() -> None:
    for sets in ([], ["watch.mode=namespaces", "watch.namespaces={a,b}"]):
        args = ["lint", str(CHART), "--strict"]
        for s in sets:
            args += ["--set", s]
        helm(*args)


def test_notes_describe_the_mode(helm_major: str, request: pytest.FixtureRequest) -> None:
    # Helm 3's client-side dry run still asks a cluster whether it is reachable; Helm 4's does not
    sandbox_env = request.getfixturevalue("sandbox").env
    kubeconfig = sandbox_env["KUBECONFIG"] if helm_major == "helm3" else None
    out = helm("install", "ir", str(CHART), "--dry-run=client", "--namespace", "ops",
               "--set", "watch.mode=namespaces", "--set", "watch.namespaces={a,b}",
               kubeconfig=kubeconfig).stdout
    assert "It watches InferenceRollouts in: a, b (a Role in each)." in out
    assert "It can read no Secret" in out


# --- Helm 3 and Helm 4 agree; the kubeVersion constraint -----------------------------------------


def test_helm3_and_helm4_render_the_same_manifests() -> None:
    """What Argo CD or Flux (Helm 3's libraries) apply is what the Helm 4 tests check."""
    outputs = {}
    for major in HELMS:
        proc = subprocess.run(
            [str(helm_binary(major)), "template", "ir", str(CHART), "--namespace", "ir-system",
             "--include-crds", "--set", "watch.mode=namespaces", "--set", "watch.namespaces={a}"],
            capture_output=True, text=True, timeout=60, check=True)
        outputs[major] = [line for line in proc.stdout.splitlines() if line.strip()]
    assert outputs["helm3"] == outputs["helm4"]


def test_kube_version_below_1_29_is_refused_and_a_default_render_passes() -> None:
    """The chart keeps ``kubeVersion: >=1.29.0-0`` (server-side apply, CEL rules in the CRD):
    an older target is refused by name; without ``--kube-version`` each helm renders for the
    Kubernetes its client-go was built with (1.37 for both), so a plain ``helm template`` works."""
    proc = helm("template", "ir", str(CHART), "--kube-version", "1.28.0", check=False)
    assert proc.returncode != 0
    assert "chart requires kubeVersion: >=1.29.0-0" in proc.stderr, proc.stderr
    assert "Kubernetes v1.28.0" in proc.stderr, proc.stderr
    assert of_kind(render(), "Deployment")  # no --kube-version


# --- on the sandbox's API server -----------------------------------------------------------------


@pytest.fixture()
def release_namespace(sandbox: Any) -> Iterator[tuple[str, str]]:
    """A namespace name for a release (helm creates it) and the admin kubeconfig."""
    ns = f"chart-{uuid.uuid4().hex[:6]}"
    yield ns, sandbox.env["KUBECONFIG"]
    try:
        client.CoreV1Api(sandbox.api).delete_namespace(ns, propagation_policy="Background")
    except ApiException as e:
        if e.status != 404:
            raise


def test_install_dry_run_server_then_install_and_upgrade(
        release_namespace: tuple[str, str], helm_major: str) -> None:
    ns, kubeconfig = release_namespace
    release = f"ir-{helm_major}"
    # the operator's pod stays Pending: the operator is not what this test runs
    pending = ("--set-string", "nodeSelector.inference-rollout\\.dev/never-schedule=true")
    common = ("--namespace", ns, "--set", "watch.mode=namespaces",
              "--set", f"watch.namespaces={{{ns}}}", "--set", "rbac.kopfScanning=false", *pending)
    dry = helm("install", release, str(CHART), "--dry-run=server", "--create-namespace",
               *common, kubeconfig=kubeconfig, timeout=120).stdout
    assert "kind: Deployment" in dry and "kind: Role" in dry
    assert helm("status", release, "--namespace", ns, kubeconfig=kubeconfig,
                check=False).returncode != 0, "a dry run must not install"
    try:
        helm("install", release, str(CHART), "--create-namespace", "--skip-crds", *common,
             kubeconfig=kubeconfig, timeout=120)
        out = helm("upgrade", release, str(CHART), *common, "--set", "operator.logFormat=plain",
                   kubeconfig=kubeconfig, timeout=120).stdout
        assert "STATUS: deployed" in out and "REVISION: 2" in out, out
        manifest = helm("get", "manifest", release, "--namespace", ns,
                        kubeconfig=kubeconfig).stdout
        dep = deployment([d for d in yaml.safe_load_all(manifest) if d])
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--log-format") + 1] == "plain"
    finally:
        helm("uninstall", release, "--namespace", ns, kubeconfig=kubeconfig, check=False,
             timeout=120)


def test_adapter_releases_add_the_flag_and_only_the_rules_they_need() -> None:
    """adapterReleases.enabled (docs/adapters.md): the operator's flags, and two verbs more
    (Services listed, pods' labels patched), nothing else."""
    docs = render("watch.mode=namespaces", "watch.namespaces={team-a}",
                  "adapterReleases.enabled=true", "adapterReleases.drainSeconds=2")
    (role,) = [r for r in operator_roles(docs) if r["kind"] == "Role"]
    wanted = dict(NAMESPACED_RULES)
    wanted[("", "services")] = [*wanted[("", "services")], "list"]
    wanted[("", "pods")] = [*wanted[("", "pods")], "patch"]
    assert rule_map(role["rules"]) == wanted
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--adapter-releases") + 1:][:2] == ["--adapter-drain-seconds", "2"]
    off = render("watch.mode=namespaces", "watch.namespaces={team-a}")
    assert "--adapter-releases" not in deployment(off)["spec"]["template"]["spec"][
        "containers"][0]["args"]
