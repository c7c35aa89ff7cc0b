"""Stand-ins shared by the unit tests: an API server whose every request fails the test, for a
test to extend with the requests it serves, an Event sink that must not be called, and kopf's
view of an object as kopf hands it to a handler.

They satisfy the protocols the operator is typed against (``inference_rollout.kube_protocol``,
``reconciler.EventSink``) structurally, so a stand-in is type-checked like the real client."""

from __future__ import annotations

from typing import Any, cast

import kopf

from inference_rollout.core.types import RecordEvent


class UnexpectedKube:
    """Every operation of the Kubernetes client, each failing the test: a stand-in overrides the
    ones its test expects, and any other request is an error, never a silent answer."""

    async def request(self, method: str, path: str, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        raise AssertionError(f"unexpected request {method} {path}")

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        raise AssertionError(f"unexpected GET {path}")

    async def list_metadata(self, path: str) -> dict[str, Any]:
        raise AssertionError(f"unexpected LIST {path}")

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        raise AssertionError(f"unexpected GET {path}")

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected POST {path}")

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected PATCH {path}")

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected apply {path}")

    async def delete(self, path: str) -> None:
        raise AssertionError(f"unexpected DELETE {path}")

    async def close(self) -> None:
        pass


async def no_events(body: dict[str, Any], event: RecordEvent) -> None:
    """An Event sink for a test that posts none."""
    raise AssertionError(f"unexpected Event {event}")


def kopf_body(raw: dict[str, Any]) -> kopf.Body:
    """``kopf.Body`` over an object, as kopf hands it to a handler.  kopf types the object as its
    ``RawBody`` TypedDict, which lacks fields the API server sends (``metadata.generation``)."""
    return kopf.Body(cast(kopf.RawBody, raw))


class PrometheusCounts:
    """Prometheus as the measurement sees it: 1,000 canary requests counted, ``errors`` of
    them failed (tests/unit/test_reconciler_*.py)."""

    def __init__(self, errors: float) -> None:
        self.errors = errors
        self.queries = 0

    async def query(self, promql: str, at: float | None = None) -> float:
        self.queries += 1
        return self.errors / 1000.0

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        self.queries += 1
        return {"engine_requests": 1000.0, "engine_errors": self.errors}
