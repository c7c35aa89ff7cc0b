"""The operator's /metrics (``operator_metrics``, on ``prometheus_client``): values printed
exactly, the text format's escaping, and a deleted rollout's series gone from the page."""

from __future__ import annotations

import asyncio
from typing import Any

import prometheus_client
import pytest
from aiohttp.test_utils import make_mocked_request
from prometheus_client.parser import text_string_to_metric_families
from tests.unit.fakes import kopf_body

from inference_rollout import handlers, operator_metrics
from inference_rollout.operator_metrics import Registry


def samples(reg: Registry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on the page, parsed back by prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(reg.render())
            for s in family.samples}


def test_a_large_counter_is_printed_with_every_digit() -> None:
    # the hand-made format printed %g: 1234567 went out as 1.23457e+06 (1234570)
    reg = Registry()
    reg.inc("inference_rollout_reconcile_errors_total", 1234567, kind="KubeError")
    reg.inc("inference_rollout_status_conflicts_total", 123456789)
    reg.inc("inference_rollout_status_conflicts_total")
    page = reg.render()
    assert 'inference_rollout_reconcile_errors_total{kind="KubeError"} 1.234567e+06\n' in page
    assert "inference_rollout_status_conflicts_total 1.2345679e+08\n" in page
    got = samples(reg)
    assert got[("inference_rollout_reconcile_errors_total", (("kind", "KubeError"),))] == 1234567
    assert got[("inference_rollout_status_conflicts_total", ())] == 123456790
    assert "_created" not in page  # the series the page had, no OpenMetrics extras
    assert "# TYPE inference_rollout_reconcile_errors_total counter" in page


def test_gauges_labels_and_histograms_keep_their_names_and_format() -> None:
    reg = Registry()
    reg.set("inference_rollout_info", 1, namespace="a", name="chat", phase='Say "hi"\\\n')
    reg.set("inference_rollout_canary_weight", 20, name="chat", namespace="a")
    reg.observe("inference_rollout_reconcile_lag_seconds", 0.3)
    reg.observe("inference_rollout_reconcile_lag_seconds", 20)
    page = reg.render()
    # labels sorted by name, values escaped as the text format says
    assert 'inference_rollout_info{name="chat",namespace="a",phase="Say \\"hi\\"\\\\\\n"} 1.0' \
        in page
    assert 'inference_rollout_canary_weight{name="chat",namespace="a"} 20.0' in page
    assert 'inference_rollout_reconcile_lag_seconds_bucket{le="0.25"} 0.0' in page
    assert 'inference_rollout_reconcile_lag_seconds_bucket{le="0.5"} 1.0' in page
    assert 'inference_rollout_reconcile_lag_seconds_bucket{le="+Inf"} 2.0' in page
    assert "inference_rollout_reconcile_lag_seconds_count 2.0" in page
    assert "inference_rollout_reconcile_lag_seconds_sum 20.3" in page
    with pytest.raises(ValueError, match="first used with"):
        reg.set("inference_rollout_canary_weight", 1, namespace="a")
    with pytest.raises(ValueError, match="ends in _total"):
        reg.inc("inference_rollout_rollbacks")


def test_the_registry_is_its_own_not_prometheus_clients_global_one() -> None:
    Registry().set("inference_rollout_step", 1, namespace="a", name="b")
    assert not any(m.name.startswith("inference_rollout")
                   for m in prometheus_client.REGISTRY.collect())


def rollout_series(reg: Registry, ns: str, name: str) -> None:
    reg.set("inference_rollout_info", 1, namespace=ns, name=name, phase="Progressing")
    reg.set("inference_rollout_analysis_value", 0.01, namespace=ns, name=name, metric="errors",
            role="canary")
    reg.inc("inference_rollout_rollbacks_total", namespace=ns, name=name, reason="Analysis")
    reg.inc("inference_rollout_analysis_verdicts_total", namespace=ns, name=name,
            metric="errors", verdict="Pass")


def test_a_deleted_rollouts_series_are_gone_and_the_others_stay() -> None:
    reg = Registry()
    rollout_series(reg, "a", "chat")
    rollout_series(reg, "a", "other")
    rollout_series(reg, "b", "chat")
    reg.inc("inference_rollout_reconcile_errors_total", kind="KubeError")
    reg.observe("inference_rollout_reconcile_lag_seconds", 0.1)
    reg.forget_rollout("a", "chat")
    left = samples(reg)
    assert not [k for k in left if ("name", "chat") in k[1] and ("namespace", "a") in k[1]]
    assert sum(1 for k in left if ("name", "other") in k[1]) == 4
    assert sum(1 for k in left if ("namespace", "b") in k[1]) == 4
    assert left[("inference_rollout_reconcile_errors_total", (("kind", "KubeError"),))] == 1
    assert left[("inference_rollout_reconcile_lag_seconds_count", ())] == 1


def test_each_reconcile_rewrites_a_rollouts_gauges_and_keeps_its_counters() -> None:
    reg = Registry()
    rollout_series(reg, "a", "chat")
    reg.forget(namespace="a", name="chat")  # what _export does before writing the gauges again
    left = samples(reg)
    assert ("inference_rollout_info", (("name", "chat"), ("namespace", "a"),
                                       ("phase", "Progressing"))) not in left
    assert left[("inference_rollout_rollbacks_total", (("name", "chat"), ("namespace", "a"),
                                                        ("reason", "Analysis")))] == 1


def test_the_delete_handler_forgets_the_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[dict[str, Any]] = []

    async def release(_deps: Any, body: dict[str, Any]) -> None:
        released.append(body)

    monkeypatch.setattr(handlers, "release_before_deletion", release)
    monkeypatch.setattr(handlers.Runtime, "deps", object())
    reg = Registry()
    monkeypatch.setattr(operator_metrics, "REGISTRY", reg)
    rollout_series(reg, "a", "chat")
    rollout_series(reg, "a", "kept")
    asyncio.run(handlers.on_delete(kopf_body({"metadata": {"namespace": "a", "name": "chat"}})))
    assert released
    assert not any(("name", "chat") in k[1] for k in samples(reg))
    assert any(("name", "kept") in k[1] for k in samples(reg))
    asyncio.run(handlers._release_before_deletion({"metadata": {"namespace": "a",
                                                                "name": "kept"}}))
    assert not any(("name", "kept") in k[1] for k in samples(reg))


def test_the_metrics_endpoint_serves_the_registrys_page(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry()
    monkeypatch.setattr(operator_metrics, "REGISTRY", reg)
    reg.inc("inference_rollout_status_conflicts_total", 1234567)
    response = asyncio.run(handlers._metrics(make_mocked_request("GET", "/metrics")))
    assert response.content_type == "text/plain"
    assert response.text == reg.render()
    assert "inference_rollout_status_conflicts_total 1.234567e+06" in (response.text or "")
