"""Two operator replicas under leader election on a bare control plane
(:mod:`irsandbox.control_plane`), for the integration test and ``bench/failover.py``.

The story of one failover round: a release holds a manual step; the leader is SIGKILLed; at that
instant the user asks to ``promote``.  The round ends when the server shows the request consumed
(only a reconcile clears it), which is the new leader's first reconcile of that rollout.  The
killed replica is started again as the new standby (as Kubernetes restarts a container), so
rounds can follow one another.  No controller manager runs: a :class:`Kubelet` thread writes every
Deployment's status as Ready.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from .common import free_port, wait_for
from .control_plane import ControlPlane
from .harness import OperatorProcess
from .manifests import container, inference_rollout

LEASE = "inference-rollout"
ROLLOUTS = "/apis/rollouts.inference.dev/v1alpha1"
#: Manual steps: each promote advances exactly one, so a skipped or repeated step shows.
STEPS = [*({"weight": w, "manual": True} for w in range(5, 100, 5)), {"weight": 100}]


def rollout(name: str, image: str) -> dict[str, Any]:
    return inference_rollout(
        name, replicas=1, containers=[container(image=f"vllm/vllm-openai:{image}")],
        traffic={"gatewayAPI": {"parentRefs": [{"name": "gw"}]}},
        strategy={"steps": STEPS, "abortScaleDownDelay": "1h", "scaleDownDelay": "1h"})


def holder_replica(client: httpx.Client, namespace: str) -> str | None:
    """The replica (``replica-a``, not its incarnation) named in the Lease, if any."""
    r = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}")
    holder = (r.json().get("spec") or {}).get("holderIdentity") if r.status_code == 200 else None
    return str(holder).split(".")[0] if holder else None


class Replica(OperatorProcess):
    """``inference-rollout operator --leader-elect`` as user ``identity`` of the control plane."""

    def __init__(self, cp: ControlPlane, identity: str, namespace: str, logs: Path,
                 timing: tuple[float, float, float] | None = None) -> None:
        extra = ["--leader-elect", "--leader-election-namespace", namespace,
                 "--leader-election-identity", identity, "--kubeconfig",
                 str(cp.kubeconfig(identity))]
        if timing is not None:
            for flag, value in zip(("--lease-duration", "--renew-deadline", "--retry-period"),
                                   timing, strict=True):
                extra += [flag, str(value)]
        super().__init__({}, log_name=identity, namespaces=[namespace],
                         metrics_port=free_port(), liveness_port=free_port(),
                         service_proxy=False, extra_args=tuple(extra),
                         unset_env=("KUBECONFIG",))
        self.identity = self.current_identity = identity
        self.log_path = logs / f"{identity}.log"

    def restart(self) -> None:
        """Start again as a new candidate (``<identity>.<n>`` in the Lease, as a new pod would
        be): the same name would resume the dead process's Lease at once, and hide the
        failover."""
        self.incarnation = getattr(self, "incarnation", 0) + 1
        self.current_identity = f"{self.identity}.{self.incarnation}"
        args = list(self.extra_args)
        args[args.index("--leader-election-identity") + 1] = self.current_identity
        self.extra_args = tuple(args)
        self.metrics_port, self.liveness_port = free_port(), free_port()
        self.start()


class Kubelet(threading.Thread):
    """Marks every Deployment of ``namespace`` Ready, every 0.2 s, until stopped."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True)
        self.client, self.namespace = cp.client(), namespace
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            with contextlib.suppress(httpx.HTTPError, KeyError):
                items = self.client.get(
                    f"/apis/apps/v1/namespaces/{self.namespace}/deployments").json()["items"]
                for d in items:
                    n = int(d["spec"].get("replicas", 0))
                    if (d.get("status") or {}).get("readyReplicas") == n:
                        continue
                    self.client.patch(
                        f"/apis/apps/v1/namespaces/{self.namespace}/deployments/"
                        f"{d['metadata']['name']}/status",
                        json={"status": {"replicas": n, "readyReplicas": n,
                                         "availableReplicas": n, "updatedReplicas": n}},
                        headers={"Content-Type": "application/merge-patch+json"})

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.client.close()


@dataclass
class Round:
    killed: str
    successor: str
    #: SIGKILL to the successor's name in the Lease, and to its first reconcile (the request
    #: consumed), seconds.
    to_lease: float
    to_first_reconcile: float
    step_before: int
    step_after: int


