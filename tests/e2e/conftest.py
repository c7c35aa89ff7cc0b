"""End-to-end fixtures: the sandbox (started by `make test`), the CRD, the operator as a process.

Given/When/Then helpers live in :mod:`tests.e2e.scenario`; each test gets a fresh namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from irsandbox.harness import Cluster, OperatorProcess, sandbox_env


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    c = Cluster(sandbox_env())
    c.install_crd()
    return c


@pytest.fixture(scope="package")  # gone before tests/sandbox runs its own operator (RBAC proof)
def operator_process(cluster: Cluster) -> Iterator[OperatorProcess]:
    # Only the tests' namespaces (a kopf glob): other operators on the same sandbox (the RBAC
    # proof, benchmarks) own theirs, and two operators must never drive one rollout.
    op = OperatorProcess(cluster.env, log_name="operator-e2e", namespaces=["e2e-*"])
    op.start()
    yield op
    op.stop()


@pytest.fixture()
def namespace(cluster: Cluster) -> Iterator[str]:
    ns = f"e2e-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    yield ns
    cluster.delete_namespace(ns)
