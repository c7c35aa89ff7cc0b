"""Every manifest a user applies from this repository, applied to the sandbox's real API server
with server-side dry-run (dryRun=All, fieldValidation=Strict): the examples, the kind path's
manifests (what hack/kind-up.sh applies), the chart as rendered by helm, the Argo CD ConfigMap
patch, and the Gateway API CRDs. The API server checks each against its schema -- for
InferenceRollouts the CRD's OpenAPI schema and CEL rules -- and admission, without storing it.

Namespaces in the manifests (serving, monitoring, ...) are mapped to fresh test namespaces. This
module uses the running sandbox as it finds it (``.sandbox/env``) and never starts or stops it.
hack/kind-up.sh itself is checked with shellcheck here; Docker, kind and the Envoy Gateway chart
are not available in the sandbox (docs/kind.md says what ran where).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from test_delivery_chart import render

from irsandbox.cluster import CRD_FILE, Cluster
from irsandbox.common import REPO, cache_dir, versions

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]

FIELD_MANAGER = "inference-rollout-delivery-tests"


class ApplyError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status} {body}")
        self.status, self.body = status, body


def server_side_apply(api: client.ApiClient, path: str, body: dict[str, Any], *,
                      dry_run: bool, manager: str = FIELD_MANAGER) -> dict[str, Any]:
    """PATCH application/apply-patch+yaml (force, strict field validation), as `kubectl apply
    --server-side` does. Written against the generated client's param_serialize/call_api, so it
    does not depend on the older call_api signature."""
    query = [("fieldManager", manager), ("force", "true"), ("fieldValidation", "Strict")]
    if dry_run:
        query.append(("dryRun", "All"))
    method, url, headers, data, post = api.param_serialize(
        "PATCH", path, query_params=query, body=body, auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/apply-patch+yaml",
                       "Accept": "application/json"})
    resp = api.call_api(method, url, header_params=headers, body=data, post_params=post)
    resp.read()
    text = (resp.data or b"").decode(errors="replace")
    if resp.status >= 400:
        raise ApplyError(resp.status, text)
    out: dict[str, Any] = json.loads(text) if text else {}
    return out


def sandbox_cluster() -> Cluster:
    """The running sandbox (``.sandbox/env``), checked to answer; this tier never starts or stops
    it (sandbox/up.sh, make sandbox-up)."""
    try:
        c = Cluster()
        client.VersionApi(c.api).get_code(_request_timeout=5)
    except Exception as e:  # no env file, or nothing listening
        pytest.fail(f"the sandbox is not running ({e}): start it with `make sandbox-up`",
                    pytrace=False)
    return c


def install_crd(cluster: Cluster) -> None:
    """The committed InferenceRollout CRD, server-side applied, then Established."""
    body = yaml.safe_load(CRD_FILE.read_text())
    name = body["metadata"]["name"]
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    server_side_apply(cluster.api, path, body, dry_run=False, manager="inference-rollout-tests")
    cluster.wait_crd_established(name)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = sandbox_cluster()
    install_crd(c)  # the InferenceRollout CRD, so the examples are checked against it
    return c


@pytest.fixture(scope="module")
def dynamic(cluster: Cluster) -> DynamicClient:
    return DynamicClient(cluster.api)


@pytest.fixture()
def namespaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Real namespaces standing in for the manifests' own (dry-run cannot create into a
    namespace that does not exist)."""
    run = uuid.uuid4().hex[:5]
    mapping = {
        ns: f"dlv-{run}-{ns}"[:63]
        for ns in ("serving", "lora-demo", "monitoring", "inference-rollout-system", "argocd")
    }
    for ns in mapping.values():
        cluster.create_namespace(ns)
    yield mapping
    for ns in mapping.values():
        cluster.delete_namespace(ns)


