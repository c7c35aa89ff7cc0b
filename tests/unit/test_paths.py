"""The one path builder (inference_rollout.paths): a name from a spec or a status can never
become a path into another namespace, whatever it holds."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_rollout.paths import (
    ApiPath,
    UnsafeName,
    cluster_path,
    ns_path,
    rollout_path,
)

HOSTILE = [
    "../../team-b/httproutes/bank", "..", ".", "../secrets/token", "a/b", "a%2fb", "%2e%2e",
    "A", "bank?watch=1", "bank#x", "bank ", " bank", "-bank", "bank-", "b\x00ank", "bänk",
    "a" * 254, "", "team-b\\..\\x", "bank/", "/bank", "bank.", ".bank", "a..b",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_never_become_paths(name):
    with pytest.raises(UnsafeName):
        ns_path("gateway.networking.k8s.io", "v1", "team-a", "httproutes", name)
    if name:
        with pytest.raises(UnsafeName):
            ns_path("", "v1", name, "secrets", "token")


def test_valid_names_build_the_paths_the_api_server_serves():
    assert ns_path("", "v1", "team-a", "secrets", "prom-token") == \
        "/api/v1/namespaces/team-a/secrets/prom-token"
    assert ns_path("apps", "v1", "team-a", "deployments", "chat-3ecc2ed752") == \
        "/apis/apps/v1/namespaces/team-a/deployments/chat-3ecc2ed752"
    assert rollout_path("team-a", "chat.v2").sub("status") == \
        "/apis/rollouts.inference.dev/v1alpha1/namespaces/team-a/inferencerollouts/chat.v2/status"
    assert rollout_path("team-a") == \
        "/apis/rollouts.inference.dev/v1alpha1/namespaces/team-a/inferencerollouts"
    assert cluster_path("", "v1", "namespaces") == "/api/v1/namespaces"
    assert isinstance(ns_path("", "v1", "a", "pods"), ApiPath)


def test_only_known_subresources_and_versions():
    with pytest.raises(UnsafeName):
        rollout_path("a", "b").sub("../../x")
    with pytest.raises(UnsafeName):
        ns_path("", "v1/../../x", "a", "pods")
    with pytest.raises(UnsafeName):
        ns_path("evil/..", "v1", "a", "pods")
    with pytest.raises(UnsafeName):
        ns_path("", "v1", "a", "pods/../secrets")


@given(namespace=st.text(max_size=70), name=st.text(max_size=260))
def test_any_text_is_refused_or_stays_one_segment_in_its_namespace(namespace, name):
    """Whatever a tenant writes: either refused, or exactly the path of that object in that
    namespace, with no segment an HTTP client would resolve or split (httpx normalises dot
    segments before sending: the request is checked as it would be sent)."""
    try:
        path = ns_path("gateway.networking.k8s.io", "v1", namespace, "httproutes", name or "x")
    except UnsafeName:
        return
    sent = httpx.URL("https://api.example" + path).path
    assert sent == path == posixpath.normpath(path)
    segments = sent.split("/")
    assert segments[:6] == ["", "apis", "gateway.networking.k8s.io", "v1", "namespaces",
                            namespace]
    assert len(segments) == 8 and unquote(segments[7]) == (name or "x")
