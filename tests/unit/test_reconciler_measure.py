"""The reconciler hands measure() when the step's weight was reached, under the Sequential rule
only, so every query spans the step's evidence period."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.unit.coresim import T0, manifest_spec
from tests.unit.fakes import UnexpectedKube, no_events

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.timeutil import to_iso
from inference_rollout.reconciler import Deps, _measure


class Recording:
    timeout_s = 5.0

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def aclose(self) -> None:
        pass

    async def query(self, promql: str, at: float | None = None) -> float:
        self.queries.append(promql)
        return 0.0

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        self.queries.append(promql)
        return {"engine_requests": 10.0}


def windows(verdicts: str, started: str | None) -> set[str]:
    spec = InferenceRolloutSpec.parse(manifest_spec(analysis={
        "interval": "60s", "verdicts": verdicts,
        "prometheus": {"address": "http://prom:9090", "scrapeInterval": "5s"},
        "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]}))
    status = InferenceRolloutStatus(stable_revision="5151515151", canary_revision="c1c1c1c1c1",
                                    canary_weight=5, current_step=0, step_started_at=started)
    source = Recording()
    deps = Deps(kube=UnexpectedKube(), post_event=no_events, now=lambda: T0,
                prometheus_allow=("http://prom:9090",))
    deps.sources[("http://prom:9090", 5.0, None)] = source
    got: Any = asyncio.run(_measure(deps, spec, status, "ns", "chat"))
    assert "errors" in got
    return {w for q in source.queries for w in re.findall(r"\[(\d+s)\]", q)}


def test_sequential_queries_span_the_step_and_window_the_interval() -> None:
    # measure() evaluates at the wall clock's now: the weight was reached 5 minutes before it
    started = to_iso(datetime.now(UTC) - timedelta(minutes=5))
    (span,) = windows("Sequential", started)
    assert 300 <= int(span[:-1]) <= 330
    assert windows("Window", started) == {"60s"}
    assert windows("Sequential", None) == {"60s"}  # the weight is not reached yet
