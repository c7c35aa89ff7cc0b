"""``inference-rollout operator`` refuses a ``--kubeconfig`` it cannot read before kopf starts:
one line naming the flag, not kopf's login traceback or a silent fall back to in-cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference_rollout.__main__ import main


def test_missing_kubeconfig_file_is_refused_naming_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(SystemExit) as exc:
        main(["operator", "--namespace", "x", "--kubeconfig", str(missing)])
    assert str(exc.value.code) == (
        f"inference-rollout operator: --kubeconfig: kubeconfig {missing}: no such file")


def test_unparsable_kubeconfig_is_refused_naming_the_flag(tmp_path: Path) -> None:
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")  # no contexts, no clusters
    with pytest.raises(SystemExit) as exc:
        main(["operator", "--namespace", "x", "--kubeconfig", str(bad)])
    assert str(exc.value.code) == ("inference-rollout operator: --kubeconfig: Invalid kube-config "
                                   f"file. Expected key current-context in {bad}")
