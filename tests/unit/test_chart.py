"""The Helm chart's static parts, without helm: the CRD copy, Chart.yaml, values vs. schema.

Rendering (RBAC rules, modes, securityContext) needs the helm binary and is tested in
tests/sandbox/test_delivery_chart.py, which runs after sandbox/build.sh has built it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "inference-rollout"
CRD_NAME = "rollouts.inference.dev_inferencerollouts.yaml"


def test_chart_crd_is_the_generated_crd_byte_for_byte() -> None:
    top, copy = ROOT / "crds" / CRD_NAME, CHART / "crds" / CRD_NAME
    assert copy.read_bytes() == top.read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {top.relative_to(ROOT)}: after `make crd`, run "
        f"`cp {top.relative_to(ROOT)} {copy.relative_to(ROOT)}`")
    assert [p.name for p in (CHART / "crds").iterdir()] == [CRD_NAME]


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "inference-rollout"
    assert chart["type"] == "application"
    pyproject = (ROOT / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    assert version and chart["appVersion"] == version.group(1), "appVersion follows the package"


def _schema_walk(values: Any, schema: dict[str, Any], path: str, problems: list[str],
                 defs: dict[str, Any]) -> None:
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if isinstance(values, dict) and schema.get("type") == "object":
        props = schema.get("properties", {})
        for key, value in values.items():
            if key in props:
                _schema_walk(value, props[key], f"{path}.{key}", problems, defs)
            elif schema.get("additionalProperties") is False:
                problems.append(f"{path}.{key}: in values.yaml but not in values.schema.json")
        for key in schema.get("required", []):
            if key not in values:
                problems.append(f"{path}.{key}: required by the schema, missing in values.yaml")
    if "enum" in schema and values not in schema["enum"]:
        problems.append(f"{path}: default {values!r} not in {schema['enum']}")


def test_every_default_value_is_described_by_the_schema() -> None:
    # helm validates values against the schema itself (tested with the binary in the sandbox
    # tier); this catches a key added to values.yaml and forgotten in the schema, without helm.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    problems: list[str] = []
    _schema_walk(values, schema, "values", problems, schema.get("definitions", {}))
    assert not problems, "\n".join(problems)
    assert values["watch"] == {"mode": "cluster", "namespaces": []}
    assert values["prometheus"]["bearerTokenSecret"] == "", "no Secret access by default"
    assert values["metrics"]["serviceMonitor"]["enabled"] is False


def test_rbac_rules_template_has_no_wildcards() -> None:
    # The rendered rules are checked in the sandbox tier; this keeps a "*" out of the source.
    text = "\n".join((CHART / "templates" / n).read_text()
                     for n in ("_rbac_rules.tpl", "rbac.yaml"))
    assert '"*"' not in text and "'*'" not in text and "[*]" not in text


def test_tenancy_is_secure_by_default_and_its_flags_are_the_operators() -> None:
    """The chart's tenancy values default to the secure side (no address, queries confined), and
    every flag the template can emit for them is one the operator's command line accepts, with
    the value type it expects.  (Rendering with helm: tests/sandbox/test_delivery_chart.py.)"""
    from inference_rollout.__main__ import _parser

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["tenancy"] == {"prometheusAllow": [], "allowAnyPrometheus": False,
                                 "confineQueries": True}
    template = (CHART / "templates" / "deployment.yaml").read_text()
    assert "range .Values.tenancy.prometheusAllow" in template
    assert "if .Values.tenancy.allowAnyPrometheus" in template
    assert "if not .Values.tenancy.confineQueries" in template
    args = _parser().parse_args([
        "operator", "-A", "--prometheus-allow", "http://prometheus.monitoring:9090",
        "--prometheus-allow", "https://thanos.example.com/tenant-a"])
    assert args.prometheus_allow == ["http://prometheus.monitoring:9090",
                                     "https://thanos.example.com/tenant-a"]
    assert args.confine_queries is True and args.prometheus_allow_any is False
    opted_out = _parser().parse_args(["operator", "-A", "--prometheus-allow-any",
                                      "--no-confine-queries"])
    assert opted_out.prometheus_allow_any is True and opted_out.confine_queries is False
    schema = json.loads((CHART / "values.schema.json").read_text())
    pattern = schema["properties"]["tenancy"]["properties"]["prometheusAllow"]["items"]["pattern"]
    from inference_rollout.api.spec import PROMETHEUS_ADDRESS_PATTERN
    assert pattern == PROMETHEUS_ADDRESS_PATTERN, "the chart accepts what the CRD accepts"
