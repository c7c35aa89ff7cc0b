"""An adapter release beside a template release of the same change (issue 31): wall time from
the change to promotion, GPU-pod-seconds beyond the steady state, pods started, and what the
gateway answered, on the sandbox (Traefik, the real API server and Prometheus, simulators).

    .venv/bin/python bench/adapter_release.py [--runs 3] [--model-load 60] [--rate 20]

Method: one namespace, the operator as a process (``--adapter-releases``) watching only it.
Per run, two rollouts of 4 pods (1 GPU each), the same steps (5/20/50/100 %, 10 s holds), the
same analysis (error rate per 5 s window), the same load (``--rate`` req/s for the adapter's
model name through Traefik), and the same change: the adapter ``support`` from v1 to v2.

* **adapter release**: ``spec.adapters[0].source`` changes; the operator loads v2 into a share
  of the running pods per step (docs/adapters.md);
* **template release**: the pods serve the adapter from their command line
  (``--lora-modules support=<source>``, the way without adapter releases); the change is a new
  template, so new pods start, each paying the model load (``--model-load`` s, the simulator's
  ``startup-seconds``: a real 8B model takes one to a few minutes).

Reported per release: seconds from the change to the promotion (the status' ``releaseCost``),
pod- and GPU-seconds beyond the steady state and pods started (the same record), and the
answers the load saw (failed ones included).  Raw results: ``bench/results/adapter_release-*.json``.
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any

from common import Bench, save

from irsandbox.harness import TrafficWatch
from irsandbox.manifests import sandbox_rollout

ADAPTER, V1, V2 = "support", "/adapters/support/v1", "/adapters/support/v2"
STEPS = [{"weight": 5, "pause": "10s"}, {"weight": 20, "pause": "10s"},
         {"weight": 50, "pause": "10s"}, {"weight": 100}]
LORA_ARGS = ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16"]


def rollout(bench: Bench, name: str, kind: str, model_load: int) -> dict[str, Any]:
    m = sandbox_rollout(name, prometheus=bench.env["PROMETHEUS_URL"], replicas=4, steps=STEPS,
                        progress_deadline="10m")
    pod = m["spec"]["template"]
    pod["metadata"]["annotations"]["sim.inference.dev/startup-seconds"] = str(model_load)
    vllm = pod["spec"]["containers"][0]
    vllm["args"] += LORA_ARGS
    vllm["env"] = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}]
    if kind == "adapter":
        m["spec"]["adapters"] = [{"name": ADAPTER, "source": V1}]
    else:
        vllm["args"] += ["--lora-modules", f"{ADAPTER}={V1}"]
    return m


def changed(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    m = copy.deepcopy(manifest)
    if kind == "adapter":
        m["spec"]["adapters"] = [{"name": ADAPTER, "source": V2}]
    else:
        args = m["spec"]["template"]["spec"]["containers"][0]["args"]
        args[args.index(f"{ADAPTER}={V1}")] = f"{ADAPTER}={V2}"
    return m


def one_release(bench: Bench, kind: str, run: int, args: argparse.Namespace) -> dict[str, Any]:
    rel = bench.release(rollout(bench, f"{kind[:4]}-{run}", kind, args.model_load))
    rel.apply()
    v1 = rel.wait_healthy(timeout=args.model_load + 180)["stableRevision"]
    pods_before = {p["metadata"]["uid"] for p in bench.cluster.pods(
        bench.ns, f"rollouts.inference.dev/rollout={rel.name}")}
    watch = TrafficWatch(bench.env, rel.host, rate=args.rate, model=ADAPTER).start()
    try:
        changed_at = time.time()
        rel.apply(changed(rel.manifest, kind))
        done = rel.wait(lambda s: s.get("phase") == "Healthy" and s.get("stableRevision") != v1,
                        args.model_load * 4 + 300, f"{kind} release promoted")
        promoted_at = time.time()
    finally:
        report = watch.stop()
    cost = done.get("releaseCost") or {}
    pods_after = {p["metadata"]["uid"] for p in bench.cluster.pods(
        bench.ns, f"rollouts.inference.dev/rollout={rel.name}")}
    out = {
        "kind": kind, "run": run, "stable_before": v1, "stable_after": done["stableRevision"],
        "promoted_after_s": round(promoted_at - changed_at, 1),
        "decided_after_s": cost.get("decidedAfter"),
        "pod_seconds": cost.get("podSeconds"), "gpu_seconds": cost.get("gpuSeconds"),
        "pods_started": cost.get("podsStarted"),
        "steps_reached_after_s": cost.get("stepsReachedAfter"),
        # at promotion: a template release's old pods still wait for scaleDownDelay there
        "pods_kept": len(pods_before & pods_after), "pods_before": len(pods_before),
        "new_pods": len(pods_after - pods_before),
        "answers": len(watch.answers), "failed": report.failed,
    }
    print(out, flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--model-load", type=int, default=60,
                   help="seconds a new pod takes to load the model (simulated)")
    p.add_argument("--rate", type=float, default=20)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    bench = Bench("adapters", args)
    bench.op.extra_args = ("--adapter-releases", "--adapter-drain-seconds", "3")
    results: list[dict[str, Any]] = []
    try:
        bench.op.start()
        for run in range(args.runs):
            for kind in ("adapter", "template"):
                results.append(one_release(bench, kind, run, args))
    finally:
        bench.finish(args.keep)
    by_kind = {k: [r for r in results if r["kind"] == k] for k in ("adapter", "template")}
    summary = {k: {q: sorted(r[q] for r in rs) for q in (
        "promoted_after_s", "gpu_seconds", "pods_started", "failed")}
        for k, rs in by_kind.items()}
    path = save("adapter_release", {**bench.info, "runs": results, "summary": summary,
                                    "elapsed_s": bench.elapsed()})
    print(summary)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
