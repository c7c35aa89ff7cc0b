"""Lints of a release against the deployment principles, with stable codes (docs/budget.md).

A finding's severity decides what happens to the release: an ``error`` keeps it from receiving
traffic (``Valid=False``), a ``warning`` or ``info`` is reported and the release proceeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from inference_rollout.api.spec import InferenceRolloutSpec

from .args import VllmArgs, VllmArgsError, parse_vllm_args
from .facts import ManifestError, ReleaseFacts, facts_from_manifest
from .findings import Finding, Severity, arg_field, qualify_field
from .gpu import GpuSpec
from .lora import RUNTIME_UPDATING_ENV, lora_findings
from .memory import MemoryBudget, compute_budget
from .precision import quantization_gate
from .presets import PRESETS, ModelArchitecture, preset_for_model
from .vllm_defaults import effective_max_num_seqs, max_num_seqs_default_note

# Principles 1 and 7: interactive traffic wants batches of 16-32.  Speculative decoding is at its
# best up to 16 concurrent sequences, breaks even around 32 and is a net loss beyond 64.
MAX_INTERACTIVE_BATCH = 32
SPECULATION_GOLDEN_BATCH = 16
SPECULATION_BREAK_EVEN_BATCH = 32
SPECULATION_LOSS_BATCH = 64
LATENCY_TEMPLATES = frozenset({"ttft-p99", "itl-p99", "e2e-p99"})
ERROR_TEMPLATES = frozenset({"error-rate", "gateway-error-rate"})
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
    elif speculative and max_num_seqs > SPECULATION_LOSS_BATCH:
        findings.append(Finding(
            "P7-SPEC-NET-LOSS", Severity.WARNING, arg_field("--max-num-seqs"),
            f"speculative decoding with --max-num-seqs {max_num_seqs}{unset_note} is a net loss: "
            f"beyond {SPECULATION_LOSS_BATCH} concurrent sequences the target model is "
            "compute-bound and every rejected draft token is wasted work, so full batches run "
            f"slower than without speculation. Set --max-num-seqs ≤ {SPECULATION_GOLDEN_BATCH} "
            "(where speculation gains most) or remove --speculative-config",
        ))
    elif speculative and max_num_seqs > SPECULATION_BREAK_EVEN_BATCH:
        findings.append(Finding(
            "P7-SPEC-BATCH", Severity.WARNING, arg_field("--max-num-seqs"),
            f"speculative decoding with --max-num-seqs {max_num_seqs}{unset_note}: it gains most "
            f"up to {SPECULATION_GOLDEN_BATCH} concurrent sequences, breaks even around "
            f"{SPECULATION_BREAK_EVEN_BATCH} and loses beyond {SPECULATION_LOSS_BATCH}, so full "
            f"batches gain nothing. Set --max-num-seqs ≤ {SPECULATION_BREAK_EVEN_BATCH} or "
            "remove --speculative-config",
        ))
    return findings


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


def _shape(model: ModelArchitecture) -> tuple[object, ...]:
    """What makes two presets different models for the budget (DeepSeek-V3 and R1 are one)."""
    return (model.parameters, model.layers, model.kv_heads, model.head_dim, model.max_context,
            model.kv_lora_rank, model.local_layers, model.local_window)


def _budget(facts: ReleaseFacts, args: VllmArgs, gpu: GpuSpec | None,
            model: ModelArchitecture | None) -> tuple[MemoryBudget | None, list[Finding]]:
    notes = []
    named = preset_for_model(args.model)
    if facts.model is not None and facts.model.hf_repo and named \
            and _shape(named) != _shape(facts.model):
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
    budget = compute_budget(model, args, gpu,
                            allow_long_max_model_len=_allows_long_context(facts))
    return budget, [*budget.findings, *notes]


# --- entry points ---------------------------------------------------------------------------------


def lint_release(facts: ReleaseFacts) -> LintResult:
    """Every lint of one release, the memory budget included."""
    analysis = _analysis_coverage(facts)
    try:
        args = parse_vllm_args(facts.container_args)
    except VllmArgsError as e:
        return LintResult((_args_finding(facts, e), *analysis), None)
    gpu = _gpu(facts)
    model = facts.model or preset_for_model(args.model)
    budget, budget_findings = _budget(facts, args, gpu, model)
    findings = [*_tensor_parallel(args, model), *budget_findings,
                *lora_findings(args.lora, args.lora_flags, _env_true(facts, RUNTIME_UPDATING_ENV),
                               facts.adapters, args.model),
                *_batch_and_speculation(facts, args, gpu, model),
                *quantization_gate(facts, args, model), *analysis]
    qualified = [Finding(f.code, f.severity, qualify_field(f.field, facts.container_path),
                         f.message) for f in findings]
    qualified.sort(key=lambda f: _SEVERITY_ORDER[f.severity])  # stable: errors first
    return LintResult(tuple(qualified), budget)


def _args_finding(facts: ReleaseFacts, error: VllmArgsError) -> Finding:
    """A flag vLLM would reject is an error, unless its value is a ``$(VAR)`` whose value exists
    only at run time (``valueFrom``, ``envFrom``): then the lints cannot tell, and say so."""
    field = qualify_field(arg_field(error.flag), facts.container_path)
    unknown = [name for name in facts.unresolved_variables
               if any(ref in str(error) for ref in (f"$({name})", f"${name}", f"${{{name}}}"))]
    if unknown:
        return Finding("ARGS-UNRESOLVED", Severity.INFO, field, (
            f"{error.flag} uses the variable {unknown[0]}, whose value exists only at run time (a "
            "Secret, ConfigMap, the downward API or the image's env): the budget and the lints "
            "that need the command line are skipped. Give it a literal value in env to have "
            "them checked"))
    undefined = " ($(VAR) not defined in the container's env is passed as written)" \
        if "$(" in str(error) else ""
    return Finding("ARGS-INVALID", Severity.ERROR, field,
                   f"{error}: vLLM would refuse this command line{undefined}")


def _tensor_parallel(args: VllmArgs, model: ModelArchitecture | None) -> list[Finding]:
    """vLLM shards attention heads across tensor-parallel ranks and refuses to start when the
    size does not divide them (KV heads: TP divides them, or they divide TP and are replicated);
    MLA has no KV heads to shard."""
    tp = args.tensor_parallel_size
    if model is None or tp == 1:
        return []
    problems = []
    if model.attention_heads and model.attention_heads % tp:
        problems.append(f"{model.attention_heads} attention heads")
    if not model.uses_mla and (model.kv_heads % tp if tp < model.kv_heads else tp % model.kv_heads):
        problems.append(f"{model.kv_heads} KV heads")
    if not problems:
        return []
    sizes = [n for n in (1, 2, 4, 8, 16) if n <= (model.attention_heads or model.kv_heads)
             and not (model.attention_heads or 0) % n
             and (model.uses_mla or not (model.kv_heads % n if n < model.kv_heads
                                         else n % model.kv_heads))]
    return [Finding(
        "P2-TP-HEADS", Severity.ERROR, arg_field("--tensor-parallel-size"),
        f"--tensor-parallel-size {tp} does not divide {model.name}'s {' and '.join(problems)}, "
        f"so vLLM refuses to start. Use one of {', '.join(map(str, sizes))}",
    )]


def _env_true(facts: ReleaseFacts, name: str) -> bool:
    """A vLLM boolean env var (``envs.py``: "1" or "true", any case)."""
    return (facts.container_env.get(name) or "").strip().lower() in ("1", "true")


def _allows_long_context(facts: ReleaseFacts) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN as vLLM reads it: ``bool(int(value))``."""
    value = facts.container_env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") or "0"
    try:
        return bool(int(value))
    except ValueError:
        return False


