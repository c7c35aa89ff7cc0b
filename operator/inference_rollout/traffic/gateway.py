"""Gateway API HTTPRoute router.

Two modes (DESIGN §3):

* ``httpRouteRef``: the route belongs to the user (and maybe to git).  The operator rewrites only
  the ``backendRefs`` of each rule, keeping matches and filters as they are, with a fixed field
  manager so ``managedFields`` shows who moved the weights.
* ``parentRefs``: the operator creates the route ``<rollout>`` with an owner reference and owns it
  whole; nothing in git describes it, so nothing drifts.

Backends are the revisions' Services (``<rollout>-<revision>``) or, with ``backendKind:
InferencePool``, one InferencePool per revision of the same name.  The revision of a backendRef is
read back from its name, so weights are reported per revision.

The route's ``status.parents`` (what the gateway made of it) is read with the weights and handed
to the core as a typed observation (:mod:`.route_status`); writing a weight never waits for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..api import API_VERSION, KIND, LABEL_MANAGED_BY, LABEL_ROLLOUT, MANAGED_BY, POOL_GROUP
from ..api.spec import GatewayAPITraffic
from ..core.revision import revision_name
from ..core.types import NO_HEADER_ROUTES, HeaderRoute
from ..kube import KubeError
from ..kube_protocol import KubeClient
from ..paths import ns_path
from .header_routes import HeaderRouteError, HeaderRouting, base_rules, held, rules_for
from .route_status import route_acceptance
from .router import RouteDrift, RouteError, RouteMissing, RouteState

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"


class HTTPRouteRouter:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        rollout: str,
        rollout_uid: str,
        traffic: GatewayAPITraffic,
        port: int,
        ports: Mapping[str, int] | None = None,
        routing: HeaderRouting | None = None,
    ) -> None:
        """``ports``: each known revision's serving port (its Service's port); ``port`` for
        any other (the spec's template, i.e. a canary about to be created).  ``routing``: the
        spec's testers and session affinity (traffic/header_routes.py)."""
        self.kube, self.namespace, self.rollout = kube, namespace, rollout
        self.uid, self.traffic, self.port = rollout_uid, traffic, port
        self.ports = dict(ports or {})
        self.routing = routing or HeaderRouting()
        ref = traffic.http_route_ref
        self.owned = ref is None
        self.route_name = rollout if ref is None else ref.name
        self.path = ns_path(GROUP, VERSION, namespace, PLURAL, self.route_name)

    # --- reading ---------------------------------------------------------------------------

    async def _read(self) -> dict[str, Any] | None:
        try:
            route = await self.kube.get_or_none(self.path)
        except KubeError as e:
            raise RouteError(f"reading HTTPRoute {self.namespace}/{self.route_name}: {e}") from e
        if route is None and not self.owned:
            raise RouteMissing(
                f"HTTPRoute {self.namespace}/{self.route_name} named in "
                "spec.traffic.gatewayAPI.httpRouteRef does not exist: create it, or use "
                "parentRefs to let the operator own the route")
        return route

    def _revision_of(self, ref: dict[str, Any]) -> str | None:
        prefix = f"{self.rollout}-"
        name = str(ref.get("name", ""))
        return name[len(prefix):] if name.startswith(prefix) else None

    def weights_of(self, route: dict[str, Any]) -> dict[str, int]:
        """Weights by revision from the first rule (every rule is written the same)."""
        rules = route.get("spec", {}).get("rules") or []
        out: dict[str, int] = {}
        for ref in (rules[0].get("backendRefs") or []) if rules else []:
            rev = self._revision_of(ref)
            if rev is not None:
                out[rev] = int(ref.get("weight", 1))
        return out

    async def get_weights(self) -> dict[str, int] | None:
        route = await self._read()
        if route is None:
            return None
        self._remember_ports(route)
        return self.weights_of(route)

    def _remember_ports(self, route: dict[str, Any]) -> None:
        """Keep the port of each revision the route already sends to, for revisions whose
        Service is gone (a fail-safe return to a stable whose objects were deleted must keep
        the port the route had, not guess one)."""
        rules = route.get("spec", {}).get("rules") or []
        for ref in (rules[0].get("backendRefs") or []) if rules else []:
            rev = self._revision_of(ref)
            if rev is not None and isinstance(ref.get("port"), int):
                self.ports.setdefault(rev, ref["port"])

    async def observe(self) -> RouteState | None:
        route = await self._read()
        if route is None:
            return None
        self._remember_ports(route)
        rules = route.get("spec", {}).get("rules") or []
        return RouteState(self.weights_of(route), route_acceptance(route), held(rules))

    # --- writing -------------------------------------------------------------------------------

    def backend_refs(
        self, stable: str, canary: str | None, canary_weight: int
    ) -> list[dict[str, Any]]:
        refs = [self._ref(stable, 100 - canary_weight)]
        if canary:
            refs.append(self._ref(canary, canary_weight))
        return refs

    def _ref(self, revision: str, weight: int) -> dict[str, Any]:
        name = revision_name(self.rollout, revision)
        if self.traffic.backend_kind == "InferencePool":
            return {"group": POOL_GROUP, "kind": "InferencePool", "name": name, "weight": weight}
        port = self.ports.get(revision, self.port)
        return {"kind": "Service", "name": name, "port": port, "weight": weight}

    async def set_weights(self, stable: str, canary: str | None, canary_weight: int,
                          header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES) -> None:
        def rules(base: list[dict[str, Any]]) -> list[dict[str, Any]]:
            try:
                return rules_for(base, self.backend_refs(stable, canary, canary_weight),
                                 self.routing, header_routes, lambda rev: self._ref(rev, 1),
                                 (stable, canary), "spec.traffic")
            except HeaderRouteError as e:
                raise RouteError(f"HTTPRoute {self.namespace}/{self.route_name}: {e}") from e

        if self.owned:
            await self._apply_owned(rules([{}]))
        else:
            await self._patch_existing(rules)
        state = await self.observe()
        want = {stable: 100 - canary_weight, **({canary: canary_weight} if canary else {})}
        if state is None or state.weights != want or state.header_routes != header_routes:
            held_now = None if state is None else (state.weights, sorted(state.header_routes))
            raise RouteDrift(f"HTTPRoute {self.namespace}/{self.route_name} holds {held_now} "
                             f"after writing {want, sorted(header_routes)}")

    def owned_route(self, rules: list[dict[str, Any]]) -> dict[str, Any]:
        parents = [p.model_dump(by_alias=True, exclude_none=True)
                   for p in self.traffic.parent_refs or []]
        spec: dict[str, Any] = {"parentRefs": parents, "rules": rules}
        if self.traffic.hostnames:
            spec["hostnames"] = list(self.traffic.hostnames)
        return {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HTTPRoute",
            "metadata": {
                "name": self.route_name, "namespace": self.namespace,
                "labels": {LABEL_ROLLOUT: self.rollout, LABEL_MANAGED_BY: MANAGED_BY},
                "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND, "name": self.rollout,
                                     "uid": self.uid, "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": spec,
        }

    async def _apply_owned(self, rules: list[dict[str, Any]]) -> None:
        try:
            await self.kube.apply(self.path, self.owned_route(rules))
        except KubeError as e:
            raise RouteError(f"applying owned HTTPRoute {self.namespace}/{self.route_name}: "
                             f"{e}") from e

    async def _patch_existing(
        self, rules_of: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> None:
        """Rewrite backendRefs in every rule of the user's (and the header routes beside them),
        guarded by resourceVersion so a concurrent edit of the route by its owner is never
        overwritten (retried on conflict)."""
        for _attempt in range(5):
            route = await self._read()
            assert route is not None
            rules = rules_of(base_rules(route["spec"].get("rules") or []) or [{}])
            patch = {"metadata": {"resourceVersion": route["metadata"]["resourceVersion"]},
                     "spec": {"rules": rules}}
            try:
                await self.kube.merge_patch(self.path, patch)
                return
            except KubeError as e:
                if e.status == 409:
                    continue
                raise RouteError(f"patching HTTPRoute {self.namespace}/{self.route_name}: "
                                 f"{e}") from e
        raise RouteError(f"HTTPRoute {self.namespace}/{self.route_name}: too many write conflicts")
