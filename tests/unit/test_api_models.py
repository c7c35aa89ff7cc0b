"""The API models: defaults, round trips by alias, and errors that name the field and the fix.

These are the checks behind ``Valid=False`` (and ``kubectl inference-rollout lint``): the rules the
CRD cannot express (the pod template's shape) and, as a second line, every rule it can.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from inference_rollout.api.duration import DurationError, format_duration, parse_duration
from inference_rollout.api.spec import (
    MAX_STEPS,
    AnalysisSpec,
    InferenceRolloutSpec,
    MetricSpec,
    PodTemplate,
    StrategySpec,
)
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core import validation
from irsandbox.manifests import user_rollout


def spec_body() -> dict[str, Any]:
    spec: dict[str, Any] = user_rollout(
        replicas=4, args=["--model", "meta-llama/Llama-3.1-8B-Instruct"])["spec"]
    return spec


def error_of(body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        InferenceRolloutSpec.parse(body)
    return str(caught.value)


def with_changes(**changes: Any) -> dict[str, Any]:
    """``spec_body()`` with dotted paths (``__`` for dots in Python names) replaced."""
    body = spec_body()
    for dotted, value in changes.items():
        node: Any = body
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return body


# --- defaults --------------------------------------------------------------------------------


def test_defaults_follow_the_design() -> None:
    body = spec_body()
    del body["analysis"]
    spec = InferenceRolloutSpec.parse(body)
    assert [s.weight for s in spec.strategy.steps] == [5, 20, 50, 100]
    assert [s.pause for s in spec.strategy.steps] == ["24h", "24h", "24h", None]
    assert spec.strategy.progress_deadline == "30m"
    assert spec.strategy.abort_scale_down_delay == "30s"
    assert spec.analysis.interval == "1m"
    assert spec.analysis.consecutive_error_limit == 4
    assert spec.analysis.on_error_limit == "Pause"
    assert spec.analysis.metrics == []
    assert spec.profile == "latency"
    assert spec.capacity.mode == "surge" and spec.capacity.max_surge == 1
    assert spec.traffic.gateway_api.backend_kind == "Service"


def test_slo_factor_defaults_to_one_and_a_half() -> None:
    spec = InferenceRolloutSpec.parse(with_changes(analysis__slo={"ttftP99": "300ms"}))
    assert spec.analysis.slo is not None
    assert spec.analysis.slo.factor == 1.5
    assert parse_duration(spec.analysis.slo.ttft_p99 or "") == pytest.approx(0.3)


def test_default_steps_are_fresh_per_object() -> None:
    a, b = StrategySpec(), StrategySpec()
    assert a.steps == b.steps and a.steps is not b.steps


def test_empty_status_parses() -> None:
    status = InferenceRolloutStatus.parse(None)
    assert status.phase is None and status.canary_weight == 0 and status.conditions == []


# --- round trips ------------------------------------------------------------------------------


def test_spec_round_trips_by_alias() -> None:
    body = with_changes(
        model={"preset": "llama-3.1-8b", "gpuMemoryGiB": 80},
        analysis__slo={"ttftP99": "300ms", "itlP99": "50ms", "e2eP99": "20s"},
        strategy={"steps": [{"weight": 10, "pause": "1h"}, {"weight": 100}],
                  "progressDeadline": "15m"},
    )
    spec = InferenceRolloutSpec.parse(body)
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["model"]["gpuMemoryGiB"] == 80
    assert dumped["analysis"]["slo"]["e2eP99"] == "20s"
    assert dumped["traffic"]["gatewayAPI"]["httpRouteRef"] == {"name": "llama-chat"}
    assert dumped["strategy"]["progressDeadline"] == "15m"
    assert "e2e_p99" not in str(dumped) and "gateway_api" not in str(dumped)
    assert InferenceRolloutSpec.parse(dumped) == spec


def test_status_round_trips_by_alias() -> None:
    body = {
        "phase": "Progressing", "observedGeneration": 7, "stableRevision": "5c9f00aa11",
        "canaryRevision": "7d1a22bb33", "currentStep": 1, "canaryWeight": 20,
        "conditions": [{"type": "Valid", "status": "True", "reason": "Valid",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "analysis": {"error-rate": {"value": 0.001, "verdict": "Pass", "passes": 3}},
        "requests": {"promote": True},
    }
    status = InferenceRolloutStatus.parse(body)
    dumped = status.to_body()
    assert dumped["canaryWeight"] == 20 and dumped["requests"]["promote"] is True
    assert dumped["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert InferenceRolloutStatus.parse(dumped) == status


def test_snake_case_names_are_accepted_too() -> None:
    spec = InferenceRolloutSpec.parse(with_changes(
        analysis__consecutive_error_limit=2))
    assert spec.analysis.consecutive_error_limit == 2


# --- errors name the field and the fix -------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no container", with_changes(template__spec__containers=[]),
     ["spec.template.spec.containers", "at least one container", "'vllm'"]),
    ("container without image",
     with_changes(template__spec__containers=[{"name": "vllm"}]),
     ["spec.template.spec.containers[0]", "a name and an image"]),
    ("no serving port", with_changes(template__spec__containers__0__ports=None),
     ["spec.template.spec.containers[name=vllm].ports", "containerPort: 8000"]),
    ("two route modes", with_changes(traffic__gatewayAPI__parentRefs=[{"name": "gw"}]),
     ["spec.traffic.gatewayAPI", "exactly one of httpRouteRef", "parentRefs"]),
    ("no route", with_changes(traffic__gatewayAPI={"backendKind": "Service"}),
     ["spec.traffic.gatewayAPI", "exactly one of httpRouteRef"]),
    ("duration without unit",
     with_changes(strategy={"steps": [{"weight": 5, "pause": "5"}, {"weight": 100}]}),
     ["strategy.steps.0.pause", "'5' is not a duration", "e.g. 30s, 5m, 24h"]),
    ("steps not rising",
     with_changes(strategy={"steps": [{"weight": 50}, {"weight": 20}, {"weight": 100}]}),
     ["spec.strategy.steps[1].weight", "greater than the previous step's 50"]),
    ("last step not 100", with_changes(strategy={"steps": [{"weight": 5}, {"weight": 50}]}),
     ["spec.strategy.steps[1].weight", "the last step must be 100", "{weight: 100}"]),
    ("weight over 100", with_changes(strategy={"steps": [{"weight": 150}]}),
     ["strategy.steps.0.weight", "less than or equal to 100"]),
    ("metric with template and query", with_changes(analysis__metrics__0__query="up"),
     ["spec.analysis.metrics[name=error-rate]", "exactly one of template or query"]),
    ("metric with neither", with_changes(analysis__metrics__0__template=None),
     ["spec.analysis.metrics[name=error-rate]", "exactly one of template or query"]),
    ("metric without threshold", with_changes(analysis__metrics__0__max=None),
     ["spec.analysis.metrics[name=error-rate]", "set a threshold",
      "max, min, maxRatioToStable or minRatioToStable"]),
    ("duplicate metric names", with_changes(analysis__metrics=[
        {"name": "errors", "template": "error-rate", "max": 0.01},
        {"name": "errors", "template": "ttft-p99", "max": 1.0}]),
     ["spec.analysis.metrics", "duplicate metric names ['errors']"]),
    ("interval 3s", with_changes(analysis__interval="3s"),
     ["spec.analysis.interval", "at least 5s"]),
    ("metrics without prometheus", with_changes(analysis__prometheus=None),
     ["spec.analysis.prometheus", "need a Prometheus address",
      "address: http://prometheus.monitoring:9090"]),
    ("swap without surge", with_changes(capacity={"mode": "swap", "maxSurge": 0}),
     ["spec.capacity.maxSurge", "swap mode needs maxSurge >= 1"]),
    ("unknown field (a typo)", with_changes(strategy={"stpes": []}),
     ["strategy.stpes", "Extra inputs are not permitted"]),
    ("too many steps",
     with_changes(strategy={"steps": [{"weight": w} for w in range(80, 101)]}),
     ["strategy.steps", f"at most {MAX_STEPS} items"]),
    # Bounded work (issue 9): each of these reached the reconcile and crashed or looped there.
    ("pause 300000000000s (OverflowError in every reconcile before)",
     with_changes(strategy={"steps": [{"weight": 5, "pause": "300000000000s"}, {"weight": 100}]}),
     ["strategy.steps.0.pause", "'300000000000s' is not a duration", "at most 6 digits"]),
    ("pause over a year",
     with_changes(strategy={"steps": [{"weight": 5, "pause": "400d"}, {"weight": 100}]}),
     ["strategy.steps.0.pause", "'400d' is longer than 365d"]),
    ("huge scaleDownDelay", with_changes(strategy={"scaleDownDelay": "999999h"}),
     ["strategy.scaleDownDelay", "longer than 365d"]),
    ("prometheus timeout 5m", with_changes(analysis__prometheus__timeout="5m"),
     ["spec.analysis.prometheus.timeout: 5m is longer than the maximum 1m"]),
    ("interval 2d", with_changes(analysis__interval="2d"),
     ["spec.analysis.interval: 2d is longer than the maximum 24h"]),
    ("evaluation timeout 10m", with_changes(evaluation={"configMapRef": {"name": "c"},
                                                        "timeout": "10m"}),
     ["spec.evaluation.timeout: 10m is longer than the maximum 5m"]),
    ("evaluation sampleSize 5000", with_changes(evaluation={"configMapRef": {"name": "c"},
                                                            "sampleSize": 5000}),
     ["evaluation.sampleSize", "less than or equal to 1000"]),
    ("replicas above int32", with_changes(replicas=2**31), ["replicas", "2147483647"]),
    ("replicas + maxSurge above int32", with_changes(replicas=2**31 - 1),
     ["spec.replicas: replicas + capacity.maxSurge must be at most 2147483647"]),
    ("port 70000", with_changes(template__spec__containers__0__ports=[
        {"name": "http", "containerPort": 70000}]),
     ["spec.template.spec.containers[0].ports[0].containerPort: 70000 is not a port number"]),
    ("port 0 on a second port", with_changes(template__spec__containers__0__ports=[
        {"name": "http", "containerPort": 8000}, {"name": "metrics", "containerPort": 0}]),
     ["spec.template.spec.containers[0].ports[1].containerPort: 0 is not a port number"]),
    ("prometheus address ending in a newline (httpx.InvalidURL before)",
     with_changes(analysis__prometheus__address="http://prometheus.monitoring:9090\n"),
     ["analysis.prometheus.address", "should match pattern"]),
    ("prometheus address with a bad port",
     with_changes(analysis__prometheus__address="http://prometheus:99999"),
     ["spec.analysis.prometheus.address", "is not a URL"]),
    ("prometheus address with credentials",
     with_changes(analysis__prometheus__address="http://user:pw@prometheus:9090"),
     ["spec.analysis.prometheus.address: no credentials", "bearerTokenSecretRef"]),
    ("prometheus address without a host",
     with_changes(analysis__prometheus__address="http:///api"),
     ["spec.analysis.prometheus.address", "names no host"]),
]


@pytest.mark.parametrize(("body", "expected"), [(b, e) for _, b, e in CASES],
                         ids=[i for i, _, _ in CASES])
def test_errors_name_the_field_and_the_fix(body: dict[str, Any], expected: list[str]) -> None:
    message = error_of(body)
    for part in expected:
        assert part in message, f"{part!r} not in {message}"


def test_serving_port_without_a_name_is_the_only_port() -> None:
    body = with_changes(template__spec__containers__0__ports=[{"containerPort": 8080}])
    assert InferenceRolloutSpec.parse(body).template.serving_port() == 8080


def test_serving_container_is_vllm_else_the_first() -> None:
    template = PodTemplate.model_validate({"spec": {"containers": [
        {"name": "proxy", "image": "envoy", "ports": [{"containerPort": 9000}]},
        {"name": "vllm", "image": "vllm", "ports": [{"name": "http", "containerPort": 8000}],
         "command": ["vllm", "serve"], "args": ["--max-num-seqs", "32"]},
    ]}})
    assert template.serving_container()["name"] == "vllm"
    assert template.serving_port() == 8000
    assert template.serving_args() == ["vllm", "serve", "--max-num-seqs", "32"]


def test_models_are_frozen() -> None:
    spec = InferenceRolloutSpec.parse(spec_body())
    with pytest.raises(ValidationError):
        spec.replicas = 3  # type: ignore[misc]  # the refused assignment is the test


# --- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("250ms", 0.25), ("30s", 30), ("5m", 300), ("24h", 86400), ("1h30m", 5400), ("1.5h", 5400),
    ("1d", 86400),
])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "", "5 s", "-5s", "1w", "1e3s", "s", "5.s", "1h 30m"])
def test_bad_durations_say_what_a_good_one_looks_like(text: str) -> None:
    with pytest.raises(DurationError, match=r"use a number with a unit, e\.g\. 30s"):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(11520) == "3h12m"
    assert format_duration(0.25) == "250ms"
    assert format_duration(0) == "0ms"


# --- properties -------------------------------------------------------------------------------


@st.composite
def rising_weights(draw: st.DrawFn) -> list[int]:
    """A strictly rising list of weights in 1..100 that ends at 100."""
    below = draw(st.sets(st.integers(1, 99), max_size=MAX_STEPS - 1))
    return [*sorted(below), 100]


@settings(max_examples=200, deadline=None)
@given(rising_weights())
def test_any_strictly_rising_weights_ending_at_100_validate(weights: list[int]) -> None:
    strategy = StrategySpec.model_validate({"steps": [{"weight": w} for w in weights]})
    assert [s.weight for s in strategy.steps] == weights


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=MAX_STEPS))
def test_weights_validate_exactly_when_rising_to_100(weights: list[int]) -> None:
    ok = all(a < b for a, b in itertools.pairwise(weights)) and weights[-1] == 100
    try:
        StrategySpec.model_validate({"steps": [{"weight": w} for w in weights]})
        assert ok, weights
    except ValidationError as e:
        assert not ok, weights
        assert "spec.strategy.steps[" in str(e)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=6))
def test_metric_names_must_be_unique(names: list[str]) -> None:
    metrics = [{"name": n, "template": "error-rate", "max": 0.1} for n in names]
    body = {"prometheus": {"address": "http://p:9090"}, "metrics": metrics}
    if len(set(names)) == len(names):
        assert [m.name for m in AnalysisSpec.model_validate(body).metrics] == names
    else:
        with pytest.raises(ValidationError, match="duplicate metric names"):
            AnalysisSpec.model_validate(body)


def test_metric_helpers() -> None:
    relative = MetricSpec(name="c", query="x", min_ratio_to_stable=0.95)
    absolute = MetricSpec(name="e", template="error-rate", max=0.01)
    assert relative.is_relative() and not absolute.is_relative()
    assert relative.has_threshold() and absolute.has_threshold()


def test_parse_does_not_mutate_its_input() -> None:
    body = spec_body()
    before = copy.deepcopy(body)
    InferenceRolloutSpec.parse(body)
    assert body == before


@pytest.mark.parametrize("name", ["chat.v2", "3chat", "Chat", "a" * 36])
def test_rollout_names_that_cannot_name_a_deployment_are_valid_false(name: str) -> None:
    # The CRD rejects them now; an object stored before that rule gets Valid=False, not a loop
    # of failing Deployment creates.
    found = validation.problems(InferenceRolloutSpec.parse(spec_body()), name)
    assert found and found[0].startswith("metadata.name: "), found


def test_a_dns_1035_rollout_name_has_no_problem() -> None:
    assert validation.problems(InferenceRolloutSpec.parse(spec_body()), "llama-3-chat") == []


def test_durations_are_parsed_once_and_a_copy_with_updates_reparses() -> None:
    """Durations in seconds are cached on the frozen models; ``model_copy(update=...)`` may change
    the field a cache derives from, so the copy must not carry the cache along."""
    from inference_rollout.api.spec import AnalysisSpec, MetricSpec

    analysis = AnalysisSpec(interval="10s", inconclusive_limit="1h")
    assert (analysis.interval_seconds, analysis.inconclusive_limit_seconds) == (10.0, 3600.0)
    faster = analysis.model_copy(update={"interval": "5s"})
    assert faster.interval_seconds == 5.0 and analysis.interval_seconds == 10.0
    metric = MetricSpec(name="m", query="up", max=1, window="2m")
    assert (metric.window_seconds, metric.warmup_seconds) == (120.0, 0.0)
    renamed = analysis.model_copy(update={"metrics": [metric]})
    assert [m.name for m in renamed.effective_metrics] == ["m"]
    assert analysis.effective_metrics == ()


@pytest.mark.parametrize("field,value", [
    ("stableRevision", "../../team-b/deployments/bank"),
    ("canaryRevision", "7D1A22BB33"),
    ("canaryRevision", "7d1a"),
    ("oldRevisions", {"../x": "2026-01-01T00:00:00Z"}),
    ("evaluation", {"revision": "x/y", "verdict": "Pass", "measuredAt": "t"}),
])
def test_a_status_naming_anything_but_a_revision_does_not_parse(field, value) -> None:
    """The operator derives object names and paths from these; anyone allowed to steer may write
    the status (issue 29): only the template hash's form is read."""
    with pytest.raises(ValidationError) as info:
        InferenceRolloutStatus.parse({field: value})
    assert field in str(info.value)


@pytest.mark.parametrize("where,ref", [
    ("traffic__gatewayAPI__httpRouteRef", {"name": "../../team-b/httproutes/bank"}),
    ("evaluation__configMapRef", {"name": "../cases"}),
    ("notifications__secretRef", {"name": "team-b/secrets/x"}),
])
def test_names_the_spec_refers_to_are_kubernetes_names(where, ref) -> None:
    with pytest.raises(ValidationError) as info:
        InferenceRolloutSpec.parse(with_changes(**{where: ref}))
    assert "name" in str(info.value)
