"""Least privilege, proven on a real API server (RBAC on): the chart's ServiceAccount drives whole
releases and is refused everything else.

1. helm installs the chart into the sandbox in namespaces mode (watching one test namespace; the
   operator pod itself is kept Pending by a nodeSelector: the operator runs here as a process).
2. A token for the chart's ServiceAccount comes from the TokenRequest API; a kubeconfig with only
   that token is what the operator process gets (``inference-rollout operator --namespace NS``).
3. Under that identity the operator runs a release to 100% through the owned-route mode with
   Prometheus analysis reading the bearer-token Secret, a pause and resume, and a rollback
   (abort) and deletion through a user-owned route (merge patches, orphaning the stable
   revision). Its log must show no 403 / Forbidden and no kopf permission warning.
4. That identity is refused: other Secrets (get, list), ConfigMaps, Pods, workloads outside its
   namespace, deleting rollouts or routes, RBAC objects; SubjectAccessReviews confirm the
   cluster-mode ClusterRole the same way.

The status objects the operator writes along the way are fed to the Argo CD health check
(deploy/argocd/health.lua), so that check is tested on real operator output.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from test_delivery_chart import CHART, NAMESPACED_RULES, helm_binary
from test_delivery_manifests import install_crd, sandbox_cluster

from irsandbox.cluster import Cluster
from irsandbox.common import free_port, wait_for
from irsandbox.harness import BackgroundLoad, OperatorProcess, TrafficWatch
from irsandbox.manifests import httproute, sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TOKEN_SECRET = "prom-token"
#: What a refused request leaves in the operator's log: its own KubeError ("... 403 ..."), kopf's
#: APIForbiddenError, kopf's scanning fallback warnings, and kopf's swallowed Event failures.
FORBIDDEN = re.compile(
    r"\b403\b|Forbidden|forbidden|Not enough permissions|"
    r"Failed to post an event"
)


def _argocd() -> Any:
    """tests/unit/test_argocd_health.py's Lua runner (tests/ is not a package)."""
    path = ROOT / "tests" / "unit" / "test_argocd_health.py"
    spec = importlib.util.spec_from_file_location("argocd_health_runner", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- setup ---------------------------------------------------------------------------------------


@dataclass
class Install:
    release: str
    release_ns: str
    watched: str
    service_account: str
    kubeconfig: Path
    api: client.ApiClient
    snapshots: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def other_operators(watched: str) -> list[str]:
    """Operator processes (not started here) that would also act on ``watched``: two operators
    on one rollout would make this proof meaningless, whatever its outcome."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "inference_rollout" not in " ".join(args) or "operator" not in args:
            continue
        if "--all-namespaces" in args or "-A" in args or watched in args:
            found.append(f"pid {proc.name}: {' '.join(args)}")
    return found


def run_helm(kubeconfig: str, *args: str) -> str:
    proc = subprocess.run(
        [str(helm_binary()), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)}: {proc.stderr}", pytrace=False)
    return proc.stdout


def token_kubeconfig(admin_kubeconfig: str, token: str, path: Path) -> None:
    """A kubeconfig for the same API server that authenticates with ``token`` only."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    cluster = dict(admin["clusters"][0]["cluster"])
    base = Path(admin_kubeconfig).parent
    if "certificate-authority" in cluster:  # relative paths are relative to the old file
        ca = Path(cluster.pop("certificate-authority"))
        cluster["certificate-authority-data"] = base64.b64encode(
            (ca if ca.is_absolute() else base / ca).read_bytes()
        ).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sandbox", "cluster": cluster}],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [
                    {"name": "operator", "context": {"cluster": "sandbox", "user": "operator"}}
                ],
                "current-context": "operator",
            }
        )
    )
    path.chmod(0o600)


def install_for_a_process(cluster: Cluster, release: str, release_ns: str, watched: list[str],
                          directory: Path, *sets: str) -> tuple[str, Path]:
    """helm install in namespaces mode, its operator pod kept Pending (the operator runs as a
    process, under the same identity); the chart's ServiceAccount and a kubeconfig holding only
    a token of it (in ``directory``). ``sets``: more ``--set`` values."""
    kubeconfig = cluster.env["KUBECONFIG"]
    extra = [a for s in sets for a in ("--set", s)]
    run_helm(kubeconfig, "install", release, str(CHART), "--namespace", release_ns,
             "--create-namespace", "--set", "watch.mode=namespaces",
             "--set", f"watch.namespaces={{{','.join(watched)}}}",
             "--set", f"prometheus.bearerTokenSecret={TOKEN_SECRET}", *extra,
             "--set-string", "nodeSelector.inference-rollout\\.dev/never-schedule=true")
    sa = f"{release}-inference-rollout"
    path = directory / "operator.kubeconfig"
    token_kubeconfig(kubeconfig, request_token(cluster.core, release_ns, sa), path)
    return sa, path


