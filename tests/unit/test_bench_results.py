"""The benchmarks' kept results and what is computed from them: the tables in docs/ are what the
kept raw files give (bench/doc_tables.py; issue 30, item 6: "generate the docs tables from them,
not by hand"), the simulation is checked against the sandbox (bench/confirm.py), and the
calibration's and the gateway split's counts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench import doc_tables

CALIBRATION = "bench/results/2026-12-07-calibration-*.json"


def test_every_table_in_docs_is_the_one_its_kept_results_give() -> None:
    assert doc_tables.main(["--check"]) == 0


def doc_with(tmp_path: Path, body: str, files: str = CALIBRATION) -> Path:
    doc = tmp_path / "doc.md"
    marker = f"<!-- table: calibration {files} -->"
    doc.write_text(f"Intro.\n\n{marker}\n{body}<!-- /table -->\n\nEnd.\n")
    return doc


def test_a_table_edited_by_hand_fails_the_check_and_a_rewrite_restores_it(tmp_path: Path) -> None:
    generated = doc_tables.KINDS["calibration"](doc_tables.files_of(CALIBRATION)) + "\n"
    # one healthy row's promoted count, less one by hand (whatever the kept files count)
    row = re.search(r"^(\| [\d.]+ \| healthy \| \d+ \| )(\d+) ", generated, re.M)
    assert row is not None
    typed = f"{row.group(1)}{int(row.group(2)) - 1} "
    edited = generated.replace(row.group(0), typed, 1)
    assert edited != generated
    doc = doc_with(tmp_path, edited)
    assert doc_tables.main(["--check", str(doc)]) == 1
    assert typed in doc.read_text()  # --check changes nothing
    assert doc_tables.main([str(doc)]) == 0
    text = doc.read_text()
    assert generated in text and text.startswith("Intro.") and text.endswith("End.\n")
    assert doc_tables.main(["--check", str(doc)]) == 0


def test_a_marker_whose_files_are_gone_is_an_error_not_a_pass(tmp_path: Path) -> None:
    doc = doc_with(tmp_path, "| stale |\n", files="bench/results/no-such-run-*.json")
    with pytest.raises(FileNotFoundError, match="no-such-run"):
        doc_tables.main(["--check", str(doc)])


def test_the_peers_table_pools_kept_runs_and_states_the_load(tmp_path: Path) -> None:
    def run(loads: list[float], outcome: str, wall: float) -> dict:
        rows = [{"controller": c, "scenario": "good", "run": 0, "outcome": outcome,
                 "released_at": 1_796_000_000.0 + wall, "done_at": 1_796_000_000.0 + 2 * wall,
                 "pods_created": 1, "cpu_s": 0.5}
                for c in ("inference-rollout", "flagger", "argo-rollouts")]
        return {"operator_commit": "0123456789abcdef", "flagger": "v1.36.1",
                "argo_rollouts": "v1.10.1", "argo_gatewayapi_plugin": "v0.15.0",
                "machine": {"cpus": 2}, "loadavg_1m_at_runs": loads, "rows": rows,
                "settings": {"interval_s": 10, "steps": [5, 20, 50], "rate": 10.0,
                             "replicas": 1, "gpus": 1, "progress_deadline_s": 60}}
    (tmp_path / "bench").mkdir()
    for i, (loads, wall) in enumerate((([1.5, 2.0], 40.0), ([3.25], 50.0))):
        kept = run(loads, "promoted", wall)
        (tmp_path / "bench" / f"peers-{i}.json").write_text(json.dumps(kept))
    lines = doc_tables.KINDS["peers"](doc_tables.files_of("bench/peers-*.json", tmp_path))
    head, _, table = lines.partition("\n\n")
    assert "Operator 0123456789" in head and "6 lane runs" in head
    assert "load average (1 min) at each run's start 1.5–3.2 on 2 cores" in head
    assert "| good | outcomes | 2 promoted | 2 promoted | 2 promoted |" in table
    assert "| 45 (40, 50) |" in table  # the wall times of both files, pooled


def test_the_calibration_table_times_a_late_breakage_from_the_break() -> None:
    from bench import calibration
    rows = [calibration.Outcome(0, "late", "r1", "rolled back", 90.0, 80.0, 60, 6, broke_at=72.5),
            calibration.Outcome(1, "late", "r2", "rolled back", 95.0, 83.0, 60, 9, broke_at=75.0),
            calibration.Outcome(2, "late", "r3", "promoted", 99.0, None, 80, 30, broke_at=70.0)]
    line = calibration.table(rows).splitlines()[-1]
    assert line.startswith("| - | late | 3 | 1 (") and "| 9 / 30 |" in line
    # nearest-rank medians (the lower of two): 80 − 72.5 and 83 − 75
    assert line.endswith("| 80 s / 83 s | 7.5 s / 8.0 s |")


def test_a_checkpoint_keeps_finished_releases_and_counts_no_answers_it_has_not_seen(
        tmp_path: Path) -> None:
    """A run cut short (a long 0.2 req/s run, a session's end) keeps every release it finished:
    the checkpoint's outcomes count, its answers not yet counted do not enter the medians."""
    from bench import calibration
    uncounted = calibration.NOT_COUNTED
    rows = [calibration.Outcome(0, "healthy", "r1", "promoted", 300.0, None, 40, 2),
            calibration.Outcome(1, "healthy", "r2", "promoted", 310.0, None, uncounted,
                                uncounted),
            calibration.Outcome(0, "gross", "r3", "rolled back", 40.0, 40.0, uncounted,
                                uncounted)]
    healthy, gross = calibration.table(rows).splitlines()[2:]
    assert healthy.startswith("| - | healthy | 2 | 2 (") and "| 2 / 2 |" in healthy
    assert gross.startswith("| - | gross | 1 | 0 (") and "| - | 40 s / 40 s |" in gross

    run = SimpleNamespace(info={"namespace": "ns", "args": {"rate": 4.0}}, elapsed=lambda: 12.5)
    path = tmp_path / "run.json"
    calibration._save(str(path), run, rows, partial=True)
    kept = json.loads(path.read_text())
    assert kept["partial"] is True and len(kept["releases"]) == 3
    assert not (tmp_path / "run.json.tmp").exists()
    assert "| 0.2 | gross | 1 |" in calibration.report([str(path)])


def test_the_sandbox_is_checked_against_the_simulation_and_a_disagreement_is_named() -> None:
    from bench import confirm
    sim = [{"rule": "Sequential", "kind": "errors", "share": 0.005, "releases": 1000,
            "rolled_back": 100, "promoted": 900}]  # 10 % false rollbacks simulated
    real = [{"scenario": "healthy", "outcome": "promoted", "rate": 0.2}] * 61
    row = confirm.table(sim, real).splitlines()[2]
    assert "| 100/1000 (10.0 %) | 0/61 at 0.2 | 0/61: 0–6 % | **not consistent** |" in row
    sim[0]["rolled_back"] = 0
    row = confirm.table(sim, real).splitlines()[2]
    assert "**consistent**" in row and f"≈ {confirm.needed(0.01)} clean releases" in row
    assert confirm.needed(0.01) > 300  # 0 of n shows "≤ 1 %" at 95 % only past a few hundred
    from bench.calibration import wilson
    for n in range(1, 400):  # 0 of n holds a simulated 0 %, whatever the rounding
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0
    many = [{"scenario": "healthy", "outcome": "promoted", "rate": 2.0}] * 400
    assert "| yes (≤ 1.0 %) |" in confirm.table(sim, many).splitlines()[2]


def test_the_split_benchmark_counts_the_longest_run_without_a_canary_answer() -> None:
    import sys
    sys.path.insert(0, str(doc_tables.BENCH))
    from gateway_split import longest_gap
    assert longest_gap(["stable"] * 19 + ["canary"] + ["stable"] * 25, "canary") == 25
    assert longest_gap(["canary", "canary"], "canary") == 0
    assert longest_gap([], "canary") == 0
