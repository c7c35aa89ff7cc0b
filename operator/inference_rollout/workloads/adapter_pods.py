"""The pods of an adapter release, read and moved (issue 31, item 1; docs/adapters.md).

:mod:`..core.adapter_plan` decides; this module is its eyes and hands on one revision's pods:

* :meth:`AdapterPods.observe` lists the revision's pods and asks each serving pod's own
  ``/v1/models`` (at ``<pod IP>:<serving port>``, as the Services reach it) what it serves, all
  pods at once, and a draining pod's ``/metrics`` how many requests it still has in flight.
  A pod that cannot be read is observed as such (``loaded=None``), and the planner
  leaves it where it is: never a guess.
* :meth:`AdapterPods.apply` carries out the plan's moves in order: a label patch for ``Evict``
  (``moving``) and ``Admit`` (the set id, with the container start it was verified on), a vLLM
  call for ``LoadAdapter`` and ``UnloadAdapter``.  A move that fails stops that pod's later
  moves (the next plan starts again from what the pod says) and is returned, never raised: one
  pod's refusal does not stop the others.

``Admit`` is written with the pod's observed ``resourceVersion`` as a precondition: a pod that
changed since it was read (a restart the kubelet recorded, another writer) is not admitted on a
stale reading; the API server answers 409 and the next plan reads it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..api import (
    ADAPTER_SET_MOVING,
    ADAPTER_SET_PENDING,
    ANN_ADAPTER_SET_MOVED_AT,
    ANN_ADAPTER_SET_VERIFIED_START,
    LABEL_ADAPTER_SET,
)
from ..core.adapter_plan import Admit, Evict, LoadAdapter, PodAdapters, PodMove, UnloadAdapter
from ..core.timeutil import from_iso, to_iso
from ..kube import KubeError
from ..kube_protocol import KubeClient
from ..paths import ns_path
from .lora import AdapterCallError, PodServer, VLLMAdapters


@dataclass(frozen=True)
class ObservedPod:
    """What the planner sees of a pod, and what applying a move to it needs."""

    adapters: PodAdapters
    server: PodServer | None
    resource_version: str


@dataclass(frozen=True)
class MoveFailure:
    move: PodMove
    reason: str


def _moment(text: Any) -> datetime | None:
    """A timestamp from a pod's status or annotations; None for what does not parse (a pod's
    annotations are the tenant's to edit)."""
    if not isinstance(text, str):
        return None
    try:
        return from_iso(text)
    except ValueError:
        return None


