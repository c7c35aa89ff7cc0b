"""A real etcd + kube-apiserver on loopback, for tests that need the API server's own semantics
(generations, the status subresource, CRD validation) but no nodes, controllers or gateway.

The binaries are the sandbox's (``sandbox/build.sh`` caches them as
``$IR_CACHE/bin/<name>-<version>``, versions from ``sandbox/versions.env``), and so are the
Gateway API CRDs.  Authentication is a static token in ``system:masters``; the API server makes
its own self-signed serving certificate (``--cert-dir``), so nothing here needs a CA.  Every
process this starts is stopped by :meth:`ApiServer.stop`; nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from irsandbox.common import REPO, cache_dir, free_port, versions

BUILD_HINT = ("run `bash sandbox/build.sh` (it builds etcd and kube-apiserver into "
              "$IR_CACHE/bin and downloads the Gateway API CRDs)")


def binary(name: str, version_key: str) -> Path:
    path = cache_dir() / "bin" / f"{name}-{versions()[version_key]}"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {BUILD_HINT}")
    return path


def gateway_api_crd(kind_plural: str) -> Path:
    path = (cache_dir() / "crds" / f"gateway-api-{versions()['GATEWAY_API_VERSION']}"
            / f"gateway.networking.k8s.io_{kind_plural}.yaml")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {BUILD_HINT}")
    return path


@dataclass
class ApiServer:
    url: str
    token: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=False, timeout=10,
                            headers={"Authorization": f"Bearer {self.token}"})

    def apply_manifest(self, path: Path) -> None:
        """Create every object of a YAML file (CRDs here), then wait for CRDs to be served."""
        with self.client() as c:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                assert doc["kind"] == "CustomResourceDefinition", doc["kind"]
                r = c.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=doc)
                assert r.status_code in (201, 409), r.text
                self._wait_established(c, doc["metadata"]["name"])

    def _wait_established(self, c: httpx.Client, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            conds = {x["type"]: x["status"]
                     for x in (crd.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                return
            time.sleep(0.1)
        raise TimeoutError(f"CRD {name} not established after {timeout}s")

    def stop(self) -> None:
        for p in reversed(self.processes):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)


def _wait(url: str, timeout: float, procs: list[subprocess.Popen[bytes]], log: Path,
          headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited ({p.returncode}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, verify=False, timeout=1, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s:\n"
                       f"{log.read_text(errors='replace')[-3000:]}")


def start(workdir: Path) -> ApiServer:
    """etcd and kube-apiserver with state under ``workdir``; ready to serve when returned."""
    etcd_bin = binary("etcd", "ETCD_VERSION")
    apiserver_bin = binary("kube-apiserver", "KUBERNETES_VERSION")
    token = secrets.token_hex(16)
    (workdir / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    subprocess.run(["openssl", "genrsa", "-out", str(workdir / "sa.key"), "2048"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(workdir / "sa.key"), "-pubout", "-out",
                    str(workdir / "sa.pub")], check=True, capture_output=True)
    server = ApiServer("", token, workdir)
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    etcd_log = workdir / "etcd.log"
    with open(etcd_log, "wb") as log:
        server.processes.append(subprocess.Popen([
            str(etcd_bin), "--name", "it", "--data-dir", str(workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"it=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    try:
        _wait(f"http://127.0.0.1:{client_port}/health", 30, server.processes, etcd_log)
        api_log = workdir / "kube-apiserver.log"
        with open(api_log, "wb") as log:
            server.processes.append(subprocess.Popen([
                str(apiserver_bin), "--etcd-servers", f"http://127.0.0.1:{client_port}",
                "--bind-address", "127.0.0.1", "--secure-port", str(api_port),
                "--cert-dir", str(workdir / "certs"),
                "--token-auth-file", str(workdir / "tokens.csv"),
                "--authorization-mode", "RBAC",
                "--service-account-key-file", str(workdir / "sa.pub"),
                "--service-account-signing-key-file", str(workdir / "sa.key"),
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-cluster-ip-range", "10.96.0.0/24",
                "--profiling=false", "--v=0"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        server.url = f"https://127.0.0.1:{api_port}"
        _wait(f"{server.url}/readyz", 120, server.processes, api_log,
              headers={"Authorization": f"Bearer {token}"})
    except BaseException:
        server.stop()
        raise
    return server


def install_crds(server: ApiServer) -> None:
    """The InferenceRollout CRD (this worktree's) and the Gateway API HTTPRoute CRD."""
    server.apply_manifest(REPO / "crds" / "rollouts.inference.dev_inferencerollouts.yaml")
    server.apply_manifest(gateway_api_crd("httproutes"))


def kube_configuration(server: ApiServer) -> Any:
    """A kubernetes-client Configuration for the operator's :class:`Kube`."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = server.url
    cfg.verify_ssl = False
    cfg.api_key = {"authorization": f"Bearer {server.token}"}
    return cfg