def request_token(core: client.CoreV1Api, ns: str, sa: str) -> str:
    req = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    return str(core.create_namespaced_service_account_token(sa, ns, req).status.token)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = sandbox_cluster()
    install_crd(c)
    return c


@pytest.fixture(scope="module")
def install(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    run = uuid.uuid4().hex[:5]
    release, release_ns, watched = f"ir-rbac-{run}", f"rbac-{run}-system", f"rbac-{run}"
    others = other_operators(watched)
    if others:
        pytest.fail("another operator watches every namespace, so the RBAC proof would not show "
                    "what this identity alone can do; run this module in its own pytest "
                    "process, or stop it first:\n" + "\n".join(others), pytrace=False)
    kubeconfig = cluster.env["KUBECONFIG"]
    cluster.create_namespace(watched)
    api = None
    try:
        # With adapter releases on (a preview): release C below runs one under the identity,
        # and the module proves the two verbs it adds (services list, pods patch) suffice.
        sa, path = install_for_a_process(cluster, release, release_ns, [watched],
                                         tmp_path_factory.mktemp("rbac"),
                                         "adapterReleases.enabled=true")
        api = config.new_client_from_config(config_file=str(path))
        yield Install(release, release_ns, watched, sa, path, api)
    finally:
        if api is not None:
            api.close()
        subprocess.run([str(helm_binary()), "--kubeconfig", kubeconfig, "uninstall", release,
                        "--namespace", release_ns], capture_output=True, timeout=120,
                       check=False)
        cluster.delete_namespace(watched)
        cluster.delete_namespace(release_ns)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, install: Install) -> Iterator[OperatorProcess]:
    env = {**cluster.env, "KUBECONFIG": str(install.kubeconfig)}
    # As the chart runs it: campaigning for the chart's Lease in the release's namespace, so
    # the leader-election Role is part of the proof.
    op = OperatorProcess(env, log_name=f"operator-rbac-{install.watched}",
                         namespaces=[install.watched], metrics_port=free_port(),
                         liveness_port=free_port(),
                         extra_args=("--leader-elect", "--leader-election-namespace",
                                     install.release_ns, "--leader-election-id",
                                     f"{install.release}-inference-rollout",
                                     "--adapter-releases", "--adapter-drain-seconds", "1"))
    op.start()
    yield op
    op.stop()


# --- the proof -----------------------------------------------------------------------------------


class StatusTrace:
    """Every distinct (phase, paused reason, per-metric verdict and error) the operator writes,
    polled in the background: when a release stalls, this says why (an analysis error caused by a
    refused Secret read, for instance, shows up here and not in the operator's log)."""

    def __init__(self, cluster: Cluster, ns: str, name: str) -> None:
        self.cluster, self.ns, self.name = cluster, ns, name
        self.seen: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StatusTrace:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                st = self.cluster.status(self.ns, self.name)
            except Exception:  # deleted, or the API server restarting: keep polling
                continue
            analysis = st.get("analysis") or {}
            line = (f"{st.get('phase')} step={st.get('currentStep')} "
                    f"weight={st.get('canaryWeight')} paused={st.get('pausedReason')} " +
                    " ".join(f"{k}={v.get('verdict')}:{v.get('error') or ''}"
                             for k, v in sorted(analysis.items())))
            if not self.seen or self.seen[-1] != line:
                self.seen.append(line)
            self.errors += [str(v["error"]) for v in analysis.values() if v.get("error")]

    def explain(self) -> str:
        return "status trace:\n  " + "\n  ".join(self.seen[-40:])


def snapshot(install: Install, cluster: Cluster, ns: str, name: str, label: str) -> None:
    install.snapshots.setdefault(label, []).append(cluster.rollout(ns, name))


def _healthy_resuming_after_outages(cluster: Cluster, rel: Release, ns: str,
                                    revision: str) -> dict[str, Any]:
    """Wait for Healthy on ``revision``. The sandbox is shared: if Prometheus went away for a
    while (another session restarting it), the operator rightly pauses at its error limit; once
    a measurement passes again, resume it as a person would. RBAC is what is under test here."""
    resumed = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        st = rel.status()
        if st.get("phase") == "Healthy" and st.get("stableRevision") == revision \
                and not st.get("canaryRevision"):
            return st
        verdicts = {v.get("verdict") for v in (st.get("analysis") or {}).values()}
        if st.get("pausedReason") == "AnalysisErrorLimit" and verdicts <= {"Pass"} \
                and resumed < 3:
            cluster.request(ns, rel.name, "resume")
            resumed += 1
        time.sleep(1)
    return rel.wait_healthy(revision=revision, timeout=1)  # fails with the operator's story


