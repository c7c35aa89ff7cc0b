"""A bounded chaos run (short version of issue 13's): many releases at once under two operator
replicas while the leader is SIGKILLed at random instants and the API server and etcd restart.

    .venv/bin/python bench/chaos.py [--rollouts 8] [--seconds 180] [--kill-every 12 25]
                                    [--seed 1] [--json .sandbox/bench/chaos.json]

Method (no sandbox: a bare control plane, :mod:`irsandbox.control_plane`; a thread plays the
kubelet): ``--rollouts`` rollouts release one new template after another (steps 20 % / 50 % /
100 % with 3 s holds, no analysis), each next release as soon as the last is Healthy.  During
``--seconds``: the Lease holder is SIGKILLed every U(kill-every) seconds (and started again, as a
kubelet would, like any replica that exited on a lost Lease); at one third of the run the
kube-apiserver is SIGKILLed and down 3 s, at two thirds etcd.  Afterwards every rollout must
finish its release within 90 s.

Checks, from the API server's audit log (every successful status write, with its body, in
order): within one generation, each rollout's written ``currentStep`` only stays or rises by one
(no step skipped, none reversed or repeated after a higher one); the replicas' successful writes
never interleave (the writer changes at most as often as the Lease's ``leaseTransitions``);
every release started is promoted.  Not covered here (they need the sandbox's Prometheus and
gateway): bad canaries and their rollbacks, a Prometheus outage, a gateway restart.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import common  # noqa: F401  (puts the operator and sandbox packages on the path)
import httpx

from irsandbox.control_plane import ControlPlane, start
from irsandbox.leadership import LEASE, ROLLOUTS, Kubelet, Replica
from irsandbox.manifests import container, inference_rollout

NS = "chaos"
STEPS = [{"weight": 20, "pause": "3s"}, {"weight": 50, "pause": "3s"}, {"weight": 100}]


def manifest(name: str, image: int) -> dict[str, Any]:
    return inference_rollout(
        name, replicas=1, containers=[container(image=f"vllm/vllm-openai:v{image}")],
        traffic={"gatewayAPI": {"parentRefs": [{"name": "gw"}]}},
        strategy={"steps": STEPS, "abortScaleDownDelay": "5s", "scaleDownDelay": "5s"})


class Run:
    def __init__(self, cp: ControlPlane, logs: Path, rollouts: int) -> None:
        self.cp, self.client = cp, cp.client()
        self.names = [f"r{i:02d}" for i in range(rollouts)]
        self.image = dict.fromkeys(self.names, 1)
        self.replicas = {i: Replica(cp, i, NS, logs) for i in ("replica-a", "replica-b")}
        self.kubelet = Kubelet(cp, NS)
        self.events: list[str] = []

    def lease(self) -> dict[str, Any]:
        r = self.client.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
        return (r.json().get("spec") or {}) if r.status_code == 200 else {}

    def note(self, what: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {what}"
        self.events.append(line)
        print(line, flush=True)

    def start(self) -> None:
        self.client.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
        self.kubelet.start()
        for r in self.replicas.values():
            r.start()
        for name in self.names:
            self.client.post(f"{ROLLOUTS}/namespaces/{NS}/inferencerollouts",
                             json=manifest(name, 1))

    def rollouts(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.client.get(
            f"{ROLLOUTS}/namespaces/{NS}/inferencerollouts").json()["items"]
        return items

    def release_finished(self) -> None:
        """A new template for every rollout whose current release is promoted."""
        for r in self.rollouts():
            st, name = r.get("status") or {}, r["metadata"]["name"]
            if st.get("phase") == "Healthy" and \
                    st.get("observedGeneration") == r["metadata"]["generation"]:
                self.image[name] += 1
                self.client.patch(f"{ROLLOUTS}/namespaces/{NS}/inferencerollouts/{name}",
                                  json={"spec": manifest(name, self.image[name])["spec"]},
                                  headers={"Content-Type": "application/merge-patch+json"})

    def supervise(self) -> None:
        """Start again any replica that exited (a lost Lease exits with 3), as a kubelet would."""
        for r in self.replicas.values():
            if not r.running():
                code = r.proc.returncode if r.proc else None
                self.note(f"{r.identity} exited ({code}): started again")
                r.restart()

    def kill_leader(self) -> bool:
        """SIGKILL the process holding the Lease; False while the holder is already dead (its
        Lease not yet expired: a failover is under way)."""
        holder = self.lease().get("holderIdentity")
        for r in self.replicas.values():
            if r.current_identity == holder and r.running():
                r.kill()
                self.note(f"SIGKILL {holder}")
                return True
        return False

    def all_promoted(self) -> bool:
        with contextlib.suppress(httpx.HTTPError, KeyError):
            return self._all_promoted()
        return False

    def _all_promoted(self) -> bool:
        return all((r.get("status") or {}).get("phase") == "Healthy"
                   and r["status"].get("observedGeneration") == r["metadata"]["generation"]
                   for r in self.rollouts())

    def stop(self) -> None:
        for r in self.replicas.values():
            r.stop()
        self.kubelet.stop()
        self.client.close()


def check(cp: ControlPlane) -> dict[str, Any]:
    """Every successful status write in order: steps, and who wrote."""
    steps: dict[tuple[str, int], list[int | None]] = defaultdict(list)
    writers: list[tuple[str, str]] = []
    for e in cp.audit():
        ref = e.get("objectRef") or {}
        if (ref.get("resource"), ref.get("subresource"), ref.get("namespace")) != \
                ("inferencerollouts", "status", NS) or e.get("stage") != "ResponseComplete":
            continue
        if (e.get("responseStatus") or {}).get("code") != 200 or \
                not e["user"]["username"].startswith("replica-"):
            continue
        status = (e.get("requestObject") or {}).get("status") or {}
        if "observedGeneration" in status:
            steps[(ref["name"], int(status["observedGeneration"]))].append(
                status.get("currentStep"))
        if not writers or writers[-1][0] != e["user"]["username"]:
            writers.append((e["user"]["username"], e["stageTimestamp"]))
    bad = []
    for (name, gen), seq in steps.items():
        numbers = [s for s in seq if s is not None]
        for a, b in itertools.pairwise(numbers):
            if b - a not in (0, 1):
                bad.append(f"{name} generation {gen}: step {a} -> {b} ({seq})")
    return {"status_writes": sum(len(s) for s in steps.values()), "generations": len(steps),
            "step_violations": bad, "writer_changes": len(writers) - 1,
            "writers": writers}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rollouts", type=int, default=8)
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--kill-every", type=float, nargs=2, default=(12.0, 25.0),
                   help="seconds between SIGKILLs (a failover takes ~10 s of it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        cp = start(Path(tmp))
        run = Run(cp, Path(tmp), args.rollouts)
        kills = 0
        try:
            run.start()
            t0 = time.monotonic()
            outages = {args.seconds / 3: "kube-apiserver", 2 * args.seconds / 3: "etcd"}
            next_kill = t0 + rng.uniform(*args.kill_every)
            while time.monotonic() - t0 < args.seconds:
                try:
                    run.supervise()
                    run.release_finished()
                    if time.monotonic() >= next_kill and run.kill_leader():
                        kills += 1
                        next_kill = time.monotonic() + rng.uniform(*args.kill_every)
                    for at, name in list(outages.items()):
                        if time.monotonic() - t0 >= at:
                            run.note(f"restart {name} (SIGKILL, 3 s down)")
                            cp.restart(name, down_seconds=3)
                            del outages[at]
                except (httpx.HTTPError, KeyError) as e:  # the API server restarting
                    run.note(f"API unavailable: {type(e).__name__} {e}")
                time.sleep(0.5)
            run.note("chaos over: every release must now finish")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not run.all_promoted():
                run.supervise()
                time.sleep(1)
            promoted = run.all_promoted()
            releases = sum(run.image.values())
            transitions = int(run.lease().get("leaseTransitions") or 0)
        finally:
            run.stop()
            cp.stop()
        result = {"rollouts": args.rollouts, "seconds": args.seconds, "sigkills": kills,
                  "lease_transitions": transitions, "apiserver_restarts": 1, "etcd_restarts": 1,
                  "releases_started": releases, "all_promoted_after": promoted,
                  **check(cp), "events": run.events}
    summary = {k: v for k, v in result.items() if k not in ("events", "writers")}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    # The writer may change only when the Lease does: more changes mean interleaved writers.
    ok = promoted and not result["step_violations"] and \
        result["writer_changes"] <= transitions
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
