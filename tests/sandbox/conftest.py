"""Sandbox fixtures: the local cluster built from real parts (sandbox/up.sh), a kubernetes
``ApiClient`` for it, and a fresh namespace per test.

``sandbox`` (session scope) uses the running sandbox if its API server answers; otherwise it runs
``sandbox/up.sh`` (which builds missing binaries first). The sandbox is left running at the end of
the session (the next run starts at once, and other sessions on the same machine may be using it);
set ``IR_SANDBOX_TEARDOWN=1`` to stop it with ``sandbox/down.sh`` when this session started it. A
sandbox that was already up is never torn down.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT = float(os.environ.get("IR_SANDBOX_UP_TIMEOUT", "3600"))  # a cold build is long


def state_dir() -> Path:
    return Path(os.environ.get("IR_STATE") or REPO / ".sandbox")


def read_env(path: Path) -> dict[str, str]:
    """The ``export K=V`` lines of ``.sandbox/env`` (``$PATH`` references expanded)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        key, _, value = line[len("export ") :].partition("=")
        value = " ".join(shlex.split(value))
        env[key] = value.replace("${PATH}", os.environ.get("PATH", ""))
    return env


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (REPO / "sandbox" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def api_ready(env: dict[str, str]) -> bool:
    """Does the sandbox's API server answer with the admin kubeconfig?"""
    kubeconfig = env.get("KUBECONFIG")
    if not kubeconfig or not Path(kubeconfig).exists():
        return False
    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception:
        return False
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:
        return False
    finally:
        api.close()


@dataclass
class Sandbox:
    env: dict[str, str]
    api: client.ApiClient
    started_here: bool

    @property
    def kubeconfig(self) -> str:
        return self.env["KUBECONFIG"]


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    env_file = state_dir() / "env"
    env = read_env(env_file) if env_file.exists() else {}
    started = False
    if not api_ready(env):
        proc = subprocess.run(
            ["bash", str(REPO / "sandbox" / "up.sh")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=UP_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"sandbox/up.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        started = True
        env = read_env(env_file)
    api = config.new_client_from_config(config_file=env["KUBECONFIG"])
    yield Sandbox(env=env, api=api, started_here=started)
    api.close()
    if started and os.environ.get("IR_SANDBOX_TEARDOWN") == "1":
        subprocess.run(
            ["bash", str(REPO / "sandbox" / "down.sh")],
            cwd=REPO,
            check=False,
            capture_output=True,
            timeout=120,
        )


@pytest.fixture(scope="session")
def api_client(sandbox: Sandbox) -> client.ApiClient:
    return sandbox.api


@pytest.fixture()
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (its default ServiceAccount exists), deleted after the test."""
    core = client.CoreV1Api(api_client)
    base = request.node.name.lower().replace("_", "-")
    base = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name, labels={"inference-rollout.dev/test": "sandbox"}
            )
        )
    )
    deadline = time.monotonic() + 30
    while True:  # pods are rejected until kube-controller-manager made the ServiceAccount
        try:
            core.read_namespaced_service_account("default", name)
            break
        except ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as e:
        if e.status != 404:
            raise
