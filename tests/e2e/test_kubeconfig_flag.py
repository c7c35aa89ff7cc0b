"""``inference-rollout operator --kubeconfig PATH`` with no ``KUBECONFIG`` in the environment and
no ``~/.kube/config``: both of the operator's clients (kopf's, which watches and runs the
daemons, and its own, which reads and writes the rollouts) must authenticate with that file.

Before the ``@kopf.on.login`` handler, kopf's default login ignored the flag and the process
stopped with "Ran out of valid credentials"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import OperatorProcess
from irsandbox.manifests import sandbox_rollout
from irsandbox.story import Release, fresh_namespace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture()
def own_namespace(cluster: Cluster) -> Iterator[str]:
    """Not ``e2e-*``: the package's operator process must not drive this rollout too."""
    yield from fresh_namespace(cluster, "kubeconfig-flag")


def test_kubeconfig_flag_alone_authenticates_kopf_and_the_operator(
        cluster: Cluster, own_namespace: str, tmp_path: Path) -> None:
    op = OperatorProcess({**cluster.env, "HOME": str(tmp_path)},  # no ~/.kube/config either
                         log_name=f"operator-{own_namespace}", namespaces=[own_namespace],
                         metrics_port=18493, liveness_port=18492,
                         extra_args=("--kubeconfig", cluster.env["KUBECONFIG"]),
                         unset_env=("KUBECONFIG",))
    op.start()
    try:
        rel = Release(cluster, op, own_namespace,
                      sandbox_rollout("flag", prometheus=cluster.env["PROMETHEUS_URL"], metrics=[]))
        rel.apply()
        st = rel.wait_healthy()  # kopf's daemon ran the reconcile, whose client wrote status
        assert st["stableRevision"]
        finalizers = cluster.rollout(own_namespace, "flag")["metadata"].get("finalizers", [])
        assert "rollouts.inference.dev/finalizer" in finalizers  # added by kopf's client
    finally:
        op.stop()
    log = op.log_path.read_text(errors="replace")
    assert "Ran out of valid credentials" not in log
    assert "Cannot authenticate" not in log
