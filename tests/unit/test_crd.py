"""The generated CRD: committed copy up to date, structural, names and columns, defaults consistent
with the models, and the CEL rules evaluated on valid and invalid manifests.

The API server is emulated here the way it treats a create: nulls pruned, defaults applied, then
the OpenAPI checks (a small validator below) and the CEL rules (evaluated with ``celpy``, with the
few Kubernetes CEL library functions the rules use added, and ``duration()`` parsing exactly what
Go's ``time.ParseDuration`` parses).  ``tests/sandbox/test_crd_apiserver.py`` sends manifests
like these to the sandbox's real API server.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import itertools
import math
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy  # the dev extra (make venv): missing, this module fails, never skips
import pytest
import re2
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from inference_rollout.api import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, crd
from inference_rollout.api.duration import DurationError, parse_duration
from inference_rollout.api.spec import ADAPTERS_NOT_BUILT, MAX_STEPS, InferenceRolloutSpec
from inference_rollout.core import validation
from irsandbox.manifests import user_rollout

REPO = Path(__file__).resolve().parents[2]
CRD = crd.build_crd()
VERSION_ENTRY = CRD["spec"]["versions"][0]
SCHEMA = VERSION_ENTRY["schema"]["openAPIV3Schema"]

# --- sample manifests (shared with the API-server test) ------------------------------------------


def manifest(name: str = "llama-chat") -> dict[str, Any]:
    """A valid InferenceRollout with metrics, as a user would write it."""
    return user_rollout(name)


DELETE = object()


def patched(changes: dict[str, Any]) -> dict[str, Any]:
    """``manifest()`` with dotted ``spec`` paths set (``DELETE`` removes; digits index lists)."""
    body = manifest()
    for dotted, value in changes.items():
        node: Any = body["spec"]
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        key: Any = int(last) if last.isdigit() else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = value
    return body


def steps(*weights: int) -> list[dict[str, Any]]:
    return [{"weight": w, "pause": "1h"} for w in weights]


ADAPTER = {"name": "support", "source": "/adapters/support/v7",
           "baseModel": "meta-llama/Llama-3.1-8B-Instruct"}
MINIMAL = manifest()
del MINIMAL["spec"]["analysis"], MINIMAL["spec"]["replicas"]

#: (id, manifest): accepted by the API server and by the models.
VALID: list[tuple[str, dict[str, Any]]] = [
    ("typical", manifest()),
    ("minimal: every default", MINIMAL),
    ("one step of 100", patched({"strategy.steps": [{"weight": 100}]})),
    ("manual steps", patched({"strategy.steps": [{"weight": 10, "manual": True},
                                                 {"weight": 100}]})),
    ("owned route", patched({"traffic.gatewayAPI": {"parentRefs": [{"name": "gw"}],
                                                    "hostnames": ["chat.example.com"],
                                                    "backendKind": "InferencePool"}})),
    ("inference pools with an endpoint picker per pool", patched({
        "traffic.gatewayAPI.backendKind": "InferencePool",
        "traffic.gatewayAPI.endpointPickerRef": {"name": "epp-{{pool}}", "port": 9002}})),
    ("interval 5s", patched({"analysis.interval": "5s"})),
    ("interval 1h30m", patched({"analysis.interval": "1h30m"})),
    ("interval 1d", patched({"analysis.interval": "1d"})),
    ("interval 0.0001d is 8.64s", patched({"analysis.interval": "0.0001d"})),
    ("relative and query metric", patched({"analysis.metrics": [
        {"name": "conversion", "query": 'sum(rate(x{revision="{{revision}}"}[5m]))',
         "minRatioToStable": 0.95},
        {"name": "ttft", "template": "ttft-p99", "maxRatioToStable": 1.2, "window": "5m"},
    ]})),
    ("slo only", patched({"analysis.metrics": [],
                          "analysis.slo": {"ttftP99": "300ms", "e2eP99": "20s"}})),
    ("swap with one surge pod", patched({"capacity": {"mode": "swap", "maxSurge": 1}})),
    ("explicit nulls are pruned", patched({"model": None, "evaluation": None})),
    ("sequential verdicts with an inconclusive bound", patched({
        "analysis.verdicts": "Sequential", "analysis.falseRollbackRate": 0.001,
        "analysis.inconclusiveLimit": "2h", "analysis.onInconclusive": "Rollback",
        "analysis.metrics.0.warmup": "30s"})),
    ("window verdicts", patched({"analysis.verdicts": "Window"})),
    ("the longest durations", patched({
        "strategy.steps": [{"weight": 5, "pause": "365d"}, {"weight": 100}],
        "strategy.scaleDownDelay": "8760h", "analysis.interval": "24h",
        "analysis.prometheus.timeout": "1m",
        "evaluation": {"configMapRef": {"name": "cases"}, "timeout": "5m", "sampleSize": 1000}})),
    ("prometheus address with a path, a port and IPv6", patched({
        "analysis.prometheus.address": "https://[fd00::1]:9443/prometheus/"})),
    ("replicas + maxSurge exactly int32", patched({"replicas": 2**31 - 2})),
    ("probes alone, no Prometheus", patched({
        "analysis.prometheus": DELETE, "analysis.probes": {"ratePerSecond": 5, "timeout": "5m"},
        "analysis.metrics": [{"name": "ttft", "template": "probe-ttft-p99", "max": 0.45}]})),
    ("probes beside Prometheus and an SLO", patched({
        "analysis.probes": {}, "analysis.slo": {"ttftP99": "300ms"}})),
]

#: (id, manifest, message): rejected at apply time; the message (or the field path for schema
#: errors) appears in the API server's answer.  The models reject every one of them too.
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("steps fall", patched({"strategy.steps": steps(5, 50, 20, 100)}),
     "spec.strategy.steps: step weights must rise strictly"),
    ("steps repeat", patched({"strategy.steps": steps(20, 20, 100)}),
     "spec.strategy.steps: step weights must rise strictly"),
    ("last step not 100", patched({"strategy.steps": steps(5, 50)}),
     "spec.strategy.steps: the last step's weight must be 100"),
    ("weight 0", patched({"strategy.steps": steps(0, 100)}), "spec.strategy.steps[0].weight"),
    ("weight 150", patched({"strategy.steps": steps(50, 150)}), "spec.strategy.steps[1].weight"),
    ("no steps", patched({"strategy.steps": []}), "spec.strategy.steps"),
    ("21 steps", patched({"strategy.steps": steps(*range(80, 101))}), "spec.strategy.steps"),
    ("metric with template and query", patched({"analysis.metrics.0.query": "up"}),
     "spec.analysis.metrics[name=error-rate]: set exactly one of template or query"),
    ("metric with neither", patched({"analysis.metrics.0.template": DELETE}),
     "spec.analysis.metrics[name=error-rate]: set exactly one of template or query"),
    ("metric without threshold", patched({"analysis.metrics.0.max": DELETE}),
     "spec.analysis.metrics[name=error-rate]: set a threshold"),
    ("duplicate metric names", patched({"analysis.metrics": [
        {"name": "errors", "template": "error-rate", "max": 0.01},
        {"name": "errors", "template": "ttft-p99", "max": 1},
    ]}), "spec.analysis.metrics: metric names must be unique"),
    ("interval 3s", patched({"analysis.interval": "3s"}),
     "spec.analysis.interval: must be at least 5s"),
    ("interval 4999ms", patched({"analysis.interval": "4999ms"}),
     "spec.analysis.interval: must be at least 5s"),
    ("interval 0.00005d is 4.32s", patched({"analysis.interval": "0.00005d"}),
     "spec.analysis.interval: must be at least 5s"),
    ("interval without unit", patched({"analysis.interval": "5"}), "spec.analysis.interval"),
    ("duration without unit", patched({"strategy.steps": [{"weight": 5, "pause": "5"},
                                                          {"weight": 100}]}),
     "spec.strategy.steps[0].pause"),
    ("route ref and parentRefs", patched({"traffic.gatewayAPI.parentRefs": [{"name": "gw"}]}),
     "spec.traffic.gatewayAPI: set exactly one of httpRouteRef"),
    ("no route", patched({"traffic.gatewayAPI": {"backendKind": "Service"}}),
     "spec.traffic.gatewayAPI: set exactly one of httpRouteRef"),
    ("endpoint picker for Service backends",
     patched({"traffic.gatewayAPI.endpointPickerRef": {"name": "epp"}}),
     "spec.traffic.gatewayAPI.endpointPickerRef: only InferencePool backends"),
    ("metrics without prometheus", patched({"analysis.prometheus": DELETE}),
     "spec.analysis.prometheus: metrics or slo need a Prometheus address"),
    ("slo without prometheus", patched({"analysis.prometheus": DELETE, "analysis.metrics": [],
                                        "analysis.slo": {"ttftP99": "300ms"}}),
     "spec.analysis.prometheus: metrics or slo need a Prometheus address"),
    ("a probe template without probes", patched({"analysis.metrics": [
        {"name": "ttft", "template": "probe-ttft-p99", "max": 0.45}]}),
     "spec.analysis.metrics: the probe-* templates measure the operator's probes"),
    ("probes and a Prometheus metric without Prometheus", patched({
        "analysis.prometheus": DELETE, "analysis.probes": {}}),
     "spec.analysis.prometheus: metrics or slo need a Prometheus address"),
    ("probes too fast", patched({"analysis.probes": {"ratePerSecond": 6}}),
     "spec.analysis.probes.ratePerSecond"),
    ("probe timeout 10m", patched({"analysis.probes": {"timeout": "10m"}}),
     "spec.analysis.probes.timeout: must be at most 5m"),
    ("swap without surge", patched({"capacity": {"mode": "swap", "maxSurge": 0}}),
     "spec.capacity.maxSurge: swap mode needs maxSurge >= 1"),
    ("unknown profile", patched({"profile": "fast"}), "spec.profile"),
    ("upper-case metric name", patched({"analysis.metrics.0.name": "Errors"}),
     "spec.analysis.metrics[0].name"),
    ("prometheus address without scheme",
     patched({"analysis.prometheus.address": "prometheus:9090"}),
     "spec.analysis.prometheus.address"),
    ("no template", patched({"template": DELETE}), "spec.template"),
    # Bounded work (issue 9): no duration, count or address the operator cannot act on.
    ("pause 300000000000s", patched({"strategy.steps": [{"weight": 5, "pause": "300000000000s"},
                                                        {"weight": 100}]}),
     "spec.strategy.steps[0].pause"),
    ("pause 366d", patched({"strategy.steps": [{"weight": 5, "pause": "366d"},
                                               {"weight": 100}]}),
     "spec.strategy.steps[0].pause: Invalid value: must be at most 365d"),
    ("scaleDownDelay 999999h", patched({"strategy.scaleDownDelay": "999999h"}),
     "spec.strategy.scaleDownDelay: Invalid value: must be at most 365d"),
    ("prometheus timeout 2m", patched({"analysis.prometheus.timeout": "2m"}),
     "spec.analysis.prometheus.timeout: must be at most 1m"),
    ("evaluation timeout 1h", patched({"evaluation": {"configMapRef": {"name": "cases"},
                                                      "timeout": "1h"}}),
     "spec.evaluation.timeout: must be at most 5m"),
    ("evaluation sampleSize 100000", patched({"evaluation": {"configMapRef": {"name": "cases"},
                                                             "sampleSize": 100000}}),
     "spec.evaluation.sampleSize"),
    ("interval 2d", patched({"analysis.interval": "2d"}),
     "spec.analysis.interval: must be at most 24h"),
    ("replicas above int32", patched({"replicas": 2**31}), "spec.replicas"),
    ("replicas + maxSurge above int32", patched({"replicas": 2**31 - 1}),
     "spec.replicas: replicas + capacity.maxSurge must be at most 2147483647"),
    ("step replicas above int32", patched({"strategy.steps": [{"weight": 5, "replicas": 2**31},
                                                              {"weight": 100}]}),
     "spec.strategy.steps[0].replicas"),
    ("prometheus address ending in a newline",
     patched({"analysis.prometheus.address": "http://prometheus.monitoring:9090\n"}),
     "spec.analysis.prometheus.address"),
    ("prometheus address with a space",
     patched({"analysis.prometheus.address": "http://prometheus monitoring:9090"}),
     "spec.analysis.prometheus.address"),
    ("prometheus address with a query",
     patched({"analysis.prometheus.address": "http://prometheus:9090/?x=1"}),
     "spec.analysis.prometheus.address"),
    ("zero replicas", patched({"replicas": 0}), "spec.replicas"),
    ("rollback on inconclusive without a limit", patched({"analysis.onInconclusive": "Rollback"}),
     "spec.analysis.onInconclusive: Rollback acts only after inconclusiveLimit"),
    ("false rollback rate 0", patched({"analysis.falseRollbackRate": 0}),
     "spec.analysis.falseRollbackRate"),
    ("false rollback rate 0.5", patched({"analysis.falseRollbackRate": 0.5}),
     "spec.analysis.falseRollbackRate"),
    ("unknown verdict rule", patched({"analysis.verdicts": "Bayesian"}), "spec.analysis.verdicts"),
    ("duplicate adapter names", patched({"replicas": 2, "adapters": [ADAPTER, ADAPTER]}),
     "spec.adapters: adapter names must be unique"),
    ("adapters on one replica", patched({"replicas": 1, "adapters": [ADAPTER]}),
     "spec.replicas: an adapter release splits the running pods"),
    ("adapters on the default replica count", patched({"replicas": DELETE,
                                                       "adapters": [ADAPTER]}),
     "spec.replicas: an adapter release splits the running pods"),
    ("adapter name with a space", patched({"replicas": 2, "adapters": [
        {**ADAPTER, "name": "sup port"}]}), "spec.adapters[0].name"),
    ("adapter source with a newline", patched({"replicas": 2, "adapters": [
        {**ADAPTER, "source": "/adapters/support/v7\n"}]}), "spec.adapters[0].source"),
    ("nine adapters", patched({"replicas": 2, "adapters": [
        {**ADAPTER, "name": f"a{i}"} for i in range(9)]}), "spec.adapters"),
]

# --- a small emulation of the API server's create path ------------------------------------------


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")


def prune_nulls_and_default(value: Any, schema: dict[str, Any]) -> Any:
    """Kubernetes' structural defaulting: non-nullable nulls are dropped (or defaulted), absent
    fields with a default get it, then defaults apply inside what was set (recursively)."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in list(value):
            sub = props.get(key) or schema.get("additionalProperties")
            if value[key] is None and isinstance(sub, dict) and not sub.get("nullable"):
                del value[key]
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key in value:
            sub = props.get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                value[key] = prune_nulls_and_default(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        return [prune_nulls_and_default(v, schema["items"]) for v in value]
    return value


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def schema_errors(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """The OpenAPI checks the CRD uses (types, enum, bounds, lengths, patterns, required)."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: Invalid value: null"]
    kind = schema.get("type")
    if kind and not _TYPES[kind](value):
        return [f"{path}: Invalid value: must be of type {kind}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: Unsupported value: {value!r}: supported values: {schema['enum']}")
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value <= low if schema.get("exclusiveMinimum") else value < low):
            errors.append(f"{path}: Invalid value: {value}: should be greater than {low}")
        if high is not None and (value >= high if schema.get("exclusiveMaximum")
                                 else value > high):
            errors.append(f"{path}: Invalid value: {value}: should be less than {high}")
    if kind == "string":
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: Invalid value: should be at least {schema['minLength']} long")
        if len(value) > schema.get("maxLength", math.inf):
            errors.append(f"{path}: Too long: may not be longer than {schema['maxLength']}")
        # The API server's regexps are Go's (RE2): `$` is the end of the text, where Python's
        # `re` would also match before a final newline.
        if "pattern" in schema and not re2.search(schema["pattern"], value):
            errors.append(f"{path}: Invalid value: {value!r}: should match {schema['pattern']!r}")
    if kind == "array":
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: Invalid value: should have at least {schema['minItems']} items")
        if len(value) > schema.get("maxItems", math.inf):
            errors.append(f"{path}: Too many: must have at most {schema['maxItems']} items")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{i}]")
    if kind == "object":
        errors += [f"{path}.{key}: Required value" for key in schema.get("required", [])
                   if key not in value]
        for key, item in value.items():
            sub = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                errors += schema_errors(item, sub, f"{path}.{key}" if path else key)
    return errors


_GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                "h": 3600 * 10**9}


def go_duration(text: Any) -> celtypes.DurationType:
    """CEL's ``duration()`` as Kubernetes has it: Go's ``time.ParseDuration`` (no ``d`` unit)."""
    s = str(text)
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    if s == "0":
        return celtypes.DurationType(0)
    parts = _GO_DURATION.findall(s)
    if not s or "".join(n + u for n, u in parts) != s or any(n in ("", ".") for n, _ in parts):
        raise ValueError(f"time: invalid duration {str(text)!r}")
    nanos = sum(int(Decimal(n) * _GO_UNITS_NS[u]) for n, u in parts)  # Go truncates fractions
    if nanos > 2**63 - 1:
        raise ValueError(f"time: invalid duration {str(text)!r}")  # Go: overflow
    seconds, rest = divmod(sign * nanos, 10**9)
    return celtypes.DurationType(seconds, rest)


def _is_sorted(items: Any) -> celtypes.BoolType:
    values = list(items)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(values)))


def _replace(text: Any, old: Any, new: Any) -> celtypes.StringType:
    return celtypes.StringType(str(text).replace(str(old), str(new)))


#: The Kubernetes CEL library functions the rules use, beyond standard CEL.
K8S_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "isSorted": _is_sorted, "replace": _replace, "duration": go_duration,
}
_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def cel(expression: str, self_value: Any) -> Any:
    if expression not in _PROGRAMS:
        _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression), functions=K8S_FUNCTIONS)
    result = _PROGRAMS[expression].evaluate({"self": json_to_cel(self_value)})
    if isinstance(result, Exception):
        raise result
    return result


def cel_errors(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Evaluate every ``x-kubernetes-validations`` rule where its ``self`` exists."""
    if value is None:
        return []
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        try:
            ok = cel(rule["rule"], value)
        except Exception as e:  # a runtime error rejects the object too
            errors.append(f"{path}: Invalid value: rule evaluation error: {e}")
            continue
        if ok is not True and ok != celtypes.BoolType(True):
            message = rule["message"]
            if "messageExpression" in rule:
                with contextlib.suppress(Exception):  # the API server falls back to `message`
                    message = str(cel(rule["messageExpression"], value))
            errors.append(f"{path}: Invalid value: {message}")
    if isinstance(value, dict):
        for key, item in value.items():
            sub = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                errors += cel_errors(item, sub, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += cel_errors(item, schema["items"], f"{path}[{i}]")
    return errors


def stored_after_defaults(body: dict[str, Any]) -> dict[str, Any]:
    stored: dict[str, Any] = prune_nulls_and_default(copy.deepcopy(body), SCHEMA)
    return stored


def apply(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What the API server stores for a create, and its errors (empty: accepted)."""
    stored = stored_after_defaults(body)
    return stored, schema_errors(stored, SCHEMA, "") + cel_errors(stored, SCHEMA, "")


# --- the committed file ------------------------------------------------------------------------


def test_committed_crd_is_the_generated_one() -> None:
    committed = (REPO / crd.CRD_FILE).read_text()
    generated = crd.render()
    diff = "".join(list(difflib.unified_diff(
        committed.splitlines(keepends=True), generated.splitlines(keepends=True),
        crd.CRD_FILE, "generated"))[:40])
    assert committed == generated, f"{crd.CRD_FILE} is out of date: run `make crd`\n{diff}"


def test_module_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    crd.main()
    assert capsys.readouterr().out == crd.render()
    assert yaml.safe_load(crd.render()) == CRD


# --- names, versions, columns ---------------------------------------------------------------


def test_names_scope_and_version() -> None:
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert CRD["metadata"]["name"] == "inferencerollouts.rollouts.inference.dev"
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        "InferenceRollout", "inferencerollouts", "inferencerollout") == (KIND, PLURAL, SINGULAR)
    assert names["shortNames"] == ["ir"] == list(SHORT_NAMES)
    assert names["categories"] == ["inference"]
    assert CRD["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert VERSION_ENTRY["served"] is True and VERSION_ENTRY["storage"] is True
    assert VERSION_ENTRY["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}


def test_scale_paths_point_at_fields_of_their_type() -> None:
    """kubectl scale and an HPA read an integer count and a selector string at these paths."""
    scale = VERSION_ENTRY["subresources"]["scale"]
    types = {"specReplicasPath": "integer", "statusReplicasPath": "integer",
             "labelSelectorPath": "string"}
    for key, kind in types.items():
        root, name = scale[key].lstrip(".").split(".")
        assert SCHEMA["properties"][root]["properties"][name]["type"] == kind, key


def test_printer_columns() -> None:
    columns = {c["name"]: c for c in VERSION_ENTRY["additionalPrinterColumns"]}
    expected = {
        "Phase": ("string", ".status.phase"),
        "Step": ("integer", ".status.currentStep"),
        "Weight": ("integer", ".status.canaryWeight"),
        "Stable": ("string", ".status.stableRevision"),
        "Canary": ("string", ".status.canaryRevision"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }
    for name, (kind, path) in expected.items():
        assert (columns[name]["type"], columns[name]["jsonPath"]) == (kind, path), name
        assert columns[name].get("priority", 0) == 0, f"{name} must show in plain `kubectl get`"
    for column in columns.values():
        field_path = column["jsonPath"].lstrip(".").split(".")
        if field_path[0] == "status":  # the column points at a real status field of that type
            node = SCHEMA["properties"]["status"]["properties"][field_path[1]]
            assert node["type"] == column["type"], column


# --- structural schema ----------------------------------------------------------------------


def test_schema_is_structural() -> None:
    for path, node in walk(SCHEMA):
        where = path or "<root>"
        for banned in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "const"):
            assert banned not in node, f"{where}: {banned} is not allowed in a structural schema"
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), (
            f"{where}: every node needs a type (or x-kubernetes-preserve-unknown-fields)")
        assert not ("properties" in node and "additionalProperties" in node), where
        assert node.get("additionalProperties", {}) is not False, where
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{where}: {bound} must be the OpenAPI 3.0 bool"
        if node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields"):
            assert "properties" in node or "additionalProperties" in node or path in (
                ".metadata",), f"{where}: an object without fields would prune everything"
        for key in node.get("required", []):
            assert key in node["properties"], f"{where}: required {key} is not a property"
        for value in node.get("enum", []):
            assert _TYPES[node["type"]](value), f"{where}: enum value {value!r}"
        if "default" in node:
            assert path.startswith(".spec"), f"{where}: the status has no defaults"
            assert not node.get("nullable"), f"{where}: a nullable field cannot be defaulted"
            assert schema_errors(node["default"], node, where) == [], where
        if node.get("nullable"):
            assert path.startswith(".status"), f"{where}: spec fields are not nullable"
            assert "enum" not in node, f"{where}: a nullable enum would reject null"
    # The API server allows only name and generateName restrictions on metadata.
    metadata = SCHEMA["properties"]["metadata"]
    assert metadata["type"] == "object" and set(metadata["properties"]) == {"name"}
    assert set(metadata["properties"]["name"]) == {"type", "maxLength", "pattern"}
    assert SCHEMA["required"] == ["spec"]


def test_free_form_parts_keep_their_fields() -> None:
    template = SCHEMA["properties"]["spec"]["properties"]["template"]["properties"]
    for part in ("metadata", "spec"):
        assert template[part]["type"] == "object"
        assert template[part]["x-kubernetes-preserve-unknown-fields"] is True


def test_cel_rules_have_list_bounds() -> None:
    """Every list a rule iterates has maxItems, so the API server's cost estimate passes."""
    for path, node in walk(SCHEMA):
        for rule in node.get("x-kubernetes-validations", []):
            # A rule on a string is reported under the string's own path by the API server
            # ("spec.strategy.steps[0].pause: Invalid value: ...: must be at most 365d").
            assert rule["message"].startswith(("spec.", "status.")) \
                or node.get("type") == "string", f"{path}: the message names the field"
        if node.get("type") == "array" and path.startswith(".spec"):
            assert "maxItems" in node, f"{path}: arrays need maxItems"


def test_status_optional_fields_are_nullable() -> None:
    status = SCHEMA["properties"]["status"]["properties"]
    assert status["stableRevision"]["nullable"] is True
    assert status["currentStep"]["nullable"] is True
    assert "nullable" not in status["phase"]  # an enum: its null is pruned instead
    assert "nullable" not in status["canaryWeight"]
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_generator_rejects_what_it_cannot_express() -> None:
    with pytest.raises(crd.SchemaError, match="union"):
        crd.to_structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {},
                          defaults=True, nullable=False, path="x")
    with pytest.raises(crd.SchemaError, match="does not know"):
        crd.to_structural({"type": "string", "format": "uuid", "oneOf": []}, {},
                          defaults=True, nullable=False, path="x")


# --- defaults ---------------------------------------------------------------------------------


def test_crd_defaults_are_the_model_defaults() -> None:
    stored = stored_after_defaults(MINIMAL)
    assert schema_errors(stored, SCHEMA, "") == []
    spec = stored["spec"]
    assert [s["weight"] for s in spec["strategy"]["steps"]] == [5, 20, 50, 100]
    assert spec["analysis"]["interval"] == "1m"
    assert spec["analysis"]["consecutiveErrorLimit"] == 4
    # What the API server stores parses to exactly what the operator assumes without it.
    assert InferenceRolloutSpec.model_validate(spec) == InferenceRolloutSpec.model_validate(
        MINIMAL["spec"])
    # And the defaults cover every defaulted field of the model: nothing is left to the operator.
    dumped = InferenceRolloutSpec.model_validate(MINIMAL["spec"]).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    assert spec == dumped


@pytest.mark.parametrize("body", [b for _, b in VALID], ids=[i for i, _ in VALID])
def test_defaulting_never_changes_the_meaning(body: dict[str, Any]) -> None:
    stored = stored_after_defaults(body)
    assert InferenceRolloutSpec.model_validate(stored["spec"]) == (
        InferenceRolloutSpec.model_validate(body["spec"]))


# --- the rules, applied -----------------------------------------------------------------------


def test_every_rule_compiles() -> None:
    for _, node in walk(SCHEMA):
        for rule in node.get("x-kubernetes-validations", []):
            for key in ("rule", "messageExpression"):
                if key in rule:
                    _ENV.compile(rule[key])


@pytest.mark.parametrize("body", [b for _, b in VALID], ids=[i for i, _ in VALID])
def test_valid_manifests_are_accepted(body: dict[str, Any]) -> None:
    _, errors = apply(body)
    assert errors == []
    InferenceRolloutSpec.model_validate(body["spec"])


@pytest.mark.parametrize(("body", "message"), [(b, m) for _, b, m in INVALID],
                         ids=[i for i, _, _ in INVALID])
def test_invalid_manifests_are_rejected_naming_the_field(
    body: dict[str, Any], message: str
) -> None:
    _, errors = apply(body)
    assert any(message in e for e in errors), f"expected {message!r} in {errors}"
    # The models agree (so `kubectl inference-rollout lint` reports it offline too).
    with pytest.raises(ValidationError):
        InferenceRolloutSpec.model_validate(body["spec"])


def test_adapters_pass_the_api_server_and_are_refused_unless_adapter_releases_are_on() -> None:
    """spec.adapters is a preview (docs/adapters.md): the API server stores a well-formed one,
    the models parse it, and the operator refuses it (Valid=False, the message saying so)
    unless it runs with --adapter-releases."""
    body = patched({"replicas": 2, "adapters": [ADAPTER, {**ADAPTER, "name": "code"}]})
    _, errors = apply(body)
    assert errors == []
    spec = InferenceRolloutSpec.model_validate(body["spec"])
    assert ADAPTERS_NOT_BUILT in validation.problems(spec, "chat")
    assert ADAPTERS_NOT_BUILT not in validation.problems(spec, "chat", adapter_releases=True)
    without = InferenceRolloutSpec.model_validate({**body["spec"], "adapters": None})
    assert validation.problems(without, "chat") == []


def test_adapters_cannot_ride_an_inference_pool() -> None:
    body = patched({"replicas": 2, "adapters": [ADAPTER]})
    body["spec"]["traffic"]["gatewayAPI"]["backendKind"] = "InferencePool"
    with pytest.raises(ValidationError) as e:
        InferenceRolloutSpec.model_validate(body["spec"])
    assert "backendKind: Service" in str(e.value)


def test_docs_example_is_valid() -> None:
    text = (REPO / "docs" / "api.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    examples = [yaml.safe_load(b) for b in blocks]
    examples = [e for e in examples if isinstance(e, dict) and e.get("kind") == KIND]
    assert examples, "docs/api.md needs a complete example manifest"
    for example in examples:
        _, errors = apply(example)
        assert errors == []
        InferenceRolloutSpec.model_validate(example["spec"])


def test_docs_name_every_field() -> None:
    text = (REPO / "docs" / "api.md").read_text()
    for path, _ in walk(SCHEMA):
        name = path.replace("[]", "").rsplit(".", 1)[-1]
        if path.startswith((".spec.", ".status.")) and name != "*":
            assert f"`{name}`" in text, f"docs/api.md does not describe {path}"


# --- the CRD and the models agree, property-based ---------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=MAX_STEPS))
def test_step_rules_agree_with_the_models(weights: list[int]) -> None:
    body = patched({"strategy.steps": [{"weight": w} for w in weights]})
    _, errors = apply(body)
    try:
        InferenceRolloutSpec.model_validate(body["spec"])
        model_ok = True
    except ValidationError:
        model_ok = False
    assert (errors == []) == model_ok, (weights, errors)


_PART = st.one_of(
    st.tuples(st.integers(0, 20_000), st.just("ms")),
    st.tuples(st.decimals(0, 30, places=3, allow_nan=False, allow_infinity=False), st.just("s")),
    st.tuples(st.decimals(0, 3, places=3, allow_nan=False, allow_infinity=False),
              st.sampled_from(["m", "h", "d"])),
    st.tuples(st.decimals(0, Decimal("0.001"), places=6, allow_nan=False, allow_infinity=False),
              st.just("d")),
)


def _number(n: Any) -> str:
    return format(Decimal(n).normalize(), "f") if n else "0"


@settings(max_examples=300, deadline=None)
@given(st.lists(_PART, min_size=1, max_size=3))
def test_interval_rule_agrees_with_the_models(parts: list[tuple[Any, str]]) -> None:
    interval = "".join(_number(n) + unit for n, unit in parts)
    try:
        seconds: float | None = parse_duration(interval)
    except DurationError:  # too long a string: the schema's maxLength rejects it too
        seconds = None
    # Float sums at exactly a bound are the models' own rounding.
    assume(seconds is None or min(abs(seconds - 5), abs(seconds - 86400)) > 1e-6)
    # Sub-millisecond parts: the CEL rule compares whole milliseconds; keep to what it is exact on.
    assume(all((Decimal(n) * {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000,
                              "d": 60_000}[u]) % 1 == 0 for n, u in parts))
    body = patched({"analysis.interval": interval})
    _, errors = apply(body)
    accepted = seconds is not None and 5 <= seconds <= 86400
    assert (errors == []) == accepted, (interval, seconds, errors)
    try:
        InferenceRolloutSpec.model_validate(body["spec"])
        model_ok = True
    except ValidationError:
        model_ok = False
    assert model_ok == accepted, (interval, seconds)


def test_go_duration_matches_go() -> None:
    assert go_duration("1h30m") == celtypes.DurationType(5400)
    assert go_duration("1.5s") == celtypes.DurationType(1, 500_000_000)
    for bad in ("1d", "5", "", ".s", "1h 30m"):
        with pytest.raises(ValueError):
            go_duration(bad)


@pytest.mark.parametrize("name", ["chat", "llama-3-chat", "a" * 35])
def test_rollout_names_that_can_name_a_deployment_are_accepted(name: str) -> None:
    assert apply(manifest(name))[1] == []


@pytest.mark.parametrize("name", ["chat.v2", "3chat", "a" * 36, "chat-"])
def test_rollout_names_that_cannot_name_a_deployment_are_rejected(name: str) -> None:
    # The API server checks only that a custom resource's name is a DNS subdomain; the revisions'
    # Deployments and Services (<name>-<hash>) need a DNS-1035 label, or every create fails.
    _, errors = apply(manifest(name))
    assert any(e.startswith(("metadata.name: Invalid value", "metadata.name: Too long"))
               for e in errors), errors
