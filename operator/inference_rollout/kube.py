"""The operator's Kubernetes client: a thin adapter over ``kubernetes.aio``.

Why thin: how a client finds its cluster and proves who it is (kubeconfig merging, contexts,
tokens and token files, exec credential plugins, client certificates, CAs, in-cluster service
accounts) is where a hand-written client goes wrong, and the ``kubernetes`` package's asyncio
client (``kubernetes.aio``, on aiohttp) does it as kubectl does.  So every request is serialised
and authenticated by ``ApiClient.param_serialize(..., auth_settings=["BearerToken"])`` and sent
by ``ApiClient.call_api``, whose aiohttp session holds the TLS context built from the
configuration (CA, client certificate with or without a CA, insecure-skip-verify).  What stays
here is what the callers rely on: paths only as :class:`~inference_rollout.paths.ApiPath`
(already checked and encoded there, passed on as they are), answers as plain dicts, every refusal
a :class:`KubeError` with the API server's message and an unreachable server or a timeout a
``KubeError`` with status 0 (callers retry those), one pool of 32 connections per client (many
rollouts queue for a connection rather than fail) and a per-request timeout.

:func:`load_configuration` chooses the credentials as kubectl does: ``--kubeconfig`` alone when
given; else ``$KUBECONFIG`` (a list, merged) or ``~/.kube/config``; and the pod's ServiceAccount
only when none of those exists, never mixed into a kubeconfig's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import time
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes.aio.client import ApiClient, Configuration
from kubernetes.aio.config import ConfigException
from kubernetes.aio.config.incluster_config import InClusterConfigLoader
from kubernetes.aio.config.kube_config import KubeConfigLoader, KubeConfigMerger

from . import __version__
from .paths import ApiPath

__all__ = ["FIELD_MANAGER", "METADATA_LIST", "ConfigException", "Kube", "KubeError",
           "load_configuration"]

FIELD_MANAGER = "inference-rollout"
#: Accept header for a LIST answered with metadata only (server-side; JSON as the fallback).
METADATA_LIST = ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, "
                 "application/json")
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
#: The pod's ServiceAccount, read only for the in-cluster configuration.
SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
SA_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
#: Connections per client: one operator drives hundreds of rollouts through one client.
CONNECTIONS = 32
#: How long a request may wait for one of those connections before it fails.
POOL_WAIT_SECONDS = 120.0
#: client-go re-reads a kubeconfig's ``tokenFile`` once a minute (a rotated token is picked up).
TOKEN_FILE_PERIOD_SECONDS = 60.0


class KubeError(Exception):
    """A request the API server refused; ``status`` is the HTTP code (0: no answer at all)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status, self.method, self.path = status, method, path
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        self.message = str(message)
        super().__init__(f"{method} {path}: {status} {self.message}")


class _UserCredential:
    """Keeps a kubeconfig user's bearer token current, as client-go does, through the
    configuration's ``refresh_api_key_hook`` (which ``kubernetes.aio`` calls before every
    request's authentication).

    * ``exec`` plugin: the plugin runs again once its credential's ``expirationTimestamp`` has
      passed, or after the API server answered 401 (a credential without an expiry is kept until
      then, as client-go keeps it); concurrent requests wait for one run.
    * ``tokenFile``: read again once a minute.

    The loader (``kubernetes.aio``'s own) does the reading and the running."""

    def __init__(self, loader: KubeConfigLoader, user: Any) -> None:
        self.loader = loader
        self.exec = "exec" in user
        self.token_file = not self.exec and "tokenFile" in user and not user.safe_get("token")
        self.expiry: datetime | None = loader.__dict__.get("exec_plugin_expiry")
        self.stale = False
        self._read_at = time.monotonic()
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = \
            weakref.WeakKeyDictionary()  # a client per event loop (the Lease's thread has one)

    def invalidate(self) -> None:
        """The API server refused the credential (401): the next request gets a new one."""
        self.stale = True

    def _due(self) -> bool:
        return self.stale or (self.expiry is not None and datetime.now(UTC) >= self.expiry)

    async def __call__(self, cfg: Configuration) -> None:
        if self.exec and self._due():
            lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
            async with lock:
                if self._due():  # not renewed by a request that was waiting before this one
                    # the loader skips its plugin while it holds an expiry it thinks is good
                    self.loader.__dict__.pop("exec_plugin_expiry", None)
                    if await self.loader.load_from_exec_plugin():  # type: ignore[no-untyped-call]
                        _set_token(cfg, self.loader)
                    self.expiry = self.loader.__dict__.get("exec_plugin_expiry")
                    self.stale = False
        elif self.token_file and (
                self.stale or time.monotonic() - self._read_at >= TOKEN_FILE_PERIOD_SECONDS):
            self.stale, self._read_at = False, time.monotonic()
            if self.loader._load_user_token():  # type: ignore[no-untyped-call]
                _set_token(cfg, self.loader)


def _set_token(cfg: Configuration, loader: KubeConfigLoader) -> None:
    token = str(loader.__dict__.get("token") or "").strip()  # a token file's newline, too
    if token:
        cfg.api_key["BearerToken"] = token