def _release_a(cluster: Cluster, install: Install, rel: Release, ns: str) -> None:
    """v1, then v2 through every step with a pause and resume on the way, analysis reading the
    Prometheus token Secret."""
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    snapshot(install, cluster, ns, "rbac-a", "Healthy")
    load = BackgroundLoad(cluster.env, rel.host)
    try:
        rel.apply(with_template(rel.manifest, version="v2"))
        v2 = rel.wait_canary()
        rel.wait(lambda s: s.get("canaryWeight", 0) > 0, 90, "canary receiving traffic")
        snapshot(install, cluster, ns, "rbac-a", "Progressing")
        cluster.request(ns, "rbac-a", "pause")
        rel.wait(lambda s: s.get("phase") == "Paused", 60, "paused")
        snapshot(install, cluster, ns, "rbac-a", "Suspended")
        cluster.request(ns, "rbac-a", "resume")
        st = _healthy_resuming_after_outages(cluster, rel, ns, v2)
        assert st["analysis"]["errors"]["verdict"] == "Pass", st["analysis"]
        rel.wait(lambda s: f"rbac-a-{v1}" not in cluster.deployments(ns), 60, "old stable deleted")
    finally:
        load.stop()


def _release_c(cluster: Cluster, install: Install, operator: OperatorProcess,
               ns: str) -> None:
    """An adapter release: v1 loaded into new pods, then v2 moved through every step and
    promoted, under load on the adapter's model name (tests/e2e/test_adapter_release.py
    proves the release itself)."""
    manifest = sandbox_rollout("rbac-c", prometheus=cluster.env["PROMETHEUS_URL"], replicas=2,
                               steps=[{"weight": 50, "pause": "10s"}, {"weight": 100}])
    vllm = manifest["spec"]["template"]["spec"]["containers"][0]
    vllm["args"] += ["--enable-lora", "--max-loras", "2"]
    vllm["env"] = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}]
    manifest["spec"]["adapters"] = [{"name": "support", "source": "/adapters/support/v1"}]
    rel = Release(cluster, operator, ns, manifest)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    watch = TrafficWatch(cluster.env, rel.host, rate=10, model="support").start()
    try:
        changed = copy.deepcopy(rel.manifest)
        changed["spec"]["adapters"] = [{"name": "support", "source": "/adapters/support/v2"}]
        rel.apply(changed)
        v2 = rel.wait_canary()
        assert v2 != v1
        rel.wait(lambda s: (s.get("canaryWeight") or 0) > 0, 60, "the adapter canary weighted")
        snapshot(install, cluster, ns, "rbac-c", "Progressing")
        st = _healthy_resuming_after_outages(cluster, rel, ns, v2)
        assert {p.get("version") for p in st["adapterPods"]} <= {v1, v2}
        rel.wait(lambda s: {p.get("version") for p in s.get("adapterPods") or []} == {v2}, 60,
                 "every pod on v2")
        snapshot(install, cluster, ns, "rbac-c", "Healthy")
    finally:
        watch.stop()