def remap(doc: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """``doc`` in the test's namespaces. A namespace the mapping lacks fails here, naming it:
    otherwise the dry-run would pass only on a sandbox where someone created that namespace by
    hand (a docs walk-through), and fail on a fresh one."""
    out = copy.deepcopy(doc)
    meta = out["metadata"]
    if out["kind"] == "Namespace":
        meta["name"] = mapping.get(meta["name"], meta["name"])
    if "namespace" in meta:
        assert meta["namespace"] in mapping, (
            f"{doc['kind']} {meta['name']}: namespace {meta['namespace']!r} is not one the "
            f"test creates; add it to the namespaces fixture ({sorted(mapping)})")
        meta["namespace"] = mapping[meta["namespace"]]
    for subject in out.get("subjects") or []:
        if "namespace" in subject:
            subject["namespace"] = mapping.get(subject["namespace"], subject["namespace"])
    return out


def dry_run_apply(cluster: Cluster, dynamic: DynamicClient, doc: dict[str, Any]) -> None:
    """Server-side apply with dryRun=All and strict field validation; fails the test naming the
    object and the API server's message."""
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    meta = doc["metadata"]
    path = resource.path(
        name=meta["name"], namespace=meta.get("namespace") if resource.namespaced else None
    )
    what = f"{doc['kind']} {meta.get('namespace', '')}/{meta['name']}"
    assert not resource.namespaced or meta.get("namespace"), f"{what}: no namespace"
    try:
        server_side_apply(cluster.api, path, doc, dry_run=True)
    except ApplyError as e:
        pytest.fail(f"the API server rejected {what}: {e}", pytrace=False)


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- examples ------------------------------------------------------------------------------------

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
#: the kind path (hack/kind-up.sh)
KIND_FILES = sorted((REPO / "deploy" / "kind").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES + KIND_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_manifest_is_accepted_by_the_api_server(
    path: Path, cluster: Cluster, dynamic: DynamicClient, namespaces: dict[str, str]
) -> None:
    """Every example and every kind-path manifest, server-side dry-run applied."""
    for doc in documents(path):
        dry_run_apply(cluster, dynamic, remap(doc, namespaces))


def test_dry_run_rejects_what_the_crd_forbids(
    cluster: Cluster, dynamic: DynamicClient, namespaces: dict[str, str]
) -> None:
    # The guard of the guard: a broken example must fail this test, not pass silently.
    (doc,) = [
        d
        for d in documents(REPO / "examples" / "owned-route.yaml")
        if d["kind"] == "InferenceRollout"
    ]
    bad = remap(doc, namespaces)
    bad["spec"]["strategy"]["steps"] = [{"weight": 50}, {"weight": 20}]  # must rise to 100
    with pytest.raises(pytest.fail.Exception, match="rejected InferenceRollout"):
        dry_run_apply(cluster, dynamic, bad)
    typo = remap(doc, namespaces)
    typo["spec"]["replica"] = 2  # unknown field: strict validation
    with pytest.raises(pytest.fail.Exception, match="rejected InferenceRollout"):
        dry_run_apply(cluster, dynamic, typo)


# --- the kind path -------------------------------------------------------------------------------


def test_kind_loadgen_target_configmap(
    cluster: Cluster, dynamic: DynamicClient, namespaces: dict[str, str]
) -> None:
    # hack/kind-up.sh creates it imperatively (kubectl create configmap ... | kubectl apply).
    dry_run_apply(
        cluster,
        dynamic,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "loadgen-target", "namespace": namespaces["serving"]},
            "data": {
                "url": "http://envoy-serving-inference-gateway-0123abcd.envoy-gateway-system.svc:80"
            },
        },
    )


def test_gateway_api_standard_crds(cluster: Cluster, dynamic: DynamicClient) -> None:
    # kind-up.sh applies the release's standard-install.yaml; the sandbox holds the same
    # version's standard-channel CRDs from the sigs.k8s.io/gateway-api module (sandbox/build.sh).
    version = versions()["GATEWAY_API_VERSION"]
    cache = cache_dir()
    crd_dir = cache / "crds" / f"gateway-api-{version}"
    files = sorted(crd_dir.glob("*.yaml"))
    if not files:
        pytest.fail(
            f"no Gateway API CRDs in {crd_dir}: run `bash sandbox/build.sh crds`", pytrace=False
        )
    kinds = set()
    for path in files:
        for doc in documents(path):
            if doc["kind"] == "CustomResourceDefinition":
                kinds.add(doc["spec"]["names"]["kind"])
            dry_run_apply(cluster, dynamic, doc)
    assert {"GatewayClass", "Gateway", "HTTPRoute"} <= kinds


def test_kind_up_passes_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed: apt-get install -y shellcheck", pytrace=False)
    proc = subprocess.run(
        [shellcheck, "-x", "-o", "all", "hack/kind-up.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the chart -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["cluster", "namespaces", "kind-up", "secret"])
def test_rendered_chart_is_accepted_by_the_api_server(
    mode: str, cluster: Cluster, dynamic: DynamicClient, namespaces: dict[str, str]
) -> None:
    release_ns, watched = namespaces["inference-rollout-system"], namespaces["serving"]
    sets = {
        "cluster": [],
        "namespaces": ["watch.mode=namespaces", f"watch.namespaces={{{watched}}}"],
        # the values hack/kind-up.sh passes (annotations with --set-string)
        "kind-up": ["image.repository=inference-rollout", "image.tag=0.1.0",
                    "image.pullPolicy=Never",
                    "tenancy.prometheusAllow={http://prometheus.monitoring:9090}"],
        "secret": ["watch.mode=namespaces", f"watch.namespaces={{{watched}}}",
                   "prometheus.bearerTokenSecret=prometheus-token"],
    }[mode]
    strings = (("podAnnotations.prometheus\\.io/scrape=true",
                "podAnnotations.prometheus\\.io/port=8081") if mode == "kind-up" else ())
    docs = render(*sets, namespace=release_ns, release=f"dlv-{uuid.uuid4().hex[:5]}",
                  include_crds=True, strings=strings)
    assert {d["kind"] for d in docs} >= {
        "CustomResourceDefinition",
        "ServiceAccount",
        "Deployment",
        "Service",
    }
    for doc in docs:
        dry_run_apply(cluster, dynamic, doc)


# --- Argo CD -------------------------------------------------------------------------------------


def test_argocd_cm_patch_is_a_valid_configmap(
    cluster: Cluster, dynamic: DynamicClient, namespaces: dict[str, str]
) -> None:
    (doc,) = documents(REPO / "deploy" / "argocd" / "argocd-cm.yaml")
    doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespaces["argocd"]}}
    dry_run_apply(cluster, dynamic, doc)
