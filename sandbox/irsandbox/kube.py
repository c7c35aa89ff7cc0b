"""Kubernetes client setup and a small list+watch cache (an "informer") on raw JSON dicts."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from .common import sandbox_env, state_dir

log = logging.getLogger(__name__)


def load_kube_config(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient for ``--kubeconfig``, ``$KUBECONFIG``, ``.sandbox/env``'s KUBECONFIG or
    ``.sandbox/kubeconfig``, in that order."""
    path = (
        kubeconfig
        or os.environ.get("KUBECONFIG")
        or sandbox_env().get("KUBECONFIG")
        or str(state_dir() / "kubeconfig")
    )
    if not Path(path).exists():
        raise FileNotFoundError(f"kubeconfig {path} not found (is the sandbox up? make sandbox-up)")
    cfg = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=cfg)
    # many concurrent watches + writes from one process
    cfg.connection_pool_maxsize = 16
    return client.ApiClient(cfg)


def raw_call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a generated client method and return the JSON body as a dict (no model classes)."""
    resp = func(*args, _preload_content=False, **kwargs)
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


Handler = Callable[[str, dict[str, Any]], None]


class Informer:
    """Keeps ``cache`` (key ``namespace/name`` -> object dict) in sync with the API server through
    list + watch; calls ``handler(event_type, obj)`` for each change (``ADDED``, ``MODIFIED``,
    ``DELETED``, and ``SYNC`` once after each full list). Runs in a daemon thread.

    ``list_func`` is a generated client list method (``CoreV1Api.list_pod_for_all_namespaces``,
    ``CustomObjectsApi.list_cluster_custom_object`` with ``args``). A 404 (CRD not installed yet)
    is retried every ``missing_retry`` seconds.
    """

    def __init__(self, name: str, list_func: Callable[..., Any], *args: Any,
                 handler: Handler | None = None, missing_retry: float = 5.0,
                 **kwargs: Any) -> None:
        self.name = name
        self._list = list_func
        self._args = args
        self._kwargs = kwargs
        self._handler = handler
        self._missing_retry = missing_retry
        self.cache: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()
        self.synced = threading.Event()
        self.available = True
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    @staticmethod
    def key_of(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def items(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.cache.values())

    def get(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            return self.cache.get(key)

    def _emit(self, event: str, obj: dict[str, Any]) -> None:
        if self._handler is None:
            return
        try:
            self._handler(event, obj)
        except Exception:
            log.exception("%s: handler failed on %s", self.name, event)

    def _relist(self) -> str:
        body = raw_call(self._list, *self._args, **self._kwargs)
        fresh = {self.key_of(o): o for o in body.get("items") or []}
        kind = (body.get("kind") or "").removesuffix("List")
        api_version = body.get("apiVersion")
        with self.lock:
            old = self.cache
            self.cache = fresh
        for key, obj in fresh.items():
            obj.setdefault("kind", kind)
            obj.setdefault("apiVersion", api_version)
            prev = old.get(key)
            if prev is None:
                self._emit("ADDED", obj)
            elif prev.get("metadata", {}).get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._emit("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)
        self.available = True
        self.synced.set()
        self._emit("SYNC", {})
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                rv = self._relist()
                backoff = 0.5
                while not self._stop.is_set():
                    self._watch = watch.Watch()
                    for event in self._watch.stream(
                        self._list, *self._args, resource_version=rv, timeout_seconds=240,
                        allow_watch_bookmarks=True, deserialize=False, **self._kwargs,
                    ):
                        etype = event.get("type")
                        obj = event.get("object") or {}
                        new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if new_rv:
                            rv = new_rv
                        if etype == "BOOKMARK":
                            continue
                        key = self.key_of(obj)
                        with self.lock:
                            if etype == "DELETED":
                                self.cache.pop(key, None)
                            else:
                                self.cache[key] = obj
                        self._emit(etype, obj)
                        if self._stop.is_set():
                            break
            except ApiException as e:
                if e.status == 404:
                    if self.available:
                        log.info("%s: resource not served (yet); retrying every %.0fs",
                                 self.name, self._missing_retry)
                    self.available = False
                    self.synced.set()
                    self._stop.wait(self._missing_retry)
                    continue
                if e.status != 410:
                    log.warning("%s: watch failed (%s %s); relisting", self.name, e.status,
                                e.reason)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
            except KeyError:
                # kubernetes.watch with deserialize=False fails on an ERROR event (it looks for
                # "raw_object"): that is a 410 Gone for an expired resourceVersion. Relist.
                continue
            except Exception as e:  # connection refused while the API server restarts, etc.
                log.warning("%s: watch error %s: %s; relisting", self.name, type(e).__name__, e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)


def wait_synced(informers: list[Informer], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    return all(inf.synced.wait(max(0.0, deadline - time.monotonic())) for inf in informers)