def test_a_whole_release_runs_under_the_charts_identity(
    cluster: Cluster, install: Install, operator: OperatorProcess
) -> None:
    ns = install.watched
    cluster.core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=TOKEN_SECRET), string_data={"token": "t0ken"}
        ),
    )

    # Release A: owned route, Prometheus analysis with the bearer-token Secret
    manifest = sandbox_rollout("rbac-a", prometheus=cluster.env["PROMETHEUS_URL"], replicas=1)
    manifest["spec"]["analysis"]["prometheus"]["bearerTokenSecretRef"] = {
        "name": TOKEN_SECRET,
        "key": "token",
    }
    rel = Release(cluster, operator, ns, manifest)
    with StatusTrace(cluster, ns, "rbac-a") as trace:
        try:
            _release_a(cluster, install, rel, ns)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{trace.explain()}") from None
    refused = [e for e in trace.errors if FORBIDDEN.search(e)]
    assert not refused, f"analysis errors from refused requests: {sorted(set(refused))}"

    # Release B: a user-owned route (merge patches), rolled back, then the rollout deleted
    route = httproute("b-route", [("placeholder", 1)], ["rbac-b.test"])
    cluster.create(ns, route)
    b = sandbox_rollout(
        "rbac-b",
        prometheus=cluster.env["PROMETHEUS_URL"],
        replicas=1,
        metrics=[],
        steps=[{"weight": 50, "pause": "10m"}, {"weight": 100}],
    )
    b["spec"]["traffic"] = {"gatewayAPI": {"httpRouteRef": {"name": "b-route"}}}
    rel_b = Release(cluster, operator, ns, b)
    rel_b.apply()
    b1 = rel_b.wait_healthy()["stableRevision"]
    rel_b.apply(with_template(rel_b.manifest, version="v2"))
    rel_b.wait(lambda s: s.get("canaryWeight") == 50, 90, "canary at 50%")
    cluster.request(ns, "rbac-b", "abort")
    st = rel_b.wait(lambda s: s.get("phase") == "Degraded", 60, "rolled back")
    assert st["canaryWeight"] == 0 and cluster.route_weights(ns, "b-route")[f"rbac-b-{b1}"] == 100
    snapshot(install, cluster, ns, "rbac-b", "Degraded")

    # Release C: an adapter release (pods relabelled, Services listed), promoted
    _release_c(cluster, install, operator, ns)

    # Deleting all: the finalizer returns traffic to stable, the user route's stable backend
    # is orphaned so garbage collection leaves it serving
    for name in ("rbac-a", "rbac-b", "rbac-c"):
        cluster.delete_rollout(ns, name)
    wait_for(
        lambda: not cluster.rollouts(ns),
        60,
        "both rollouts deleted (finalizer removed by the operator)",
        interval=0.5,
        tolerate=(),
    )
    orphan = cluster.apps.read_namespaced_deployment(f"rbac-b-{b1}", ns)
    assert not orphan.metadata.owner_references

    # Then: the operator never hit a permission error, and wrote its Events itself
    time.sleep(1)
    log = operator.tail(100000)
    denied = [line for line in log.splitlines() if FORBIDDEN.search(line)]
    assert not denied, "permission errors under the chart's identity:\n" + "\n".join(denied[:20])
    reasons = {e["reason"] for e in cluster.events(ns, "rbac-a")}
    assert {"StepWeightSet", "Promoted"} <= reasons, reasons


def test_argocd_health_on_objects_the_operator_wrote(install: Install) -> None:
    if not install.snapshots:
        pytest.fail(
            "the release test did not run first (run the module, not one test)", pytrace=False
        )
    argocd = _argocd()
    for want, objects in install.snapshots.items():
        for obj in objects:
            got = argocd.health(obj)
            assert got["status"] == want, (got, obj.get("status"))
    (degraded,) = install.snapshots["Degraded"]
    assert argocd.discover(degraded) == {"promote": False, "abort": False, "retry": True}
    progressing, adapter_release = install.snapshots["Progressing"]
    assert argocd.discover(progressing)["abort"]
    # an adapter release's message counts its pods per version (deploy/argocd/health.lua)
    assert "; adapter pods: " in argocd.health(adapter_release)["message"], adapter_release
    assert argocd.run_action("abort", progressing) == {"status": {"requests": {"abort": True}}}


def _status(fn: Any, *args: Any, **kwargs: Any) -> int:
    try:
        fn(*args, **kwargs)
        return 200
    except ApiException as e:
        return int(e.status)


def test_the_identity_is_refused_what_it_must_not_do(cluster: Cluster, install: Install) -> None:
    ns, other = install.watched, install.release_ns
    core, apps = client.CoreV1Api(install.api), client.AppsV1Api(install.api)
    custom, rbac = client.CustomObjectsApi(install.api), client.RbacAuthorizationV1Api(install.api)
    cluster.core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="unrelated"), string_data={"password": "x"}
        ),
    )
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="x"),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="x", image="registry.k8s.io/pause:3.10")]
        ),
    )
    deploy = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="x"),
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(match_labels={"a": "b"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"a": "b"}), spec=pod.spec
            ),
        ),
    )
    refused = {
        "get an unrelated Secret": _status(core.read_namespaced_secret, "unrelated", ns),
        "list Secrets": _status(core.list_namespaced_secret, ns),
        "list Secrets cluster-wide": _status(core.list_secret_for_all_namespaces),
        "create a ConfigMap": _status(core.create_namespaced_config_map, ns, cm),
        "create a Pod": _status(core.create_namespaced_pod, ns, pod),
        "create a Deployment outside its namespaces": _status(
            apps.create_namespaced_deployment, other, deploy
        ),
        "list Deployments outside its namespaces": _status(apps.list_namespaced_deployment, other),
        "delete an InferenceRollout": _status(
            custom.delete_namespaced_custom_object,
            "rollouts.inference.dev",
            "v1alpha1",
            ns,
            "inferencerollouts",
            "any",
        ),
        "delete an HTTPRoute": _status(
            custom.delete_namespaced_custom_object,
            "gateway.networking.k8s.io",
            "v1",
            ns,
            "httproutes",
            "b-route",
        ),
        "create a ClusterRole": _status(
            rbac.create_cluster_role,
            client.V1ClusterRole(metadata=client.V1ObjectMeta(name=f"{install.release}-escalate")),
        ),
        "list Nodes": _status(core.list_node),
    }
    assert {what: code for what, code in refused.items() if code != 403} == {}
    # ... while the one named Secret stays readable
    assert _status(core.read_namespaced_secret, TOKEN_SECRET, ns) in (200, 404)


