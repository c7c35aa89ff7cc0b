"""docs/budget.md's table of hand-computed budgets for the 2025-2026 presets matches what
``kubectl inference-rollout budget -o json`` computes for the same deployment."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_rollout.budget.presets import PRESETS
from inference_rollout.cli.offline import run_budget

DOC = Path(__file__).resolve().parents[2] / "docs" / "budget.md"
ROW = re.compile(r"^\| `([a-z0-9.-]+)` \| (\d+) × (\d+) \| ([\d,]+) × (\d+) \| (.+) \|$")
COLUMNS = ("weightsGiB", "temporariesGiB", "kvBytesPerTokenPerGpu", "sequenceKvGiB", "poolTokens",
           "fullLengthSequences")


def table() -> list[tuple[str, int, int, int, int, list[float]]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("<!-- preset-budgets -->")[1]
    rows = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            name, tp, gib, length, seqs, numbers = match.groups()
            values = [float(v.replace(",", "")) for v in numbers.split(" | ")]
            rows.append((name, int(tp), int(gib), int(length.replace(",", "")), int(seqs),
                         values))
    return rows


def budget(name: str, tp: int, gib: int, length: int, seqs: int, tmp_path: Path) -> Any:
    manifest = {
        "apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
        "metadata": {"name": name.replace(".", "-")},
        "spec": {
            "template": {"spec": {"containers": [{
                "name": "vllm", "image": "vllm/vllm-openai",
                "args": ["--model", PRESETS[name].hf_repo, "-tp", str(tp),
                         "--max-model-len", str(length), "--max-num-seqs", str(seqs)],
                "ports": [{"name": "http", "containerPort": 8000}]}]}},
            "model": {"preset": name, "gpuMemoryGiB": gib},
            "traffic": {"gatewayAPI": {"httpRouteRef": {"name": "r"}}},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    out = io.StringIO()
    run_budget(str(path), "json", out=out)
    return json.loads(out.getvalue())


def test_every_new_preset_has_a_row() -> None:
    names = {row[0] for row in table()}
    new = {"qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3",
           "deepseek-r1", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-4b", "gemma-3-12b",
           "gemma-3-27b", "llama-4-scout-17b-16e", "llama-4-maverick-17b-128e"}
    assert new <= names <= set(PRESETS)


@pytest.mark.parametrize("row", table(), ids=lambda row: row[0])
def test_table_matches_the_budget(row: tuple[str, int, int, int, int, list[float]],
                                  tmp_path: Path) -> None:
    name, tp, gib, length, seqs, expected = row
    report = budget(name, tp, gib, length, seqs, tmp_path)
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    actual = [report[key] for key in COLUMNS]
    for key, want, got in zip(COLUMNS, expected, actual, strict=True):
        assert got == pytest.approx(want, abs=0.006), f"{name} {key}: table {want}, budget {got}"
