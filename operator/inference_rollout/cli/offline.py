"""``kubectl inference-rollout lint`` and ``budget``: check manifests offline, with no cluster.

Both read YAML files (``-`` is stdin; several documents per file and ``kind: List`` are fine;
documents other than InferenceRollouts are skipped) and print a table, or JSON with ``-o json``.
Exit codes: 0 clean (warnings allowed), 1 an error finding (or, for ``budget``, no budget could
be computed), 2 unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from inference_rollout.budget import (
    Finding,
    LintResult,
    ManifestError,
    MemoryBudget,
    facts_from_manifest,
    lint_manifest,
)
from inference_rollout.budget.facts import is_inference_rollout
from inference_rollout.budget.units import GIB, KIB, gib

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2
OUTPUT_FORMATS = ("table", "json")


class UnreadableInput(Exception):
    pass


@dataclass(frozen=True)
class LintedRollout:
    path: str
    name: str
    namespace: str
    result: LintResult


# --- input --------------------------------------------------------------------------------------


def _documents(path: str) -> Iterator[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        documents = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UnreadableInput(f"{path}: {e}") from None
    for document in documents:
        if isinstance(document, Mapping) and document.get("kind") == "List":
            yield from document.get("items") or []
        else:
            yield document


def _rollouts(path: str) -> list[Mapping[str, Any]]:
    return [d for d in _documents(path) if is_inference_rollout(d)]


def _key(manifest: Mapping[str, Any]) -> tuple[str, str]:
    metadata = manifest.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _stable_args(paths: Sequence[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """The vLLM command lines of the releases serving now (e.g. the manifest on the main
    branch), by namespace and name, for the quantization gate (P11)."""
    stable: dict[tuple[str, str], tuple[str, ...]] = {}
    for path in paths:
        for manifest in _rollouts(path):
            try:
                stable[_key(manifest)] = facts_from_manifest(manifest).container_args
            except ManifestError:
                continue  # an unreadable old release only means the gate cannot compare
    return stable


def _lint_files(paths: Sequence[str], stable_paths: Sequence[str]) -> list[LintedRollout]:
    stable = _stable_args(stable_paths)
    linted = []
    for path in paths:
        for manifest in _rollouts(path):
            namespace, name = _key(manifest)
            result = lint_manifest(manifest, stable.get((namespace, name)))
            linted.append(LintedRollout(path, name, namespace, result))
    if not linted:
        raise UnreadableInput(f"{', '.join(paths)}: no InferenceRollout documents found")
    return linted


# --- output -----------------------------------------------------------------------------------


def _finding_json(finding: Finding) -> dict[str, str]:
    return {"code": finding.code, "severity": str(finding.severity), "field": finding.field,
            "message": finding.message}


def _title(rollout: LintedRollout) -> str:
    name = f"{rollout.namespace}/{rollout.name}" if rollout.namespace else rollout.name
    return f"{name or '(unnamed)'}  ({rollout.path})"


def _write_findings(findings: Sequence[Finding], out: TextIO) -> None:
    if not findings:
        out.write("  no findings\n")
    for finding in findings:
        out.write(f"  {finding.severity.upper():<8} {finding.code}  {finding.field}\n")
        out.write(textwrap.fill(finding.message, width=100, initial_indent=" " * 11,
                                subsequent_indent=" " * 11, break_on_hyphens=False) + "\n")


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {severity: sum(1 for f in findings if f.severity == severity)
            for severity in ("error", "warning", "info")}


def _round_gib(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else round(gib(n_bytes), 3)


def budget_json(budget: MemoryBudget | None) -> dict[str, Any]:
    """The budget's numbers for ``-o json``: GiB values per GPU, KV bytes per token for the whole
    model (and per GPU); nulls when no budget could be computed."""
    if budget is None:
        keys = ("weightsGiB", "temporariesGiB", "kvBytesPerToken", "kvBytesPerTokenPerGpu",
                "kvPoolGiB", "poolTokens", "fullLengthSequences", "sequenceKvGiB",
                "fullContextKvGiB",
                "fullContextKvGiBTotal", "headroom", "model", "gpuMemoryGiB", "gpusPerReplica",
                "maxModelLen", "maxNumSeqs")
        return dict.fromkeys(keys)
    return {
        "model": budget.model.name,
        "gpuMemoryGiB": budget.gpu.memory_gib,
        "gpusPerReplica": budget.gpus_per_replica,
        "maxModelLen": budget.max_model_len,
        "maxNumSeqs": budget.max_num_seqs,
        "weightsGiB": _round_gib(budget.weight_bytes_per_gpu),
        "temporariesGiB": _round_gib(budget.temporary_bytes_per_gpu),
        "kvBytesPerToken": budget.kv_bytes_per_token,
        "kvBytesPerTokenPerGpu": budget.kv_bytes_per_token_per_gpu,
        "kvPoolGiB": _round_gib(budget.kv_pool_bytes_per_gpu),
        "poolTokens": budget.pool_tokens,
        "fullLengthSequences": budget.full_length_sequences,
        "sequenceKvGiB": _round_gib(budget.sequence_kv_bytes_per_gpu),
        "fullContextKvGiB": _round_gib(budget.full_context_kv_bytes_per_gpu),
        "fullContextKvGiBTotal": _round_gib(budget.full_context_kv_bytes),
        "headroom": None if budget.headroom is None else round(budget.headroom, 4),
    }


def _write_budget_table(budget: MemoryBudget, out: TextIO) -> None:
    model, gpu = budget.model, budget.gpu
    rows = [
        ("model", f"{model.name}: {model.parameters / 1e9:.2f}B parameters, {model.layers} "
                  f"layers, " + _attention(budget)),
        ("GPU", f"{gpu.product or 'GPU'}: {gpu.memory_gib:g} GiB × {budget.gpus_per_replica} "
                f"per replica, vLLM takes {budget.gpu_memory_utilization:.0%}"),
        ("weights", f"{gib(budget.weight_bytes_per_gpu):.2f} GiB per GPU"),
        ("temporaries", f"{gib(budget.temporary_bytes_per_gpu):.2f} GiB per GPU (estimate)"),
        ("KV per token", f"{budget.kv_bytes_per_token / KIB:,.1f} KiB "
                         f"({budget.kv_bytes_per_token_per_gpu / KIB:,.1f} KiB per GPU)"),
        ("KV pool", f"{gib(budget.kv_pool_bytes_per_gpu):.2f} GiB per GPU = "
                    f"{budget.pool_tokens:,} tokens"),
    ]
    if budget.max_model_len and budget.full_context_kv_bytes_per_gpu is not None:
        rows += [
            ("full-length seqs", f"{budget.full_length_sequences} of {budget.max_model_len:,} "
                                 f"tokens (--max-num-seqs {budget.max_num_seqs}), "
                                 f"{gib(budget.sequence_kv_bytes_per_gpu or 0):.2f} GiB each"),
            ("full-context KV", f"{budget.full_context_kv_bytes_per_gpu / GIB:.2f} GiB per GPU "
                                f"({budget.max_num_seqs} × {budget.max_model_len:,} tokens)"),
        ]
    if budget.headroom is not None:
        rows.append(("headroom", f"{budget.headroom:.1%} (want ≥ 20%)"))
    for label, value in rows:
        out.write(f"  {label:<18}{value}\n")


def _attention(budget: MemoryBudget) -> str:
    """How the model's layers attend and cache, for the table's model row."""
    model = budget.model
    text = (f"MLA latent {model.kv_lora_rank} + {model.qk_rope_head_dim}" if model.uses_mla
            else f"{model.kv_heads} KV heads × {model.head_dim}")
    if budget.kv.local_layers:
        window = "sliding window" if budget.kv.local_kind == "slidingWindow" else "chunks"
        text += (f"; {budget.kv.local_layers} of {budget.kv.layers} layers per GPU attend to "
                 f"{budget.kv.local_window:,}-token {window}")
    if model.experts:
        text += f"; {model.experts} experts ({model.active_experts or '?'} per token)"
    return text


def _is_budget_finding(finding: Finding) -> bool:
    """Budget findings (P2-...) and the input problems that stop the budget (ARGS-, SPEC-)."""
    return finding.code.startswith("P2-") or not finding.code.startswith("P")


# --- commands -------------------------------------------------------------------------------------


def run_lint(paths: Sequence[str], output: str = "table", stable_paths: Sequence[str] = (),
             out: TextIO | None = None) -> int:
    """``kubectl inference-rollout lint -f FILE...``: every lint of every InferenceRollout."""
    out = out or sys.stdout
    try:
        linted = _lint_files(paths, stable_paths)
    except UnreadableInput as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_UNREADABLE
    every_finding = [f for r in linted for f in r.result.findings]
    if output == "json":
        json.dump({
            "rollouts": [{"file": r.path, "name": r.name, "namespace": r.namespace or None,
                          "findings": [_finding_json(f) for f in r.result.findings]}
                         for r in linted],
            **{f"{severity}s": n for severity, n in _counts(every_finding).items()},
        }, out, indent=2)
        out.write("\n")
    else:
        for rollout in linted:
            out.write(_title(rollout) + "\n")
            _write_findings(rollout.result.findings, out)
        counts = _counts(every_finding)
        out.write(f"{counts['error']} error(s), {counts['warning']} warning(s), "
                  f"{counts['info']} info in {len(linted)} rollout(s)\n")
    return EXIT_FINDINGS if any(r.result.has_errors for r in linted) else EXIT_OK


def run_budget(path: str, output: str = "table", out: TextIO | None = None) -> int:
    """``kubectl inference-rollout budget -f FILE``: the memory budget of each InferenceRollout.

    JSON is one object for a file with one rollout, else a list of them."""
    out = out or sys.stdout
    try:
        linted = _lint_files([path], ())
    except UnreadableInput as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_UNREADABLE
    reports = []
    failed = False
    for rollout in linted:
        findings = [f for f in rollout.result.findings if _is_budget_finding(f)]
        budget = rollout.result.budget
        failed |= budget is None or any(f.is_error for f in findings)
        if output == "json":
            reports.append({"file": rollout.path, "name": rollout.name,
                            "namespace": rollout.namespace or None, **budget_json(budget),
                            "findings": [_finding_json(f) for f in findings]})
            continue
        out.write(_title(rollout) + "\n")
        if budget is not None:
            _write_budget_table(budget, out)
        _write_findings(findings, out)
    if output == "json":
        json.dump(reports[0] if len(reports) == 1 else reports, out, indent=2)
        out.write("\n")
    return EXIT_FINDINGS if failed else EXIT_OK


def add_offline_commands(subparsers: Any) -> None:
    """Register ``lint`` and ``budget`` on the plugin's argparse subparsers.  Each sets
    ``func``: call ``args.func(args)`` and exit with the int it returns."""
    lint = subparsers.add_parser(
        "lint", help="check InferenceRollout manifests against the deployment principles",
        description="Lint InferenceRollout manifests offline (no cluster): API schema, memory "
                    "budget, batch and speculative decoding, quantization gate, analysis "
                    "coverage.  Exit 1 on an error finding, 2 on unreadable input.")
    lint.add_argument("-f", "--filename", dest="filenames", action="append", required=True,
                      metavar="FILE", help="a manifest file, or - for stdin (repeatable)")
    lint.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table")
    lint.add_argument("--stable-from", dest="stable_from", action="append", default=[],
                      metavar="FILE", help="the manifests serving now (e.g. from the main "
                      "branch), to catch a quantization change without a business gate")
    lint.set_defaults(func=lambda a: run_lint(a.filenames, a.output, a.stable_from))

    budget = subparsers.add_parser(
        "budget", help="show the GPU memory budget of an InferenceRollout",
        description="Compute the vLLM memory budget offline: weights, KV cache per token, KV "
                    "pool, full-length sequences that fit, headroom.")
    budget.add_argument("-f", "--filename", required=True, metavar="FILE",
                        help="a manifest file, or - for stdin")
    budget.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table")
    budget.set_defaults(func=lambda a: run_budget(a.filename, a.output))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lint`` or ``budget`` alone (the full plugin registers them with its commands)."""
    parser = argparse.ArgumentParser(prog="kubectl-inference_rollout")
    add_offline_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