INT64_MAX = 2**63 - 1


def _unstorable_numbers(value: object, path: str) -> list[Finding]:
    """Numbers the API server cannot store (JSON has no .inf/.nan; integers are int64)."""
    if isinstance(value, Mapping):
        items = [(f"{path}.{key}", item) for key, item in value.items()]
        return [f for where, item in items for f in _unstorable_numbers(item, where)]
    if isinstance(value, list):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        return [f for where, item in items for f in _unstorable_numbers(item, where)]
    if isinstance(value, float) and not math.isfinite(value):
        return [Finding("SPEC-INVALID", Severity.ERROR, path,
                        f"{value} is not a number the API server can store: use a finite value")]
    if isinstance(value, int) and not isinstance(value, bool) and not \
            -INT64_MAX - 1 <= value <= INT64_MAX:
        return [Finding("SPEC-INVALID", Severity.ERROR, path,
                        "the integer does not fit in 64 bits (the API server rejects it)")]
    return []


def _schema_findings(manifest: Mapping[str, Any]) -> list[Finding]:
    """What the API's own validation rejects: the operator would refuse the object too.  Strict
    types, as the CRD schema checks them: ``"50"``, ``true`` or ``50.0`` are not integers."""
    spec = manifest.get("spec") or {}
    unstorable = _unstorable_numbers(spec, "spec")
    if unstorable:
        return unstorable
    try:
        InferenceRolloutSpec.model_validate(spec, strict=True)
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
    """Lint an InferenceRollout manifest: the API schema, then :func:`lint_release`.  Never
    raises: a spec the lints cannot evaluate is an error finding (so ``Valid=False``), not a
    crashed reconcile."""
    try:
        return _lint_manifest(manifest, stable_container_args)
    except Exception as e:  # the contract: no exception escapes
        return LintResult((Finding(
            "LINT-FAILED", Severity.ERROR, "spec",
            f"the lints could not evaluate this spec ({type(e).__name__}: {e}); the release is "
            "held until they can. Please report it with the manifest"),), None)


def _lint_manifest(
    manifest: Mapping[str, Any], stable_container_args: tuple[str, ...] | None
) -> LintResult:
    schema = _schema_findings(manifest)
    try:
        facts = facts_from_manifest(manifest, stable_container_args)
    except ManifestError as e:
        # With schema errors, this is most likely one of them again: report those alone.
        unreadable = [] if schema else [Finding("SPEC-INVALID", Severity.ERROR, e.field, e.message)]
        return LintResult((*schema, *unreadable), None)
    result = lint_release(facts)
    return LintResult((*schema, *result.findings), result.budget)
