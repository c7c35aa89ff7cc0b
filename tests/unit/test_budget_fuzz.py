"""Fuzzed numbers (inf, nan, negative, huge, wrong types) in every numeric field the budget and
the lints read, through ``lint_manifest``, the reconciler's lint step and the offline CLI: never
a traceback, and never the catch-all ``LINT-FAILED`` either (that would be a bug the catch-all
hides); every error names a field under ``spec``.  Bounded: about 400 examples, a few seconds."""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.fakes import UnexpectedKube, no_events

from inference_rollout.budget.lint import lint_manifest
from inference_rollout.cli.offline import EXIT_FINDINGS, EXIT_OK, run_budget, run_lint
from inference_rollout.reconciler import Deps

BASE: dict[str, Any] = {
    "apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
    "metadata": {"name": "fuzz", "namespace": "ns", "uid": "u", "generation": 1},
    "spec": {
        "template": {"spec": {"containers": [{
            "name": "vllm", "image": "vllm/vllm-openai",
            "args": ["--model", "google/gemma-3-27b-it", "--max-model-len", "8192"],
            "ports": [{"name": "http", "containerPort": 8000}]}]}},
        "model": {"gpuMemoryGiB": 80},
        "traffic": {"gatewayAPI": {"httpRouteRef": {"name": "r"}}},
    },
}
MODEL_FIELDS = ("gpuMemoryGiB", "parametersBillions", "layers", "kvHeads", "headDim",
                "attentionHeads", "kvLoraRank", "qkRopeHeadDim", "experts", "activeExperts")
FLAGS = ("--max-model-len", "--max-num-seqs", "--gpu-memory-utilization", "--cpu-offload-gb",
         "--kv-cache-memory-bytes", "--tensor-parallel-size", "--pipeline-parallel-size",
         "--block-size", "--max-num-batched-tokens")
EXTREMES = st.sampled_from([math.inf, -math.inf, math.nan, 0, -1, -5, 0.5, 1e308, 2**63, 2**64,
                            10**30, 1, 3, 7, 64, 131072])
NUMBERS = st.one_of(EXTREMES, st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(-(2**70), 2**70), st.booleans(), st.none(),
                    st.text(alphabet="0123456789.-eEkKinfa", max_size=6))


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    model = m["spec"]["model"]
    if draw(st.booleans()):
        model["preset"] = draw(st.sampled_from(["llama-3.1-8b", "deepseek-v3", "gpt-oss-20b",
                                                "gemma-3-27b", "llama-4-scout-17b-16e"]))
    for field in draw(st.lists(st.sampled_from(MODEL_FIELDS), max_size=4, unique=True)):
        model[field] = draw(NUMBERS)
    if draw(st.booleans()):
        model["localAttention"] = {"kind": draw(st.sampled_from(["slidingWindow", "chunked", 3])),
                                   "layers": draw(NUMBERS), "window": draw(NUMBERS)}
    container = m["spec"]["template"]["spec"]["containers"][0]
    for flag in draw(st.lists(st.sampled_from(FLAGS), max_size=4, unique=True)):
        container["args"] += [flag, str(draw(NUMBERS))]
    if draw(st.booleans()):
        container["ports"][0]["containerPort"] = draw(NUMBERS)
    if draw(st.booleans()):
        m["spec"]["replicas"] = draw(NUMBERS)
    return m


def _check(findings: Any) -> None:
    assert "LINT-FAILED" not in [f.code for f in findings], findings
    assert all(f.field.startswith("spec") for f in findings if f.is_error), findings


@settings(max_examples=250, deadline=None)
@given(manifest=manifests())
def test_lint_manifest_and_the_reconcilers_lint_never_raise(manifest: dict[str, Any]) -> None:
    _check(lint_manifest(manifest).findings)
    errors = Deps(kube=UnexpectedKube(), post_event=no_events).lint_errors(manifest, None)
    assert all(isinstance(e, str) for e in errors)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=manifests())
def test_the_offline_commands_never_raise(manifest: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(manifest))  # .inf / .nan as YAML writes them
    assert run_lint([str(path)], "json", [], out=io.StringIO()) in (EXIT_OK, EXIT_FINDINGS)
    assert run_budget(str(path), "json", out=io.StringIO()) in (EXIT_OK, EXIT_FINDINGS)
