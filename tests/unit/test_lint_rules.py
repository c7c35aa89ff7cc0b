"""The release lints, one rule at a time, on ReleaseFacts (no manifest parsing involved)."""

from __future__ import annotations

from typing import Any

import pytest

from inference_rollout.budget.args import parse_vllm_args
from inference_rollout.budget.facts import MetricFact, ReleaseFacts
from inference_rollout.budget.findings import Severity
from inference_rollout.budget.lint import lint_release
from inference_rollout.budget.precision import precision_of
from inference_rollout.budget.presets import get_preset

GOOD_ARGS = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "32",
             "--max-model-len", "8192")
WATCHED = (MetricFact("error-rate", "error-rate", None),)


def facts(args: tuple[str, ...] = GOOD_ARGS, **changes: Any) -> ReleaseFacts:
    base: dict[str, Any] = {"container_args": args, "gpu_memory_gib": 80.0,
                               "gpu_product": "NVIDIA-H100-80GB-HBM3", "metrics": WATCHED,
                               "slo_present": True}
    return ReleaseFacts(**{**base, **changes})


def codes(f: ReleaseFacts) -> list[str]:
    return [finding.code for finding in lint_release(f).findings]


def test_a_good_latency_release_is_clean() -> None:
    result = lint_release(facts())
    assert result.findings == ()
    assert result.budget is not None and result.budget.model.name == "llama-3.1-8b"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # Principle 1: latency wants small batches and chunked prefill
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "64", "--max-model-len", "4096")},
         ["P1-LATENCY-BATCH"]),
        ({"args": (*GOOD_ARGS, "--no-enable-chunked-prefill")}, ["P1-LATENCY-CHUNKED-PREFILL"]),
        ({"args": (*GOOD_ARGS, "--enable-chunked-prefill")}, []),
        ({"args": GOOD_ARGS, "profile": "throughput"}, []),
        # Principle 7: speculative decoding only at small batches
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "16", "--max-model-len", "8192",
                                   "--speculative-config", '{"method": "ngram"}')}, []),
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "64", "--max-model-len", "4096",
                                   "--speculative-config", '{"method": "ngram"}'),
          "profile": "throughput"}, ["P7-THROUGHPUT-SPEC"]),
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "48", "--max-model-len", "4096",
                                   "--speculative-config", '{"method": "ngram"}')},
         ["P1-LATENCY-BATCH", "P7-SPEC-BATCH"]),
        # the seed: ≤ 16 golden, ~32 break-even (no finding), > 64 a net loss (a stronger one)
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "32", "--max-model-len", "4096",
                                   "--speculative-config", '{"method": "ngram"}')}, []),
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "64", "--max-model-len", "4096",
                                   "--speculative-config", '{"method": "ngram"}')},
         ["P1-LATENCY-BATCH", "P7-SPEC-BATCH"]),
        ({"args": (*GOOD_ARGS[:2], "--max-num-seqs", "65", "--max-model-len", "4096",
                                   "--speculative-config", '{"method": "ngram"}')},
         ["P1-LATENCY-BATCH", "P7-SPEC-NET-LOSS"]),
        # Principle 9: the analysis must watch latency and errors
        ({"slo_present": False}, ["P9-NO-LATENCY-METRIC"]),
        ({"slo_present": False, "metrics": (*WATCHED, MetricFact("ttft", "ttft-p99", None))}, []),
        ({"slo_present": False, "metrics": (*WATCHED, MetricFact(
            "ttft", None, "histogram_quantile(0.99, vllm:time_to_first_token_seconds_bucket)"),
        )}, []),
        ({"metrics": ()}, ["P9-NO-ERROR-METRIC"]),
        ({"metrics": (MetricFact("fails", None, 'sum(rate(http_requests_total{status="5xx"}[1m]))'),
                      )}, []),
    ],
)
def test_rules(changes: dict[str, Any], expected: list[str]) -> None:
    args = changes.pop("args", GOOD_ARGS)
    assert codes(facts(args, **changes)) == expected


def test_unset_max_num_seqs_in_a_latency_profile_names_the_default() -> None:
    findings = lint_release(facts((*GOOD_ARGS[:2], "--max-model-len", "8192"))).findings
    batch = next(f for f in findings if f.code == "P1-LATENCY-BATCH")
    assert "1024" in batch.message and "not set" in batch.message
    assert batch.field == "spec.template.spec.containers[0].args[--max-num-seqs]"


def test_fields_are_qualified_with_the_container_path() -> None:
    f = facts((*GOOD_ARGS[:2], "--max-num-seqs", "64", "--max-model-len", "4096"),
              container_path="spec.template.spec.containers[1]")
    (batch,) = lint_release(f).findings
    assert batch.field == "spec.template.spec.containers[1].args[--max-num-seqs]"
    assert batch.severity is Severity.WARNING


AWQ = ("--model", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "--max-num-seqs", "32",
       "--max-model-len", "8192")


