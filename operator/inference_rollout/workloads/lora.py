"""vLLM's runtime LoRA endpoints, as one pod's server answers them (issue 31, item 1).

``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` exist when the server runs with
``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=true`` (the lints say so: budget/lora.py);
``GET /v1/models`` lists each loaded adapter with ``parent`` (its base model) and ``root`` (the
path it was loaded from).  That listing is what :mod:`..core.adapter_plan` starts every plan from:
the pod's own word on what it serves, not what the operator last asked of it.

Replacing an adapter keeps its name (clients ask for the name): vLLM takes ``load_inplace`` to
reload a loaded name; a server too old for it answers 400 "already been loaded", and the name is
unloaded and loaded again (safe: the planner moves adapters only on a pod out of the endpoints).

Every answer is read bounded (:mod:`..bounded_http`): the pod runs a tenant's image.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..bounded_http import AnswerTooLarge, MalformedJSON, loads, read_capped, sanitize

#: A ``/v1/models`` answer larger than this is refused (a few hundred adapters fit in 64 KiB).
MODELS_LIMIT = 1024 * 1024
#: vLLM's ``/metrics`` page (histograms per model and adapter: a few hundred KiB).
METRICS_LIMIT = 4 * 1024 * 1024
#: The gauges that count a pod's requests in flight, and the lines that can hold them.
IN_FLIGHT_GAUGES = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting"})
IN_FLIGHT_PREFIXES = tuple(IN_FLIGHT_GAUGES) + tuple(
    f"# {kind} {name}" for kind in ("TYPE", "HELP") for name in sorted(IN_FLIGHT_GAUGES))
#: The whole request, sending and reading: an adapter load copies its weights from the source.
LOAD_TIMEOUT = 120.0
READ_TIMEOUT = 10.0

AdapterErrorKind = Literal["unreachable", "refused", "malformed"]


class AdapterCallError(Exception):
    """A pod's adapter endpoint did not do what was asked.  ``kind``: ``unreachable`` (no
    answer in time, connection refused), ``refused`` (an HTTP error: runtime updating off, a
    source vLLM cannot load), ``malformed`` (an answer that is not what vLLM sends)."""

    def __init__(self, kind: AdapterErrorKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


@dataclass(frozen=True)
class PodServer:
    """One pod's serving address: ``http://<pod IP>:<port>``."""

    ip: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


class VLLMAdapters:
    """Load, unload and list LoRA adapters on one pod at a time, through one shared client."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def loaded(self, pod: PodServer) -> dict[str, str]:
        """Adapter name → the source it was loaded from, as the pod lists them."""
        doc = await self._call(pod, "GET", "/v1/models", None, READ_TIMEOUT)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise AdapterCallError("malformed", "/v1/models has no data list")
        out: dict[str, str] = {}
        for model in data:
            if not isinstance(model, dict) or not model.get("parent"):
                continue  # the base model (and its served names) have no parent
            name, root = model.get("id"), model.get("root")
            if isinstance(name, str) and isinstance(root, str):
                out[name] = root
        return out

    async def load(self, pod: PodServer, name: str, source: str) -> None:
        body = {"lora_name": name, "lora_path": source, "load_inplace": True}
        try:
            await self._call(pod, "POST", "/v1/load_lora_adapter", body, LOAD_TIMEOUT)
        except AdapterCallError as e:
            if e.kind != "refused" or "already" not in e.detail.lower():
                raise
            # A vLLM without load_inplace: the name is free once unloaded.
            await self.unload(pod, name)
            await self._call(pod, "POST", "/v1/load_lora_adapter", body, LOAD_TIMEOUT)

    async def unload(self, pod: PodServer, name: str) -> None:
        await self._call(pod, "POST", "/v1/unload_lora_adapter", {"lora_name": name},
                         READ_TIMEOUT)

    async def in_flight(self, pod: PodServer) -> int | None:
        """The requests the pod's vLLM has running or waiting, by its own ``/metrics``
        (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``, summed over the
        engines it lists); None when it cannot be read or lists neither: never a guess of 0."""
        try:
            raw = await self._fetch(pod, "GET", "/metrics", None, READ_TIMEOUT, METRICS_LIMIT)
        except AdapterCallError:
            return None
        lines = [line for line in raw.decode(errors="replace").splitlines()
                 if line.startswith(IN_FLIGHT_PREFIXES)]  # not the whole page: a few lines
        total, seen = 0.0, False
        try:
            for family in text_string_to_metric_families("\n".join(lines) + "\n"):
                for sample in family.samples:
                    if sample.name in IN_FLIGHT_GAUGES and math.isfinite(sample.value):
                        total, seen = total + max(0.0, sample.value), True
        except ValueError:
            return None
        return math.ceil(total) if seen else None

    async def _call(self, pod: PodServer, method: str, path: str, body: dict[str, Any] | None,
                    timeout: float) -> Any:
        raw = await self._fetch(pod, method, path, body, timeout, MODELS_LIMIT)
        if method != "GET":
            return None  # vLLM answers a load with plain text ("Success: …")
        try:
            return loads(raw, max_depth=8)
        except MalformedJSON as e:
            raise AdapterCallError("malformed", f"{path}: {e}") from None

    async def _fetch(self, pod: PodServer, method: str, path: str,
                     body: dict[str, Any] | None, timeout: float, limit: int) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                request = self.client.build_request(method, pod.url + path, json=body)
                resp = await self.client.send(request, stream=True)
                try:
                    raw = await read_capped(resp, limit)
                finally:
                    await resp.aclose()
        except (TimeoutError, httpx.HTTPError) as e:
            why = sanitize(e, 160) or type(e).__name__
            raise AdapterCallError("unreachable", f"{method} {path}: {why}") from None
        except AnswerTooLarge as e:
            raise AdapterCallError("malformed", f"{path}: {e}") from None
        if resp.status_code >= 400:
            raise AdapterCallError("refused", f"{method} {path}: HTTP {resp.status_code} "
                                              f"{sanitize(raw.decode(errors='replace'), 200)}")
        return raw