class TwoReplicas:
    """The control plane's namespace ``namespace`` with two replicas, a kubelet and a rollout."""

    def __init__(self, cp: ControlPlane, namespace: str, logs: Path,
                 timing: tuple[float, float, float] | None = None) -> None:
        self.cp, self.ns, self.name = cp, namespace, "chat"
        self.client = cp.client()
        self.replicas = {i: Replica(cp, i, namespace, logs, timing)
                         for i in ("replica-a", "replica-b")}
        self.kubelet = Kubelet(cp, namespace)
        self.image = 1

    # --- reading -------------------------------------------------------------------------------

    def holder(self) -> str | None:
        return holder_replica(self.client, self.ns)

    def status(self) -> dict[str, Any]:
        path = f"{ROLLOUTS}/namespaces/{self.ns}/inferencerollouts/{self.name}"
        out: dict[str, Any] = self.client.get(path).json().get("status") or {}
        return out

    def wait_status(self, ok: Any, timeout: float, what: str) -> dict[str, Any]:
        return wait_for(lambda: (lambda s: s if ok(s) else None)(self.status()), timeout, what,
                        interval=0.05, tolerate=(httpx.HTTPError,))

    # --- acting --------------------------------------------------------------------------------

    def start(self) -> None:
        """Namespace and rollout, replica-a leading, replica-b standing by, a release holding
        its first manual step."""
        self.client.post("/api/v1/namespaces", json={"metadata": {"name": self.ns}})
        self.kubelet.start()
        self.replicas["replica-a"].start()
        wait_for(lambda: self.holder() == "replica-a", 30, "replica-a holds the Lease")
        self.replicas["replica-b"].start()
        self.client.post(f"{ROLLOUTS}/namespaces/{self.ns}/inferencerollouts",
                         json=rollout(self.name, "v1"))
        self.wait_status(lambda s: s.get("phase") == "Healthy", 60, "v1 Healthy")
        self.release()

    def release(self) -> None:
        """A new template, held at its first step (5 %)."""
        self.image += 1
        self.client.patch(f"{ROLLOUTS}/namespaces/{self.ns}/inferencerollouts/{self.name}",
                          json={"spec": rollout(self.name, f"v{self.image}")["spec"]},
                          headers={"Content-Type": "application/merge-patch+json"})
        self.wait_status(lambda s: s.get("currentStep") == 0 and s.get("canaryWeight") == 5
                         and s.get("observedGeneration") == self.image, 60,
                         f"v{self.image} at its first step")

    def promote(self) -> None:
        self.client.patch(
            f"{ROLLOUTS}/namespaces/{self.ns}/inferencerollouts/{self.name}/status",
            json={"status": {"requests": {"promote": True}}},
            headers={"Content-Type": "application/merge-patch+json"})

    def kill_leader(self) -> Round:
        """SIGKILL the leader, ask to promote at once, time the takeover, restart the killed
        replica as the standby."""
        if self.status().get("currentStep") == len(STEPS) - 2:
            self.release()  # the next promote would finish the release: start a new one
        leader = self.holder()
        assert leader in self.replicas, f"no replica holds the Lease ({leader})"
        other = next(i for i in self.replicas if i != leader)
        step_before = int(self.status()["currentStep"])
        self.replicas[leader].kill()
        t0 = time.monotonic()
        self.promote()
        wait_for(lambda: self.holder() == other, 60, f"{other} takes the Lease", interval=0.05,
                 tolerate=(httpx.HTTPError,))
        to_lease = time.monotonic() - t0
        after = self.wait_status(lambda s: not (s.get("requests") or {}).get("promote"), 60,
                                 "the promote request consumed")
        to_first = time.monotonic() - t0
        self.replicas[leader].restart()
        return Round(leader, other, round(to_lease, 3), round(to_first, 3), step_before,
                     int(after["currentStep"]))

    def stop(self) -> None:
        for r in self.replicas.values():
            r.stop()
        self.kubelet.stop()
        self.client.close()


def writes(cp: ControlPlane, namespace: str) -> Iterator[tuple[datetime, str, str]]:
    """Each write the audit log holds in ``namespace``: (time, user, "verb resource")."""
    for e in cp.audit():
        ref = e.get("objectRef") or {}
        if ref.get("namespace") != namespace or e.get("stage") != "ResponseComplete":
            continue
        when = datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00"))
        what = f"{e['verb']} {ref.get('resource')}" + (
            f"/{ref['subresource']}" if ref.get("subresource") else "")
        yield when, e["user"]["username"], what
