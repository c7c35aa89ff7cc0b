"""A small async Kubernetes REST client on httpx.

Why not the ``kubernetes`` package's client for the hot path: it is synchronous, so every call
would hold a thread, and one operator replica is meant to drive hundreds of rollouts.  The
``kubernetes`` package still does what it is good at here: reading kubeconfig or the in-cluster
service account into a ``Configuration``, which this client turns into one pooled
``httpx.AsyncClient``.
"""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from .paths import ApiPath

FIELD_MANAGER = "inference-rollout"
#: Accept header for a LIST answered with metadata only (server-side; JSON as the fallback).
METADATA_LIST = ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, "
                 "application/json")
SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeError(Exception):
    """A request the API server refused; ``status`` is the HTTP code."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status, self.method, self.path = status, method, path
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        self.message = str(message)
        super().__init__(f"{method} {path}: {status} {self.message}")


def load_configuration(kubeconfig: str | None = None) -> k8s_client.Configuration:
    """The API server's address and credentials, read now (not at import: ``--kubeconfig`` and
    ``$KUBECONFIG`` may be set after the ``kubernetes`` package was imported).

    With ``kubeconfig`` (``--kubeconfig``): that file, and no fallback, so a wrong path is an
    error rather than a silent switch to another cluster.  Without it: ``$KUBECONFIG`` or
    ``~/.kube/config``, else the pod's ServiceAccount (in-cluster).
    """
    cfg = k8s_client.Configuration()
    if kubeconfig:
        if not Path(kubeconfig).expanduser().is_file():
            raise k8s_config.ConfigException(f"kubeconfig {kubeconfig}: no such file")
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=cfg)
        return cfg
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG") or "~/.kube/config",
            client_configuration=cfg)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError):
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg)
    return cfg


class Kube:
    """GET/LIST/CREATE/PATCH/DELETE on any resource path, plus status patches and Events."""

    def __init__(self, cfg: k8s_client.Configuration, timeout: float = 10.0) -> None:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else None
        if ctx is None and not cfg.verify_ssl:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if ctx is not None and cfg.cert_file and cfg.key_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._static_token = (cfg.api_key or {}).get("authorization") or (
            cfg.api_key or {}).get("BearerToken")
        # A long pool wait: under many rollouts requests queue for a connection rather than fail.
        self.http = httpx.AsyncClient(
            base_url=cfg.host, verify=ctx if ctx is not None else True,
            timeout=httpx.Timeout(timeout, pool=120.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32))

    def _auth(self) -> dict[str, str]:
        token = self._static_token
        if SA_TOKEN.exists():  # projected tokens rotate: read the file each time
            token = "Bearer " + SA_TOKEN.read_text().strip()
        if token and not token.startswith("Bearer "):
            token = "Bearer " + token
        return {"Authorization": token} if token else {}

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        headers = self._auth()
        if accept:
            headers["Accept"] = accept
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body)
        try:
            resp = await self.http.request(method, path, content=content, headers=headers,
                                           params=params)
        except httpx.HTTPError as e:
            # Unreachable or timed out: a KubeError like any refusal, retried by the caller.
            raise KubeError(0, method, path, f"{type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            raise KubeError(resp.status_code, method, path, resp.text)
        out: dict[str, Any] = resp.json() if resp.content else {}
        return out

    async def get(self, path: ApiPath, params: dict[str, str] | None = None) -> dict[str, Any]:
        return await self.request("GET", path, params=params)

    async def list_metadata(self, path: ApiPath) -> dict[str, Any]:
        """A LIST of only the objects' metadata (PartialObjectMetadataList): a fraction of the
        bytes when only names, finalizers or deletion marks matter."""
        return await self.request("GET", path, accept=METADATA_LIST)

    async def get_or_none(self, path: ApiPath) -> dict[str, Any] | None:
        try:
            return await self.get(path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def create(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body, params={"fieldManager": FIELD_MANAGER})

    async def merge_patch(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body, "application/merge-patch+json",
                                  params={"fieldManager": FIELD_MANAGER})

    async def apply(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with the operator's field manager (force: it owns these fields)."""
        return await self.request("PATCH", path, body, "application/apply-patch+yaml",
                                  params={"fieldManager": FIELD_MANAGER, "force": "true"})

    async def delete(self, path: ApiPath) -> None:
        try:
            await self.request("DELETE", path, {"propagationPolicy": "Background"})
        except KubeError as e:
            if e.status != 404:
                raise

    async def close(self) -> None:
        await self.http.aclose()