def _condition(pod: dict[str, Any], kind: str) -> bool:
    for c in pod.get("status", {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c.get("status") == "True"
    return False


def _started(pod: dict[str, Any]) -> datetime | None:
    """The latest start of any of its containers: a restart of any of them counts (a sidecar's
    restart costs one reload; a missed vLLM restart would cost wrong answers)."""
    starts = [_moment(((s.get("state") or {}).get("running") or {}).get("startedAt"))
              for s in pod.get("status", {}).get("containerStatuses") or [] if isinstance(s, dict)]
    known = [s for s in starts if s is not None]
    return max(known) if known else None


def serving(pod: dict[str, Any]) -> bool:
    """Running, not being deleted, its containers ready, and an IP to reach it at."""
    status = pod.get("status", {})
    return (status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and bool(status.get("podIP")) and _condition(pod, "ContainersReady"))


def draining(pod: dict[str, Any]) -> bool:
    """Labelled ``moving``: out of the endpoints, its requests in flight finishing."""
    return (pod["metadata"].get("labels") or {}).get(LABEL_ADAPTER_SET) == ADAPTER_SET_MOVING


def pod_adapters(pod: dict[str, Any], loaded: Mapping[str, str] | None,
                 busy: int | None = None) -> PodAdapters:
    """One pod object (and its ``/v1/models`` and requests in flight, when read) as the
    planner sees it."""
    meta = pod["metadata"]
    label = (meta.get("labels") or {}).get(LABEL_ADAPTER_SET)
    annotations = meta.get("annotations") or {}
    set_label = None if label in (None, ADAPTER_SET_MOVING, ADAPTER_SET_PENDING) else label
    return PodAdapters(
        name=meta["name"], serving=serving(pod), loaded=loaded, label=set_label,
        admitted=set_label is not None,
        moved_at=_moment(annotations.get(ANN_ADAPTER_SET_MOVED_AT)),
        container_started_at=_started(pod),
        verified_start=_moment(annotations.get(ANN_ADAPTER_SET_VERIFIED_START)), busy=busy)


class AdapterPods:
    """One revision's pods in one namespace: observe them, apply a plan's moves to them."""

    def __init__(self, kube: KubeClient, lora: VLLMAdapters, namespace: str) -> None:
        self.kube, self.lora, self.namespace = kube, lora, namespace

    async def observe(self, selector: Mapping[str, str], port: int) -> dict[str, ObservedPod]:
        """The pods ``selector`` matches (the revision's labels), each with what its own
        ``/v1/models`` lists (None when it is not serving or did not answer), and, for a pod
        that drains, the requests its vLLM still has in flight."""
        query = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        listing = await self.kube.get(ns_path("", "v1", self.namespace, "pods"),
                                      {"labelSelector": query})
        pods = [p for p in listing.get("items") or [] if isinstance(p, dict)]
        servers = [PodServer(p["status"]["podIP"], port) if serving(p) else None for p in pods]
        loaded, busy = await asyncio.gather(
            asyncio.gather(*(self._loaded(s) for s in servers)),
            asyncio.gather(*(self._in_flight(s if draining(p) else None)
                             for p, s in zip(pods, servers, strict=True))))
        return {p["metadata"]["name"]: ObservedPod(pod_adapters(p, got, n), server,
                                                   p["metadata"].get("resourceVersion", ""))
                for p, server, got, n in zip(pods, servers, loaded, busy, strict=True)}

    async def _in_flight(self, server: PodServer | None) -> int | None:
        return None if server is None else await self.lora.in_flight(server)

    async def _loaded(self, server: PodServer | None) -> dict[str, str] | None:
        if server is None:
            return None
        try:
            return await self.lora.loaded(server)
        except AdapterCallError:
            return None  # unread: the planner leaves the pod alone until it answers

    async def apply(self, moves: Sequence[PodMove], pods: Mapping[str, ObservedPod],
                    now: datetime) -> list[MoveFailure]:
        """Each move in order; a pod whose move failed gets no later move in this plan."""
        failures: list[MoveFailure] = []
        failed: set[str] = set()
        for move in moves:
            if move.pod in failed:
                continue
            try:
                await self._apply(move, pods[move.pod], now)
            except (AdapterCallError, KubeError) as e:
                failed.add(move.pod)
                failures.append(MoveFailure(move, str(e)))
        return failures

    async def _apply(self, move: PodMove, pod: ObservedPod, now: datetime) -> None:
        if isinstance(move, Evict):
            await self._label(move.pod, ADAPTER_SET_MOVING, {ANN_ADAPTER_SET_MOVED_AT: to_iso(now)})
        elif isinstance(move, Admit):
            verified = to_iso(move.verified_start) if move.verified_start else None
            await self._label(move.pod, move.set_id, {ANN_ADAPTER_SET_MOVED_AT: to_iso(now),
                                                      ANN_ADAPTER_SET_VERIFIED_START: verified},
                              resource_version=pod.resource_version)
        elif pod.server is None:
            raise AdapterCallError("unreachable", f"pod {move.pod} has no serving address")
        elif isinstance(move, LoadAdapter):
            await self.lora.load(pod.server, move.adapter, move.source)
        elif isinstance(move, UnloadAdapter):
            await self.lora.unload(pod.server, move.adapter)

    async def _label(self, pod: str, value: str, annotations: dict[str, str | None],
                     resource_version: str | None = None) -> None:
        meta: dict[str, Any] = {"labels": {LABEL_ADAPTER_SET: value}, "annotations": annotations}
        if resource_version:
            meta["resourceVersion"] = resource_version  # a precondition: 409 if it changed
        await self.kube.merge_patch(ns_path("", "v1", self.namespace, "pods", pod),
                                    {"metadata": meta})
