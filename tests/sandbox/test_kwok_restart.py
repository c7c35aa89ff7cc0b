"""A restarted KWOK gives no new pod the address of a running one (sandbox/build.sh
patch_kwok_mark_pod_ips).

KWOK keeps its pool of pod addresses in memory and, unpatched, marks an address in use only when it
plays a stage on the pod: after a restart (``down.sh`` then ``up.sh``, or a crash) it handed the
next new pod 10.244.0.1 while the demo's pod still held it, and that pod never served (its shim:
"Address already in use"). Two restarts make it certain on the old build: after the first, pod X
gets the pool's first address; after the second, the old build gives pod Y that address again.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from irsandbox import manifests
from irsandbox.cluster import Cluster
from irsandbox.common import REPO, pid_cmdline, wait_for
from irsandbox.podspec import LABEL_REVISION

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]


def restart_kwok(kit: Cluster) -> None:
    """Stop KWOK as a crash would, and start it again the way a newcomer does (up.sh starts what
    is not running)."""
    pid = int((kit.state / "pids" / "kwok.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: pid_cmdline(pid) == "", 10, f"kwok (pid {pid}) to exit")
    up = subprocess.run(["bash", str(REPO / "sandbox" / "up.sh")], cwd=REPO, capture_output=True,
                        text=True, timeout=240, check=False)
    assert up.returncode == 0, up.stderr[-3000:]


def addresses(kit: Cluster) -> dict[str, str]:
    """Every pod's address in the cluster, by namespace/name (pods that have one)."""
    pods = kit.core.list_pod_for_all_namespaces().items
    return {f"{p.metadata.namespace}/{p.metadata.name}": p.status.pod_ip
            for p in pods if p.status.pod_ip and not p.metadata.deletion_timestamp}


def serving_address(kit: Cluster, ns: str, revision: str) -> str:
    (key,) = kit.wait_serving(ns, f"{LABEL_REVISION}={revision}", 1)
    return addresses(kit)[key]


def test_a_restarted_kwok_gives_no_new_pod_a_running_pods_address(kit, namespace):
    restart_kwok(kit)
    kit.create(namespace, manifests.vllm_deployment("chat-x", revision="x"))
    x = serving_address(kit, namespace, "x")

    restart_kwok(kit)
    held = addresses(kit)
    kit.create(namespace, manifests.vllm_deployment("chat-y", revision="y"))
    # serving: its shim listens on its own address, which only it holds
    y = serving_address(kit, namespace, "y")
    assert y != x
    assert y not in held.values(), f"{y} is held by {[k for k, v in held.items() if v == y]}"
    assert len(set(addresses(kit).values())) == len(addresses(kit))  # no two pods share one
