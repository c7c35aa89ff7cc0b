"""What every peer controller of the side-by-side run shares: its pinned version
(sandbox/versions.env, what ``sandbox/build.sh peers`` built), its cached binary, its Go module
in the module cache (the CRDs come from there), and the harness' controller process with the
peer's command line and a client identity of its own (:mod:`identity`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import common  # noqa: F401  (the operator export and sandbox/ on the path)
import yaml

from irsandbox.cluster import Cluster, ignore_status
from irsandbox.common import free_port
from irsandbox.harness import OperatorProcess


def pinned(name: str) -> str:
    """A version pinned in sandbox/versions.env (what ``sandbox/build.sh peers`` built)."""
    env = Path(__file__).resolve().parents[2] / "sandbox" / "versions.env"
    for line in env.read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit(f"{env} pins no {name}")


def binary(name: str, version: str) -> Path:
    """``$IR_CACHE/bin/<name>-<version>``, built by ``bash sandbox/build.sh peers``."""
    cache = Path(os.environ.get("IR_CACHE") or Path.home() / ".cache" / "inference-rollout")
    path = cache / "bin" / f"{name}-{version}"
    if not path.exists():
        raise SystemExit(f"{path} is missing: build it with `bash sandbox/build.sh peers`")
    return path


def module_dir(module: str) -> Path:
    """``module`` (``path@version``) in the Go module cache (downloaded by the build)."""
    out = subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True,
                         env={**os.environ, "GOTOOLCHAIN": "local"}).stdout.strip()
    path = Path(out) / module
    if not path.is_dir():
        raise SystemExit(f"{path} is missing: `bash sandbox/build.sh peers` downloads it")
    return path


def install_crds(cluster: Cluster, *files: Path) -> None:
    """Create each CustomResourceDefinition of ``files`` unless it exists, then wait until each
    is Established."""
    for f in files:
        for body in yaml.safe_load_all(f.read_text()):
            if not body or body.get("kind") != "CustomResourceDefinition":
                continue
            name = body["metadata"]["name"]
            if ignore_status(404, cluster.ext.read_custom_resource_definition, name) is None:
                cluster.ext.create_custom_resource_definition(body)
            cluster.wait_crd_established(name)


class PeerProcess(OperatorProcess):
    """A peer's binary against the sandbox API server, watching ``namespace`` only: the
    harness' controller process (log under ``.sandbox/logs``, ready on ``/healthz`` of
    ``liveness_port``, stopped with SIGTERM), its kubeconfig ``env["KUBECONFIG"]``."""

    def __init__(self, env: dict[str, str], name: str, namespace: str) -> None:
        super().__init__(env, log_name=f"{name}-{namespace}", namespaces=[namespace],
                         metrics_port=free_port(), liveness_port=free_port(),
                         service_proxy=False)
        self.namespace = namespace

    def process_env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.env["KUBECONFIG"]}

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
