"""End-to-end fixtures: the sandbox (started by `make test`), the CRD, the operator as a process.

Given/When/Then helpers live in :mod:`tests.e2e.scenario`; each test gets a fresh namespace.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from irsandbox.harness import Cluster, OperatorProcess, sandbox_env

from .scenario import fresh_namespace


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
    yield from fresh_namespace(cluster, "e2e")
