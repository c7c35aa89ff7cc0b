"""Lints of a release against the deployment principles, with stable codes (docs/budget.md).

A finding's severity decides what happens to the release: an ``error`` keeps it from receiving
traffic (``Valid=False``), a ``warning`` or ``info`` is reported and the release proceeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from inference_rollout.api.spec import InferenceRolloutSpec

from .args import VllmArgs, VllmArgsError, parse_vllm_args
from .dtypes import normalized_kv_cache_dtype, weight_quantization
from .facts import ManifestError, ReleaseFacts, facts_from_manifest
from .findings import Finding, Severity, arg_field, qualify_field
from .gpu import GpuSpec
from .memory import MemoryBudget, compute_budget
from .presets import PRESETS, ModelArchitecture, preset_for_model
from .vllm_defaults import effective_max_num_seqs, max_num_seqs_default_note

# Principles 1 and 7: interactive traffic wants batches of 16-32; speculative decoding breaks
# even around 32 concurrent sequences and loses beyond.
MAX_INTERACTIVE_BATCH = 32
LATENCY_TEMPLATES = frozenset({"ttft-p99", "itl-p99", "e2e-p99"})
ERROR_TEMPLATES = frozenset({"error-rate"})
# A user's PromQL counts as watching latency / errors when it reads one of these.
LATENCY_QUERY_WORDS = ("time_to_first_token", "inter_token_latency", "time_per_output_token",
                       "e2e_request_latency", "request_latency")
ERROR_QUERY_WORDS = ("error", "5xx", 'status=~"5', "abort")
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class LintResult:
    findings: tuple[Finding, ...]
    budget: MemoryBudget | None  # None: the budget could not run (findings say why)

    @property
    def has_errors(self) -> bool:
        return any(f.is_error for f in self.findings)


# --- Principles 1 and 7: profile, batch size, speculative decoding --------------------------------


def _batch_and_speculation(facts: ReleaseFacts, args: VllmArgs, gpu: GpuSpec | None,
                           model: ModelArchitecture | None) -> list[Finding]:
    context = args.max_model_len or (model.max_context if model else None)
    max_num_seqs = effective_max_num_seqs(args, gpu, context)
    unset_note = "" if args.max_num_seqs else f" ({max_num_seqs_default_note(gpu)})"
    speculative = args.speculative is not None
    findings = []
    if facts.profile == "latency" and max_num_seqs > MAX_INTERACTIVE_BATCH:
        findings.append(Finding(
            "P1-LATENCY-BATCH", Severity.WARNING, arg_field("--max-num-seqs"),
            f"a latency profile serves with --max-num-seqs {max_num_seqs}{unset_note}: large "
            "batches raise p99 TTFT and inter-token latency. Set --max-num-seqs to 16-32, or "
            "set spec.profile: throughput if nobody waits on these requests",
        ))
    if facts.profile == "latency" and args.enable_chunked_prefill is False:
        findings.append(Finding(
            "P1-LATENCY-CHUNKED-PREFILL", Severity.WARNING, arg_field("--enable-chunked-prefill"),
            "a latency profile turns chunked prefill off: a long prompt then stalls every "
            "running stream for its whole prefill. Remove --no-enable-chunked-prefill",
        ))
    if facts.profile == "throughput" and speculative:
        findings.append(Finding(
            "P7-THROUGHPUT-SPEC", Severity.WARNING, arg_field("--speculative-config"),
            "a throughput profile runs speculative decoding: at large batches the target model "
            "is already busy and the draft only costs memory and compute. Remove "
            "--speculative-config, or serve small-batch traffic from a separate latency rollout",
        ))
    elif speculative and max_num_seqs > MAX_INTERACTIVE_BATCH:
        findings.append(Finding(
            "P7-SPEC-BATCH", Severity.WARNING, arg_field("--max-num-seqs"),
            f"speculative decoding with --max-num-seqs {max_num_seqs}{unset_note}: it pays off "
            f"up to about {MAX_INTERACTIVE_BATCH} concurrent sequences and loses beyond. Set "
            f"--max-num-seqs ≤ {MAX_INTERACTIVE_BATCH} or remove --speculative-config",
        ))
    return findings


# --- Principle 11: a precision change needs a business gate ---------------------------------------


def precision_of(args: VllmArgs) -> str:
    """Weights and KV-cache precision, comparable across releases: ``awq@0.52/auto``."""
    quantization = weight_quantization(args.quantization, args.model)
    weights = "unquantized"
    if quantization is not None:
        method = quantization.method.removesuffix("_marlin").removesuffix("_bitblas")
        weights = f"{method}@{quantization.bytes_per_weight:.2f}"
    return f"{weights}/{normalized_kv_cache_dtype(args.kv_cache_dtype)}"


def _quantization_gate(facts: ReleaseFacts, args: VllmArgs) -> list[Finding]:
    if facts.stable_container_args is None:
        return []
    try:
        stable = parse_vllm_args(facts.stable_container_args)
    except VllmArgsError:
        return []  # the stable release is serving; its args are not this release's problem
    before, after = precision_of(stable), precision_of(args)
    has_business_metric = any(m.query for m in facts.metrics)
    if before == after or facts.evaluation_present or has_business_metric:
        return []
    return [Finding(
        "P11-QUANT-GATE", Severity.ERROR, "spec.evaluation",
        f"this release changes precision (weights/KV cache) from {before} to {after} with no "
        "business check: benchmarks like MMLU rarely show what quantization costs your prompts. "
        "Add spec.evaluation (your evaluation set, run on canary and stable before traffic) or a "
        "business metric in spec.analysis.metrics (a query with minRatioToStable)",
    )]


# --- Principle 9: what the analysis watches -------------------------------------------------------


def _reads(query: str | None, words: tuple[str, ...]) -> bool:
    return query is not None and any(w in query.lower() for w in words)


def _analysis_coverage(facts: ReleaseFacts) -> list[Finding]:
    findings = []
    watches_latency = facts.slo_present or any(
        m.template in LATENCY_TEMPLATES or _reads(m.query, LATENCY_QUERY_WORDS)
        for m in facts.metrics)
    watches_errors = any(
        m.template in ERROR_TEMPLATES or _reads(m.query, ERROR_QUERY_WORDS) for m in facts.metrics)
    if not watches_latency:
        findings.append(Finding(
            "P9-NO-LATENCY-METRIC", Severity.WARNING, "spec.analysis.slo",
            "nothing in the analysis watches latency, so a canary whose p99 climbs is promoted. "
            "Set spec.analysis.slo (ttftP99, itlP99) or add a ttft-p99 / itl-p99 metric",
        ))
    if not watches_errors:
        findings.append(Finding(
            "P9-NO-ERROR-METRIC", Severity.WARNING, "spec.analysis.metrics",
            "nothing in the analysis watches the error rate. Add "
            "{name: error-rate, template: error-rate, max: 0.01}",
        ))
    return findings


# --- Principle 2: the memory budget ---------------------------------------------------------------


def _gpu(facts: ReleaseFacts) -> GpuSpec | None:
    if facts.gpu_memory_gib is None:
        return None
    return GpuSpec(facts.gpu_memory_gib, facts.gpu_product)


def _budget(facts: ReleaseFacts, args: VllmArgs, gpu: GpuSpec | None,
            model: ModelArchitecture | None) -> tuple[MemoryBudget | None, list[Finding]]:
    notes = []
    named = preset_for_model(args.model)
    if facts.model is not None and facts.model.hf_repo and named and named.name != facts.model.name:
        notes.append(Finding(
            "P2-MODEL-MISMATCH", Severity.WARNING, "spec.model.preset",
            f"spec.model.preset is {facts.model.name} but --model {args.model} is {named.name}: "
            "the budget uses the preset. Update spec.model with the model change",
        ))
    if model is None:
        notes.append(Finding(
            "P2-NO-MODEL", Severity.INFO, "spec.model",
            f"no memory budget: --model {args.model or '(unset)'} is not a known preset. Add "
            "spec.model with a preset or parametersBillions, layers, kvHeads, headDim "
            f"(presets: {', '.join(PRESETS)})",
        ))
    if gpu is None:
        unknown = f" (unknown GPU product {facts.gpu_product!r})" if facts.gpu_product else ""
        notes.append(Finding(
            "P2-NO-GPU", Severity.INFO, "spec.model.gpuMemoryGiB",
            f"no memory budget: the GPU's memory is unknown{unknown}. Set "
            "spec.model.gpuMemoryGiB, or pin the pods with a nodeSelector on "
            "nvidia.com/gpu.product",
        ))
    if model is None or gpu is None:
        return None, notes
    budget = compute_budget(model, args, gpu)
    return budget, [*budget.findings, *notes]


# --- entry points ---------------------------------------------------------------------------------


def lint_release(facts: ReleaseFacts) -> LintResult:
    """Every lint of one release, the memory budget included."""
    analysis = _analysis_coverage(facts)
    try:
        args = parse_vllm_args(facts.container_args)
    except VllmArgsError as e:
        invalid = Finding("ARGS-INVALID", Severity.ERROR,
                          qualify_field(arg_field(e.flag), facts.container_path),
                          f"{e}: vLLM would refuse this command line")
        return LintResult((invalid, *analysis), None)
    gpu = _gpu(facts)
    model = facts.model or preset_for_model(args.model)
    budget, budget_findings = _budget(facts, args, gpu, model)
    findings = [*budget_findings, *_batch_and_speculation(facts, args, gpu, model),
                *_quantization_gate(facts, args), *analysis]
    qualified = [Finding(f.code, f.severity, qualify_field(f.field, facts.container_path),
                         f.message) for f in findings]
    qualified.sort(key=lambda f: _SEVERITY_ORDER[f.severity])  # stable: errors first
    return LintResult(tuple(qualified), budget)


def _schema_findings(manifest: Mapping[str, Any]) -> list[Finding]:
    """What the API's own validation rejects: the operator would refuse the object too."""
    try:
        InferenceRolloutSpec.model_validate(manifest.get("spec") or {})
    except ValidationError as e:
        findings = []
        for error in e.errors():
            path = "spec"
            for part in error["loc"]:
                path += f"[{part}]" if isinstance(part, int) else f".{part}"
            message = str(error["msg"]).removeprefix("Value error, ")
            findings.append(Finding("SPEC-INVALID", Severity.ERROR, path, message))
        return findings
    return []


def lint_manifest(
    manifest: Mapping[str, Any], stable_container_args: tuple[str, ...] | None = None
) -> LintResult:
    """Lint an InferenceRollout manifest: the API schema, then :func:`lint_release`."""
    schema = _schema_findings(manifest)
    try:
        facts = facts_from_manifest(manifest, stable_container_args)
    except ManifestError as e:
        # With schema errors, this is most likely one of them again: report those alone.
        unreadable = [] if schema else [Finding("SPEC-INVALID", Severity.ERROR, e.field, e.message)]
        return LintResult((*schema, *unreadable), None)
    result = lint_release(facts)
    return LintResult((*schema, *result.findings), result.budget)