async def _from_kubeconfig(paths: list[str]) -> Configuration:
    named = os.pathsep.join(paths)
    try:
        merged = KubeConfigMerger(named)  # type: ignore[no-untyped-call]
    except (yaml.YAMLError, TypeError, AttributeError) as e:  # empty, or not a mapping
        raise ConfigException(f"kubeconfig {named}: not a kubeconfig ({e})") from e
    if merged.config is None:
        raise ConfigException(f"kubeconfig {named}: no such file")
    # No persister: this process never rewrites a user's kubeconfig.
    loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
        config_dict=merged.config, config_base_path=None)
    cfg = Configuration()
    await loader.load_and_set(cfg)  # type: ignore[no-untyped-call]
    user = loader._user
    if user is not None and "exec" in user and not loader.__dict__.get("token") \
            and not loader.__dict__.get("cert_file"):
        raise ConfigException(f"kubeconfig {named}: the exec credential plugin "
                              f"{user['exec'].safe_get('command')!r} gave no credential "
                              "(its error is logged above)")
    _set_token(cfg, loader)
    if user is not None and ("exec" in user or "tokenFile" in user):
        cfg.refresh_api_key_hook = _UserCredential(  # type: ignore[assignment]
            loader, user)
    return cfg


def _empty(path: str) -> bool:
    """A kubeconfig with no cluster, context or user (an empty file): kubectl goes on to the
    in-cluster configuration then, as if there were no file."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False  # not empty: its error is reported when it is loaded
    if doc is None:
        return True
    return isinstance(doc, dict) and not any(doc.get(k) for k in ("clusters", "contexts", "users"))


async def load_configuration(kubeconfig: str | None = None) -> Configuration:
    """The API server's address and credentials, read now (not at import: ``--kubeconfig`` and
    ``$KUBECONFIG`` may be set after the ``kubernetes`` package was imported), chosen as kubectl
    chooses them.

    With ``kubeconfig`` (``--kubeconfig``): that file and nothing else, so a wrong path is an
    error naming it rather than a silent switch to another cluster.  Without it: the files in
    ``$KUBECONFIG`` that exist (merged) or ``~/.kube/config``; only when none exists, the pod's
    ServiceAccount (in-cluster; its token is read again each minute, as a projected token
    rotates).  Files with no cluster, context or user count as none (kubectl's rule too); one
    that has them but cannot be used is an error, not a fall back."""
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise ConfigException(f"kubeconfig {kubeconfig}: no such file")
        return await _from_kubeconfig([str(path)])
    listed = [p for p in (os.environ.get("KUBECONFIG") or "").split(os.pathsep) if p] or [
        "~/.kube/config"]
    existing = [str(Path(p).expanduser()) for p in listed if Path(p).expanduser().is_file()]
    if existing and not all(_empty(p) for p in existing):
        return await _from_kubeconfig(existing)
    cfg = Configuration()
    try:
        InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(SA_TOKEN), cert_filename=str(SA_CA),
            try_refresh_token=True).load_and_set(cfg)
    except ConfigException as e:
        raise ConfigException(f"no kubeconfig ({os.pathsep.join(listed)}) and not in a "
                              f"cluster: {e}") from e
    return cfg


class Kube:
    """GET/LIST/CREATE/PATCH/DELETE on any resource path, plus status patches and Events."""

    def __init__(self, cfg: Configuration, timeout: float = 10.0) -> None:
        cfg = copy.copy(cfg)  # the caller's stays as it is; the credentials' state is shared
        cfg.connection_pool_maxsize = CONNECTIONS
        self.cfg = cfg
        self.api = ApiClient(cfg)
        self.api.user_agent = f"inference-rollout/{__version__}"
        # The pool wait is long (requests queue for a connection under many rollouts); the
        # connection itself and each read are bounded by ``timeout``.
        self.timeout = aiohttp.ClientTimeout(total=None, connect=POOL_WAIT_SECONDS + timeout,
                                             sock_connect=timeout, sock_read=timeout)

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        # The aio REST client sends every body as JSON text (apply-patch+yaml included, which
        # the API server reads as YAML's JSON subset), and turns a JSON patch that is not a
        # list into a strategic merge patch: refused here instead.
        if content_type == JSON_PATCH and not isinstance(body, list):
            raise TypeError(f"{method} {path}: a JSON patch is a list of operations")
        headers = {"Accept": accept or "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            _, url, headers, data, _ = await self.api.param_serialize(
                method=method, resource_path=str(path),
                query_params=list(params.items()) if params else None,
                header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = await self.api.call_api(method, url, header_params=headers, body=data,
                                           _request_timeout=self.timeout)
            raw = await resp.read()  # type: ignore[no-untyped-call]
        except (aiohttp.ClientError, TimeoutError, OSError, ConfigException) as e:
            # Unreachable, timed out, or no credential to be had (a plugin or token file that
            # failed): a KubeError like any refusal, retried by the caller.
            raise KubeError(0, method, path, f"{type(e).__name__}: {e}") from e
        if resp.status >= 400:
            if resp.status == 401 and isinstance(self.cfg.refresh_api_key_hook, _UserCredential):
                self.cfg.refresh_api_key_hook.invalidate()
            raise KubeError(resp.status, method, path, raw.decode(errors="replace"))
        out: dict[str, Any] = json.loads(raw) if raw else {}
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
        return await self.request("PATCH", path, body, MERGE_PATCH,
                                  params={"fieldManager": FIELD_MANAGER})

    async def apply(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply with the operator's field manager (force: it owns these fields)."""
        return await self.request("PATCH", path, body, APPLY_PATCH,
                                  params={"fieldManager": FIELD_MANAGER, "force": "true"})

    async def delete(self, path: ApiPath) -> None:
        try:
            await self.request("DELETE", path, {"propagationPolicy": "Background"})
        except KubeError as e:
            if e.status != 404:
                raise

    async def close(self) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            await self.api.close()  # type: ignore[no-untyped-call]
