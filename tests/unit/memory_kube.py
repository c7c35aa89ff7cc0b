"""An in-memory Kubernetes API for unit tests of the reconciler, the handlers and the CLI.

It is the real :class:`inference_rollout.kube.Kube` with only ``request`` (the one method that
talks HTTP) answered from a dict of objects by path: GET of an object or of a collection (with
``labelSelector`` / ``fieldSelector`` of the ``k=v,...`` kind), POST, DELETE, merge patches
(RFC 7386, with the ``resourceVersion`` precondition the operator relies on), server-side
apply (the applied object replaces the stored one) and JSON patches (RFC 6902: test, add,
replace, remove).  Every request is recorded, and a test can make one method fail by path.
It fakes the API server, never the code under test.
"""

from __future__ import annotations

import copy
from typing import Any

from inference_rollout.kube import Kube, KubeError
from inference_rollout.paths import ApiPath, ns_path, rollout_path

JSON_PATCH = "application/json-patch+json"
COLLECTIONS = frozenset({"deployments", "pods", "services", "events", "httproutes",
                         "inferencerollouts", "inferencepools", "configmaps", "secrets"})


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386: a null deletes, an object merges, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(obj: dict[str, Any], ops: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """RFC 6902 on a copy; a failed ``test`` is a 422, as the API server answers."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = out
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.get(key)
            if node is None:
                raise KubeError(422, "PATCH", path, f"{op['path']}: no such parent")
        if op["op"] == "test":
            if node.get(last) != op["value"]:
                raise KubeError(422, "PATCH", path, f"test of {op['path']} failed")
        elif op["op"] in ("add", "replace"):
            node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if last not in node:
                raise KubeError(422, "PATCH", path, f"{op['path']}: nothing to remove")
            del node[last]
        else:
            raise AssertionError(f"unsupported JSON patch op {op['op']}")
    return out


def _matches(obj: dict[str, Any], params: dict[str, str] | None) -> bool:
    params = params or {}
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, params.get("labelSelector", "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, params.get("fieldSelector", "").split(",")):
        key, _, value = term.partition("=")
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and str(node) != value:
            return False
    return True


class MemoryKube(Kube):
    """Objects by path; ``fail[(METHOD, path)]`` raises that error instead of answering."""

    def __init__(self, objects: dict[str, dict[str, Any]] | None = None) -> None:
        # No super().__init__: nothing here opens a connection.
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: dict[tuple[str, str], Exception] = {}
        self.closed = False
        self._version = 0
        for path, obj in (objects or {}).items():
            self.put(path, obj)

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` at ``path`` (a new resourceVersion), as a controller's write would."""
        self._version += 1
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self.objects[str(path)] = stored
        return copy.deepcopy(stored)

    def writes(self, method: str | None = None) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] != "GET" and (method is None or c[0] == method)]

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        key = str(path)
        self.calls.append((method, key, copy.deepcopy(body)))
        if (method, key) in self.fail:
            raise self.fail[(method, key)]
        status = key.endswith("/status")
        target = key[:-len("/status")] if status else key
        if method == "GET":
            if target in self.objects:
                return copy.deepcopy(self.objects[target])
            if key.rsplit("/", 1)[-1] in COLLECTIONS:
                items = [copy.deepcopy(o) for p, o in sorted(self.objects.items())
                         if p.rsplit("/", 1)[0] == key and _matches(o, params)]
                return {"items": items}
            raise KubeError(404, method, key, '{"message": "not found"}')
        if method == "POST":
            name = body["metadata"]["name"]
            if f"{key}/{name}" in self.objects:
                raise KubeError(409, method, key, '{"message": "already exists"}')
            return self.put(f"{key}/{name}", body)
        if method == "DELETE":
            if self.objects.pop(target, None) is None:
                raise KubeError(404, method, key, '{"message": "not found"}')
            return {}
        assert method == "PATCH", method
        if content_type == "application/apply-patch+yaml":
            return self.put(target, merge(self.objects.get(target), body))
        if target not in self.objects:
            raise KubeError(404, method, key, '{"message": "not found"}')
        stored = self.objects[target]
        if content_type == JSON_PATCH:
            return self.put(target, json_patch(stored, body, key))
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != stored["metadata"]["resourceVersion"]:
            raise KubeError(409, method, key, '{"message": "the object has been modified"}')
        if status:
            new = {**stored, "status": merge(stored.get("status") or {}, body.get("status"))}
        else:
            new = merge(stored, {k: v for k, v in body.items() if k != "status"})
        return self.put(target, new)

    async def close(self) -> None:
        self.closed = True


def rollout_on_route(ns: str, name: str, spec: dict[str, Any],
                     status: dict[str, Any] | None = None) -> MemoryKube:
    """An API server holding one InferenceRollout ``ns/name`` and the user-owned HTTPRoute of
    the same name it is released through, with one rule and no backends yet."""
    body: dict[str, Any] = {
        "apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
        "metadata": {"namespace": ns, "name": name, "uid": "u1", "generation": 1},
        "spec": spec}
    if status is not None:
        body["status"] = status
    return MemoryKube({
        rollout_path(ns, name): body,
        ns_path("gateway.networking.k8s.io", "v1", ns, "httproutes", name): {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"rules": [{"matches": [{"path": {"value": "/"}}], "backendRefs": []}]}}})
