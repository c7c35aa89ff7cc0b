"""End-to-end fixtures: the sandbox (started by `make test`), the CRD, the operator as a process,
a fresh namespace per test, and the test's story (``given``, ``when``, ``then``: see
:mod:`irsandbox.story`).

The operator watches only ``$IR_E2E_PREFIX-*`` namespaces (default ``e2e``) on free ports, so two
runs on one shared sandbox (two work trees) can each set their own prefix and never drive each
other's rollouts.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import free_port
from irsandbox.harness import OperatorProcess
from irsandbox.pytest_sandbox import pytest_runtest_makereport, sandbox_parts_alive  # noqa: F401
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
    prefix = os.environ.get("IR_E2E_PREFIX", "e2e")
    # With adapter releases on (a preview, docs/adapters.md): tests/e2e/test_adapter_release.py
    # releases adapters; a rollout without adapters is carried exactly as without the flag.
    op = OperatorProcess(cluster.env, log_name=f"operator-{prefix}", namespaces=[f"{prefix}-*"],
                         metrics_port=free_port(), liveness_port=free_port(),
                         extra_args=("--adapter-releases", "--adapter-drain-seconds", "1"))
    op.start()
    yield op
    op.stop()
    # A namespace deleted just before the operator stopped keeps its rollouts' finalizers
    left = cluster.finish_deletions(f"{prefix}-")
    assert not left, f"namespaces still Terminating after release-finalizers: {left}"


@pytest.fixture(scope="session")
def new_namespace(cluster: Cluster) -> Callable[[], str]:
    """Create a namespace the e2e operator watches; returns its name."""
    def create() -> str:
        ns = f"{os.environ.get('IR_E2E_PREFIX', 'e2e')}-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(ns)
        return ns
    return create


@pytest.fixture()
def namespace(cluster: Cluster, new_namespace: Callable[[], str]) -> Iterator[str]:
    ns = new_namespace()
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
