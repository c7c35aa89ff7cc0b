"""End-to-end fixtures: the sandbox (started by `make test`), the CRD, the operator as a process,
a fresh namespace per test, and the test's story (``given``, ``when``, ``then``: see
:mod:`irsandbox.story`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import OperatorProcess
from irsandbox.story import Given, Story, Then, When


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    c = Cluster()
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


@pytest.fixture()
def story(cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> Iterator[Story]:
    s = Story(cluster, operator_process, namespace)
    yield s
    s.close()  # the load stops before the namespace goes


@pytest.fixture()
def given(story: Story) -> Given:
    return story.given


@pytest.fixture()
def when(story: Story) -> When:
    return story.when


@pytest.fixture()
def then(story: Story) -> Then:
    return story.then
