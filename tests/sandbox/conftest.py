"""Sandbox fixtures: the local cluster built from real parts (sandbox/up.sh) as an
:class:`irsandbox.cluster.Cluster` (``sandbox``, also ``kit``), its kubernetes ``ApiClient``, and
a fresh namespace per test.

``sandbox`` (session scope) uses the running sandbox if its API server answers; otherwise it runs
``sandbox/up.sh`` (which builds missing binaries first). The sandbox is left running at the end of
the session (the next run starts at once, and other sessions on the same machine may be using it);
set ``IR_SANDBOX_TEARDOWN=1`` to stop it with ``sandbox/down.sh`` when this session started it. A
sandbox that was already up is never torn down.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from irsandbox.cluster import Cluster, api_answers, ignore_status
from irsandbox.common import REPO, sandbox_env, wait_for
from irsandbox.pytest_sandbox import pytest_runtest_makereport, sandbox_parts_alive  # noqa: F401

UP_TIMEOUT = float(os.environ.get("IR_SANDBOX_UP_TIMEOUT", "3600"))  # a cold build is long


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Cluster]:
    started = False
    if not api_answers(sandbox_env()):
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
    cluster = Cluster(sandbox_env())
    yield cluster
    cluster.close()
    if started and os.environ.get("IR_SANDBOX_TEARDOWN") == "1":
        subprocess.run(
            ["bash", str(REPO / "sandbox" / "down.sh")],
            cwd=REPO,
            check=False,
            capture_output=True,
            timeout=120,
        )


@pytest.fixture()
def kit(sandbox: Cluster) -> Cluster:
    """The sandbox's client, by the name the bridge and gateway tests give it."""
    return sandbox


@pytest.fixture(scope="session")
def api_client(sandbox: Cluster) -> client.ApiClient:
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
    # pods are rejected until kube-controller-manager made the ServiceAccount
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30,
             f"the default ServiceAccount in {name}", interval=0.2)
    yield name
    ignore_status(404, core.delete_namespace, name, propagation_policy="Background")
