"""Who made which API-server request: each controller of the side-by-side run gets a client
certificate of its own, and the API server's audit log counts their requests.

``apiserver_request_total`` has no per-client label, so the count comes from the sandbox's audit log
(``sandbox/up.sh``: the metadata of the requests of group ``bench:audited``, and of one
namespace's ServiceAccounts, only).  The certificates are signed by the sandbox CA
(``$IR_STATE/pki``), subject ``/O=system:masters/O=bench:audited/CN=<user>``: the rights of the
sandbox admin, an identity of their own.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path

import yaml

AUDITED_GROUP = "bench:audited"


def kubeconfig_for(state: Path, admin_kubeconfig: str, user: str) -> Path:
    """A kubeconfig for ``user`` next to the admin's (its server and CA), with a client
    certificate of its own (made once, ``$IR_STATE/bench-peers/<user>.*``)."""
    out = state / "bench-peers"
    out.mkdir(parents=True, exist_ok=True)
    key, crt, path = out / f"{user}.key", out / f"{user}.crt", out / f"{user}.kubeconfig"
    if not crt.exists():
        pki = state / "pki"
        csr = out / f"{user}.csr"
        subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                        "-subj", f"/O=system:masters/O={AUDITED_GROUP}/CN={user}",
                        "-out", str(csr)], check=True, capture_output=True)
        ext = out / f"{user}.ext"
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                       "extendedKeyUsage=clientAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
                        "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30",
                        "-sha256", "-extfile", str(ext), "-out", str(crt)],
                       check=True, capture_output=True)
        csr.unlink()
        ext.unlink()
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    admin["users"] = [{"name": user, "user": {
        "client-certificate-data": base64.b64encode(crt.read_bytes()).decode(),
        "client-key-data": base64.b64encode(key.read_bytes()).decode()}}]
    for c in admin["contexts"]:
        c["context"]["user"] = user
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


def requests_by_user(audit_log: str, start: float, end: float) -> Counter[str]:
    """Requests (ResponseComplete events) received between ``start`` and ``end`` (epoch s), by
    user name.  A watch counts once, when it ends."""
    counts: Counter[str] = Counter()
    for p in (Path(audit_log), *sorted(Path(audit_log).parent.glob("audit-*.log"))):
        if not p.exists():
            continue
        with p.open() as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                received = e.get("requestReceivedTimestamp")
                if not received:
                    continue
                at = datetime.fromisoformat(received.replace("Z", "+00:00")).timestamp()
                if start <= at <= end:
                    counts[e.get("user", {}).get("username", "")] += 1
    return counts