def _sar(
    cluster: Cluster, user: str, ns: str, verb: str, group: str, resource: str, name: str = ""
) -> bool:
    res, _, sub = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=ns,
                verb=verb,
                group=group,
                resource=res,
                subresource=sub or None,
                name=name or None,
            ),
        )
    )
    out = client.AuthorizationV1Api(cluster.api).create_subject_access_review(review)
    return bool(out.status.allowed)


def _denied_everywhere(cluster: Cluster, user: str, ns: str) -> list[str]:
    probes = [
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("watch", "", "secrets"),
        ("create", "", "pods/exec"),
        ("get", "", "pods/log"),
        ("create", "", "pods"),
        ("update", "apps", "deployments"),
        ("deletecollection", "apps", "deployments"),
        ("delete", "rollouts.inference.dev", "inferencerollouts"),
        ("update", "rollouts.inference.dev", "inferencerollouts"),
        ("delete", "gateway.networking.k8s.io", "httproutes"),
        ("get", "inference.networking.k8s.io", "inferencepools"),
        ("create", "", "configmaps"),
        ("create", "", "serviceaccounts/token"),
    ]
    return [f"{v} {g}/{r}" for v, g, r in probes if _sar(cluster, user, ns, v, g, r)]


def test_subject_access_reviews_in_both_modes(cluster: Cluster, install: Install) -> None:
    # namespaces mode (installed above): every rule allowed in the watched namespace only
    user = f"system:serviceaccount:{install.release_ns}:{install.service_account}"
    for (group, resource), verbs in NAMESPACED_RULES.items():
        for verb in verbs:
            assert _sar(cluster, user, install.watched, verb, group, resource), (verb, resource)
            assert not _sar(cluster, user, "default", verb, group, resource), (verb, resource)
    assert _sar(cluster, user, install.watched, "get", "", "secrets", TOKEN_SECRET)
    assert not _sar(cluster, user, install.watched, "get", "", "secrets", "unrelated")
    assert _denied_everywhere(cluster, user, install.watched) == []

    # cluster mode: the same rules in any namespace, still no Secrets
    run = uuid.uuid4().hex[:5]
    release, release_ns = f"ir-rbacc-{run}", f"rbacc-{run}-system"
    kubeconfig = cluster.env["KUBECONFIG"]
    run_helm(
        kubeconfig,
        "install",
        release,
        str(CHART),
        "--namespace",
        release_ns,
        "--create-namespace",
        "--set-string",
        "nodeSelector.inference-rollout\\.dev/never=true",
    )
    try:
        user = f"system:serviceaccount:{release_ns}:{release}-inference-rollout"
        for ns in (install.watched, "default", f"anything-{run}"):
            for (group, resource), verbs in NAMESPACED_RULES.items():
                for verb in verbs:
                    assert _sar(cluster, user, ns, verb, group, resource), (ns, verb, resource)
            assert _denied_everywhere(cluster, user, ns) == [], ns
    finally:
        run_helm(kubeconfig, "uninstall", release, "--namespace", release_ns)
        cluster.delete_namespace(release_ns)


def test_helm_left_no_secret_access_behind(cluster: Cluster, install: Install) -> None:
    # The Role in the watched namespace names exactly one Secret, as rendered.
    role = client.RbacAuthorizationV1Api(cluster.api).read_namespaced_role(
        f"{install.release}-inference-rollout", install.watched
    )
    secret_rules = [r for r in role.rules if "secrets" in r.resources]
    assert [(r.verbs, r.resource_names) for r in secret_rules] == [(["get"], [TOKEN_SECRET])]
