"""The offline ``lint`` and ``budget`` commands on real files: output, JSON keys, exit codes."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from inference_rollout.cli.offline import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNREADABLE,
    add_offline_commands,
    main,
    run_budget,
    run_lint,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "budget"
GOOD = EXAMPLES / "llama-3.1-8b-h100.yaml"
LONG_CONTEXT = EXAMPLES / "llama-3.1-70b-long-context.yaml"
PRINCIPLES = EXAMPLES / "llama-2-7b-principles-example.yaml"
AWQ = EXAMPLES / "llama-3.1-8b-awq.yaml"
SPECULATIVE = EXAMPLES / "speculative-large-batch.yaml"
BUDGET_KEYS = {"weightsGiB", "kvBytesPerToken", "kvPoolGiB", "poolTokens", "fullLengthSequences",
               "fullContextKvGiB", "findings"}


def lint(*paths: Path | str, output: str = "table", stable: tuple[Path, ...] = ()) -> tuple[
        int, str]:
    out = io.StringIO()
    code = run_lint([str(p) for p in paths], output, [str(s) for s in stable], out=out)
    return code, out.getvalue()


def budget(path: Path | str, output: str = "table") -> tuple[int, str]:
    out = io.StringIO()
    return run_budget(str(path), output, out=out), out.getvalue()


@pytest.mark.parametrize(
    ("example", "exit_code", "codes"),
    [
        (GOOD, EXIT_OK, []),
        (PRINCIPLES, EXIT_OK, ["P2-PREEMPTION", "P2-HEADROOM"]),
        (LONG_CONTEXT, EXIT_FINDINGS, ["P2-KV-POOL"]),
        (SPECULATIVE, EXIT_OK, ["P1-LATENCY-BATCH", "P7-SPEC-BATCH", "P2-DRAFT-UNCOUNTED"]),
        (AWQ, EXIT_OK, []),  # without the stable release there is nothing to compare
    ],
)
def test_lint_the_examples(example: Path, exit_code: int, codes: list[str]) -> None:
    code, text = lint(example, output="json")
    report = json.loads(text)
    assert code == exit_code
    assert [f["code"] for f in report["rollouts"][0]["findings"]] == codes
    assert report["errors"] == (1 if exit_code else 0)


def test_lint_against_the_stable_release_catches_a_quantization_change() -> None:
    code, text = lint(AWQ, stable=(GOOD,))
    assert code == EXIT_FINDINGS
    assert "P11-QUANT-GATE" in text and "spec.evaluation" in text


def test_lint_table_names_rollout_field_and_fix() -> None:
    code, text = lint(LONG_CONTEXT)
    assert code == EXIT_FINDINGS
    assert "serving/llama-70b" in text
    assert "ERROR    P2-KV-POOL  spec.template.spec.containers[0].args[--max-model-len]" in text
    assert "lower --max-model-len to at most" in text
    assert "1 error(s), 0 warning(s), 0 info in 1 rollout(s)" in text


def test_multi_document_files_skip_other_kinds(tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n"
                    + GOOD.read_text() + "---\n" + LONG_CONTEXT.read_text())
    code, text = lint(path, output="json")
    names = [r["name"] for r in json.loads(text)["rollouts"]]
    assert (code, names) == (EXIT_FINDINGS, ["llama-chat", "llama-70b"])


def test_a_kubectl_list_is_read(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                    "items": [yaml.safe_load(GOOD.read_text())]}))
    assert lint(path)[0] == EXIT_OK


@pytest.mark.parametrize(
    "content",
    ["key: [unclosed", "apiVersion: v1\nkind: ConfigMap\n", ""],
)
def test_unreadable_or_empty_input_exits_2(tmp_path: Path, content: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert lint(path)[0] == EXIT_UNREADABLE
    assert budget(path)[0] == EXIT_UNREADABLE
    assert "error:" in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    assert lint(tmp_path / "nope.yaml")[0] == EXIT_UNREADABLE


def test_budget_json_has_the_documented_keys() -> None:
    code, text = budget(PRINCIPLES, output="json")
    report = json.loads(text)
    assert code == EXIT_OK
    assert set(report) >= BUDGET_KEYS
    assert report["kvBytesPerToken"] == 524_288
    assert report["fullContextKvGiB"] == 64.0
    assert report["poolTokens"] == 45_440 and report["fullLengthSequences"] == 11
    assert report["weightsGiB"] == pytest.approx(12.551, abs=0.001)
    assert {f["code"] for f in report["findings"]} == {"P2-PREEMPTION", "P2-HEADROOM"}
    assert set(report["findings"][0]) == {"code", "severity", "field", "message"}


def test_budget_error_exits_1_and_shows_only_budget_findings() -> None:
    code, text = budget(LONG_CONTEXT)
    assert code == EXIT_FINDINGS
    assert "KV pool" in text and "P2-KV-POOL" in text
    spec_code, spec_text = budget(SPECULATIVE)
    assert spec_code == EXIT_OK and "P7-SPEC-BATCH" not in spec_text


def test_budget_without_a_model_exits_1_with_nulls(tmp_path: Path) -> None:
    path = tmp_path / "unknown.yaml"
    path.write_text(GOOD.read_text().replace("meta-llama/Llama-3.1-8B-Instruct", "acme/model")
                    .replace("  model: {preset: llama-3.1-8b}\n", ""))
    code, text = budget(path, output="json")
    report = json.loads(text)
    assert code == EXIT_FINDINGS
    assert report["weightsGiB"] is None and report["poolTokens"] is None
    assert [f["code"] for f in report["findings"]] == ["P2-NO-MODEL"]


def test_budget_json_is_a_list_for_several_rollouts(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(GOOD.read_text() + "---\n" + PRINCIPLES.read_text())
    code, text = budget(path, output="json")
    assert code == EXIT_OK and [r["name"] for r in json.loads(text)] == ["llama-chat",
                                                                         "llama2-chat"]


def test_commands_register_on_the_plugins_parser() -> None:
    parser = argparse.ArgumentParser()
    add_offline_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["lint", "-f", "a.yaml", "-f", "b.yaml", "-o", "json",
                              "--stable-from", "c.yaml"])
    assert (args.filenames, args.output, args.stable_from) == (["a.yaml", "b.yaml"], "json",
                                                                ["c.yaml"])
    assert parser.parse_args(["budget", "-f", "a.yaml"]).output == "table"
    assert callable(args.func)


def test_main_runs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "-f", str(GOOD)]) == EXIT_OK
    assert "headroom" in capsys.readouterr().out


def test_gemma3_example_fits_only_with_the_hybrid_kv_cache_manager(tmp_path: Path) -> None:
    example = EXAMPLES / "gemma-3-27b-131k.yaml"
    code, out = budget(example, "json")
    report = json.loads(out)
    assert code == EXIT_OK and round(report["sequenceKvGiB"], 2) == 13.66
    assert [f["code"] for f in report["findings"]] == ["P2-PREEMPTION", "P2-HEADROOM"]
    off = tmp_path / "off.yaml"
    off.write_text(example.read_text().replace('"4"]', '"4", --disable-hybrid-kv-cache-manager]'))
    code, out = budget(off, "json")
    assert code == EXIT_FINDINGS and json.loads(out)["findings"][0]["code"] == "P2-KV-POOL"


def test_the_lora_example_prints_what_docs_budget_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/budget.md, "LoRA adapters": the example's whole output, as the doc quotes it."""
    example = EXAMPLES / "llama-3.1-8b-lora.yaml"
    assert main(["lint", "-f", str(example)]) == EXIT_OK
    out = capsys.readouterr().out
    doc = (EXAMPLES.parents[1] / "docs" / "budget.md").read_text()
    shown = "examples/budget/llama-3.1-8b-lora.yaml"
    quoted = doc.split(f"$ kubectl inference-rollout lint -f {shown}\n", 1)[1].split("```")[0]
    assert out.replace(str(example), shown) == quoted
