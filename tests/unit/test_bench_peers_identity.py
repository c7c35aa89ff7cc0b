"""bench/peers/identity.py: a controller's own client certificate (signed by the sandbox CA, in
the audited group) and the audit log's count of its requests."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import yaml
from bench.peers.identity import AUDITED_GROUP, kubeconfig_for, requests_by_user


def event(user: str, received: str) -> str:
    return json.dumps({"kind": "Event", "stage": "ResponseComplete", "verb": "get",
                       "user": {"username": user}, "requestReceivedTimestamp": received})


def test_requests_are_counted_by_user_within_the_window_rotated_file_included(
        tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        event("bench-flagger", "2026-12-03T18:00:00.500000Z"),
        event("bench-argo-rollouts", "2026-12-03T18:00:01Z"),
        event("bench-flagger", "2026-12-03T18:00:09Z"),  # after the window
        "not json",
    ]) + "\n")
    (tmp_path / "audit-2026-12-03T17-59-00.000.log").write_text(
        event("bench-flagger", "2026-12-03T18:00:00.100000Z") + "\n")
    start = 1796320800.0  # 2026-12-03T18:00:00Z
    counts = requests_by_user(str(log), start, start + 5)
    assert counts == {"bench-flagger": 2, "bench-argo-rollouts": 1}


def test_kubeconfig_carries_a_certificate_of_its_own_in_the_audited_group(
        tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(pki / "ca.key"),
                    "-out", str(pki / "ca.crt"), "-days", "1", "-subj", "/CN=test-ca"],
                   check=True, capture_output=True)
    admin = tmp_path / "kubeconfig"
    admin.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "admin", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "admin"}}]}))
    path = kubeconfig_for(tmp_path, str(admin), "bench-flagger")
    cfg = yaml.safe_load(path.read_text())
    assert [u["name"] for u in cfg["users"]] == ["bench-flagger"]
    assert cfg["contexts"][0]["context"]["user"] == "bench-flagger"
    assert cfg["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    pem = base64.b64decode(cfg["users"][0]["user"]["client-certificate-data"])
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253"],
                             input=pem, check=True, capture_output=True).stdout.decode()
    assert "CN=bench-flagger" in subject and f"O={AUDITED_GROUP}" in subject
    assert "O=system:masters" in subject
    subprocess.run(["openssl", "verify", "-CAfile", str(pki / "ca.crt"),
                    str(tmp_path / "bench-peers" / "bench-flagger.crt")],
                   check=True, capture_output=True)