@pytest.mark.parametrize(
    ("release", "stable", "changes", "gated"),
    [
        (AWQ, GOOD_ARGS, {}, False),
        (AWQ, GOOD_ARGS, {"evaluation_present": True}, True),
        (AWQ, GOOD_ARGS, {"metrics": (*WATCHED, MetricFact("conversion", None, "sum(x)"))}, True),
        ((*GOOD_ARGS, "--kv-cache-dtype", "fp8"), GOOD_ARGS, {}, False),
        ((*GOOD_ARGS, "--kv-cache-dtype", "fp8"), (*GOOD_ARGS, "--kv-cache-dtype", "fp8_e4m3"), {},
         True),
        (GOOD_ARGS, GOOD_ARGS, {}, True),
        ((*GOOD_ARGS, "-q", "gptq_marlin"), (*GOOD_ARGS, "-q", "gptq"), {}, True),  # a kernel
        (AWQ, None, {}, True),  # the stable release is unknown: nothing to compare
        # issue 14: auto on a bf16 model is bfloat16; going back to more bytes loses nothing
        ((*GOOD_ARGS, "--kv-cache-dtype", "bfloat16"), GOOD_ARGS, {}, True),
        (GOOD_ARGS, AWQ, {}, True),  # de-quantizing AWQ → bf16
        (GOOD_ARGS, (*GOOD_ARGS, "--kv-cache-dtype", "fp8"), {}, True),
        ((*GOOD_ARGS, "-q", "gptq"), AWQ, {}, False),  # another 4-bit method: still a change
        # a sh -c wrapper on the stable side is read through (one argv rule, issue 12)
        (AWQ, ("sh", "-c", "exec vllm serve meta-llama/Llama-3.1-8B-Instruct"), {}, False),
        (AWQ, ("--max-num-seqs", "x"), {}, True),
    ],
)
def test_quantization_change_needs_a_business_gate(
        release: tuple[str, ...], stable: tuple[str, ...] | None, changes: dict[str, object],
        gated: bool) -> None:
    f = facts(release, stable_container_args=stable, **changes)
    result = lint_release(f)
    assert ("P11-QUANT-GATE" not in [x.code for x in result.findings]) is gated
    assert result.has_errors is not gated


def test_precision_signature() -> None:
    assert str(precision_of(parse_vllm_args(GOOD_ARGS))) == "unquantized/16-bit"
    assert str(precision_of(parse_vllm_args(AWQ))) == "awq@0.52/16-bit"
    assert str(precision_of(parse_vllm_args(["-q", "fp8", "--kv-cache-dtype", "fp8"]))) == (
        "fp8@1.00/fp8_e4m3")
    bf16 = parse_vllm_args([*GOOD_ARGS, "--kv-cache-dtype", "bfloat16"])
    assert precision_of(bf16) == precision_of(parse_vllm_args(GOOD_ARGS))
    assert str(precision_of(parse_vllm_args(GOOD_ARGS), get_preset("deepseek-v3"))) == (
        "fp8@1.00/16-bit")


def test_budget_errors_block_the_release() -> None:
    f = facts(("--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-num-seqs", "16",
               "--max-model-len", "8192"))
    result = lint_release(f)
    assert result.has_errors
    (weights,) = [x for x in result.findings if x.code == "P2-WEIGHTS"]
    assert weights.field == "spec.template.spec.containers[0].args[--tensor-parallel-size]"


def test_invalid_args_are_an_error_on_the_flag() -> None:
    result = lint_release(facts(("--model", "m", "--max-num-seqs", "lots")))
    (invalid,) = result.findings
    assert invalid.code == "ARGS-INVALID" and invalid.is_error
    assert invalid.field == "spec.template.spec.containers[0].args[--max-num-seqs]"
    assert result.budget is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"args": ("--model", "acme/secret-model", "--max-num-seqs", "8")}, ["P2-NO-MODEL"]),
        ({"gpu_memory_gib": None, "gpu_product": None}, ["P2-NO-GPU"]),
        ({"gpu_memory_gib": None, "gpu_product": "Acme-X"}, ["P2-NO-GPU"]),
        ({"model": get_preset("qwen2.5-7b")}, ["P2-MODEL-MISMATCH"]),
        ({"args": ("--model", "deepseek-ai/DeepSeek-R1", "-tp", "8", "--max-num-seqs", "16",
                   "--max-model-len", "8192"), "model": get_preset("deepseek-v3"),
          "gpu_memory_gib": 141.0}, []),  # the same architecture under another name
    ],
)
def test_budget_inputs(changes: dict[str, Any], expected: list[str]) -> None:
    args = changes.pop("args", GOOD_ARGS)
    result = lint_release(facts(args, **changes))
    assert [f.code for f in result.findings] == expected
    assert (result.budget is None) == bool({"P2-NO-MODEL", "P2-NO-GPU"} & set(expected))
