"""The CRD on a real kube-apiserver: valid manifests are stored, invalid ones are rejected at
apply time with a message that names the field (schema and CEL rules), and nothing is stored."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from irsandbox.cluster import GROUP, PLURAL, VERSION, Cluster
from irsandbox.manifests import inference_rollout

pytestmark = pytest.mark.sandbox

VALID = inference_rollout(
    "chat", analysis={"interval": "1m", "prometheus": {"address": "http://prom:9090"},
                      "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]})


def _with(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    node = doc
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return doc


METRIC = {"name": "errors", "template": "error-rate", "max": 0.01}
ADAPTER = {"name": "support", "source": "/adapters/support/v7"}


def _adapters_on(replicas: int) -> dict[str, Any]:
    doc = _with("spec.adapters", [ADAPTER])
    doc["spec"]["replicas"] = replicas
    return doc


INVALID = [
    ("steps not rising", _with("spec.strategy.steps", [{"weight": 20}, {"weight": 5},
                                                       {"weight": 100}]), "rise strictly"),
    ("last step not 100", _with("spec.strategy.steps", [{"weight": 5}, {"weight": 50}]),
     "last step's weight must be 100"),
    ("weight above 100", _with("spec.strategy.steps", [{"weight": 101}]), "weight"),
    ("weight 0", _with("spec.strategy.steps", [{"weight": 0}, {"weight": 100}]), "weight"),
    ("template and query", _with("spec.analysis.metrics", [{**METRIC, "query": "up"}]),
     "exactly one of template or query"),
    ("neither template nor query", _with("spec.analysis.metrics", [{"name": "x", "max": 1}]),
     "exactly one of template or query"),
    ("no threshold", _with("spec.analysis.metrics", [{"name": "x", "template": "error-rate"}]),
     "set a threshold"),
    ("duplicate names", _with("spec.analysis.metrics", [METRIC, METRIC]), "unique"),
    ("interval 3s", _with("spec.analysis.interval", "3s"), "at least 5s"),
    ("duration without unit", _with("spec.strategy.progressDeadline", "5"),
     "spec.strategy.progressDeadline"),
    ("two route modes", _with("spec.traffic.gatewayAPI",
                              {"httpRouteRef": {"name": "a"}, "parentRefs": [{"name": "gw"}]}),
     "exactly one of httpRouteRef"),
    ("swap without surge", _with("spec.capacity", {"mode": "swap", "maxSurge": 0}),
     "spec.capacity.maxSurge"),
    ("duplicate adapter names", _with("spec.adapters", [ADAPTER, ADAPTER]),
     "spec.adapters: adapter names must be unique"),
    ("adapters on one replica", _adapters_on(replicas=1),
     "spec.replicas: an adapter release splits the running pods"),
]


@pytest.fixture(scope="module")
def crd_cluster(sandbox: Cluster) -> Cluster:
    sandbox.install_crd()
    return sandbox


def test_a_valid_manifest_is_stored(crd_cluster: Cluster, namespace: str) -> None:
    out = crd_cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                             copy.deepcopy(VALID))
    assert out["metadata"]["name"] == "chat"
    assert out["spec"]["template"]["spec"]["containers"][0]["name"] == "vllm"


@pytest.mark.parametrize(("case", "doc", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_an_invalid_manifest_is_rejected_naming_the_field(
        crd_cluster: Cluster, namespace: str, case: str, doc: dict[str, Any],
        message: str) -> None:
    with pytest.raises(ApiException) as err:
        crd_cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                           copy.deepcopy(doc))
    assert err.value.status == 422, err.value.body
    assert message in err.value.body, f"{case}: {err.value.body}"
    stored = crd_cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    assert stored["items"] == []  # nothing half-applied


def test_the_scale_subresource_cannot_take_a_rollout_with_adapters_below_two(
        crd_cluster: Cluster, namespace: str) -> None:
    """An autoscaler writes spec.replicas through /scale: the CEL rule holds there too, so an
    adapter release always has two pods to split (docs/api.md)."""
    crd_cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                       _adapters_on(replicas=2))
    name = VALID["metadata"]["name"]
    with pytest.raises(ApiException) as err:
        crd_cluster.custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": {"replicas": 1}})
    assert err.value.status == 422 and "needs at least 2" in err.value.body, err.value.body
    stored = crd_cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                             name)
    assert stored["spec"]["replicas"] == 2
