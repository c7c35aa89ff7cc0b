"""A bare Kubernetes control plane for the integration tier and the failover benchmark: etcd and
kube-apiserver (the sandbox's cached binaries), nothing else, on 127.0.0.1 and free ports, in a
temporary directory.

Why not the sandbox: the tests here need a real API server's semantics (resourceVersion
preconditions, the CRD's schema and CEL rules, Leases) and nothing that schedules or runs pods,
and they must not share objects with anyone.  No controller manager runs, so a Deployment's status
is whatever a test writes into it, and nothing is garbage-collected.

Users are static tokens (``--token-auth-file``), all in ``system:masters``: one admin for the test
and one per operator replica, so the audit log (``audit.log``, metadata level, writes only) says
which replica wrote what.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from .common import REPO, cache_dir, free_port, versions

USERS = ("admin", "replica-a", "replica-b")
#: What the operator reads and writes besides core kinds: its CRD and Gateway API's HTTPRoute.
CRDS = [REPO / "crds" / "rollouts.inference.dev_inferencerollouts.yaml",
        cache_dir() / "crds" / f"gateway-api-{versions()['GATEWAY_API_VERSION']}"
        / "gateway.networking.k8s.io_httproutes.yaml"]
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Request", "verbs": ["patch", "update"],  # the statuses written, in order
               "resources": [{"group": "rollouts.inference.dev",
                              "resources": ["inferencerollouts/status"]}]},
              {"level": "Metadata",
               "verbs": ["create", "update", "patch", "delete"]},
              {"level": "None"}],
}


def binary(name: str) -> str:
    version_key = "ETCD_VERSION" if name == "etcd" else "KUBERNETES_VERSION"
    path = cache_dir() / "bin" / f"{name}-{versions()[version_key]}"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: build it with `bash sandbox/build.sh`")
    return str(path)


@dataclass
class ControlPlane:
    workdir: Path
    url: str = ""
    commands: dict[str, list[str]] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def token(self, user: str) -> str:
        return f"token-{user}"

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig file for ``user`` (written once)."""
        path = self.workdir / f"{user}.kubeconfig"
        if not path.exists():
            path.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": self.url,
                                                       "insecure-skip-tls-verify": True}}],
                "users": [{"name": user, "user": {"token": self.token(user)}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": user}}]}))
        return path

    def client(self, user: str = "admin") -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=False, timeout=15,
                            headers={"Authorization": f"Bearer {self.token(user)}"})

    def audit(self) -> list[dict[str, Any]]:
        """The audit log's events (writes only), oldest first."""
        path = self.workdir / "audit.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def apply_crds(self, *files: Path) -> None:
        with self.client() as c:
            names = []
            for f in files:
                for doc in yaml.safe_load_all(f.read_text()):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    r = c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                               json=doc)
                    if r.status_code not in (201, 409):
                        raise RuntimeError(f"CRD {doc['metadata']['name']}: {r.text}")
                    names.append(doc)
            for doc in names:
                name = doc["metadata"]["name"]
                _wait(lambda n=name: _established(c, n), 30, f"CRD {name} Established")
                # Established comes before the storage serves: wait for a LIST to answer.
                served = next(v["name"] for v in doc["spec"]["versions"] if v.get("served"))
                path = f"/apis/{doc['spec']['group']}/{served}/{doc['spec']['names']['plural']}"
                _wait(lambda p=path: c.get(p).status_code == 200, 30, f"LIST {path}")

    def launch(self, name: str) -> None:
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                self.commands[name], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 120) -> None:
        with self.client() as c:
            def ready() -> bool:
                for p in self.processes.values():
                    if p.poll() is not None:
                        raise RuntimeError(f"{p.args[0]} exited: see {self.workdir}")
                return c.get("/readyz").status_code == 200
            _wait(ready, timeout, "kube-apiserver /readyz")

    def restart(self, name: str, down_seconds: float = 0.0) -> None:
        """SIGKILL ``name`` (etcd or kube-apiserver), start it again after ``down_seconds``, and
        return once the API server is ready (the chaos run's outages)."""
        self.processes[name].kill()
        self.processes[name].wait()
        time.sleep(down_seconds)
        self.launch(name)
        self.wait_ready()

    def stop(self) -> None:
        for p in reversed(list(self.processes.values())):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _established(c: httpx.Client, name: str) -> bool:
    r = c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conds = r.json().get("status", {}).get("conditions") or []
    return any(x["type"] == "Established" and x["status"] == "True" for x in conds)


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout}s")


def start(workdir: Path, crds: list[Path] = CRDS) -> ControlPlane:
    """Start etcd and kube-apiserver, install ``crds``; return once they serve (10-30 s)."""
    cp = ControlPlane(workdir)
    (workdir / "tokens.csv").write_text("".join(
        f"{cp.token(u)},{u},{u},system:masters\n" for u in USERS))
    (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", str(workdir / "sa.key")], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(workdir / "sa.key"), "-pubout", "-out",
                    str(workdir / "sa.pub")], check=True, capture_output=True)
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{client_port}"
    cp.commands["etcd"] = [binary("etcd"), "--name", "it", "--data-dir", str(workdir / "etcd"),
             "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
             "--initial-cluster", f"it=http://127.0.0.1:{peer_port}",
             "--unsafe-no-fsync", "--log-level", "warn"]
    cp.commands["kube-apiserver"] = [binary("kube-apiserver"), "--etcd-servers", etcd_url,
             "--bind-address", "127.0.0.1", "--secure-port", str(api_port),
             "--cert-dir", str(workdir / "certs"),
             "--token-auth-file", str(workdir / "tokens.csv"),
             "--authorization-mode", "RBAC",
             "--service-account-key-file", str(workdir / "sa.pub"),
             "--service-account-signing-key-file", str(workdir / "sa.key"),
             "--service-account-issuer", "https://kubernetes.default.svc",
             "--service-cluster-ip-range", "10.96.0.0/16",
             "--audit-policy-file", str(workdir / "audit-policy.yaml"),
             "--audit-log-path", str(workdir / "audit.log"),
             "--audit-log-mode", "blocking",
             "--profiling=false", "--v=0"]
    cp.url = f"https://127.0.0.1:{api_port}"
    try:
        for name in cp.commands:
            cp.launch(name)
        cp.wait_ready()
        cp.apply_crds(*crds)
    except BaseException:
        cp.stop()
        raise
    return cp
