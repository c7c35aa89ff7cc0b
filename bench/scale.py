"""Scale: one operator replica with N concurrent releases held on their analysis interval — its
memory (VmRSS), its reconcile lag, and how fresh every rollout's analysis stays (DESIGN §9: 500
rollouts, lag p99 < 2 s, < 300 MiB RSS).

    .venv/bin/python bench/scale.py [--rollouts 100] [--interval 30s] [--measure 180] [--batch 100]

Method: one namespace, the operator as a process watching only it.  The pods are KWOK pods
without a vLLM container (container ``app``, no ``--model``), so the sandbox bridge starts no
simulator for them; they run on KWOK nodes the benchmark adds for itself (no GPUs, tainted
``bench.inference.dev/scale`` so nobody else's pods land there, 600 pods each) and deletes
afterwards.  Each rollout: 1 replica, a first release, then a second one held at step 1 (50 %)
with a 24 h pause (both applied ``--batch`` rollouts at a time, the next batch once the previous
ones got there; ``--batch N`` starts them all at once, as an operator restart would), analysis
every ``--interval`` with one custom metric (``vector(1)`` ≤ 2, answered by the real sandbox
Prometheus), so every rollout measures, decides and writes its status once per interval.  Once
all N hold at 50 % with a Pass verdict, the steady state is measured for ``--measure`` seconds:

* VmRSS of the operator process (/proc/<pid>/status) every 5 s, and its CPU time;
* ``inference_rollout_reconcile_lag_seconds`` (how late a due reconcile got its slot): the
  histogram's increase over the window, quantiles to the bucket bound;
* independently, every 15 s, a LIST of all rollouts: the age of each one's latest
  ``analysis.const.measuredAt`` (≤ interval + lag when the rollout is on its interval).

The sandbox's gateway (Traefik) watches every HTTPRoute, so N routes are in its configuration;
their pods have no simulators and the routes do not change during the measurement.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common import (
    Bench,
    histogram,
    parse_iso,
    percentile,
    rss_mib,
    save,
)

from inference_rollout.api.duration import parse_duration
from irsandbox.cluster import GROUP, PLURAL, VERSION, Cluster, ignore_status
from irsandbox.common import wait_for
from irsandbox.manifests import GATEWAY_PARENT, KWOK_TOLERATION, container, inference_rollout

TAINT = "bench.inference.dev/scale"
LAG = "inference_rollout_reconcile_lag_seconds"
PODS_PER_NODE = 600


def create_nodes(cluster: Cluster, tag: str, count: int) -> list[str]:
    """KWOK nodes for this run only (KWOK manages nodes annotated kwok.x-k8s.io/node=fake)."""
    names = []
    for k in range(count):
        name = f"bench-scale-{tag}-{k}"
        res = {"cpu": "256", "memory": "1Ti", "pods": str(PODS_PER_NODE),
               "ephemeral-storage": "1Ti"}
        cluster.core.create_node({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {"kwok.x-k8s.io/node": "fake",
                                         "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok", TAINT: tag}},
            "spec": {"taints": [{"key": TAINT, "value": tag, "effect": "NoSchedule"}]},
            "status": {"capacity": res, "allocatable": res},
        })
        names.append(name)
    return names


def delete_nodes(cluster: Cluster, names: list[str]) -> None:
    for name in names:
        ignore_status(404, cluster.core.delete_node, name)


def manifest(name: str, ns: str, tag: str, prometheus: str, interval: str,
             image: str = "registry.k8s.io/pause:3.10") -> dict[str, Any]:
    """A rollout of pods without a vLLM container on this run's nodes, held at 50 % for 24 h,
    analysed every ``interval`` with one constant metric."""
    m = inference_rollout(
        name, replicas=1, containers=[container(name="app", image=image)],
        pod={"nodeSelector": {TAINT: tag},
             "tolerations": [{"key": TAINT, "operator": "Equal", "value": tag,
                              "effect": "NoSchedule"}, dict(KWOK_TOLERATION)]},
        traffic={"gatewayAPI": {"parentRefs": [dict(GATEWAY_PARENT)],
                                "hostnames": [f"{name}.{ns}.test"]}},
        strategy={"steps": [{"weight": 50, "pause": "24h"}, {"weight": 100}],
                  "progressDeadline": "20m"},
        analysis={"interval": interval,
                  "prometheus": {"address": prometheus, "timeout": "5s", "scrapeInterval": "1s"},
                  "minSamples": 0,
                  "metrics": [{"name": "const", "query": "vector(1)", "max": 2}]})
    m["metadata"]["namespace"] = ns
    return m


def list_status(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {i["metadata"]["name"]: i.get("status") or {}
            for i in cluster.rollouts(ns, _request_timeout=60)}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bucket_quantile(before: dict[str, int], after: dict[str, int], q: float) -> tuple[str, int]:
    """The smallest bucket bound holding a fraction ``q`` of the observations made between two
    scrapes (and how many there were)."""
    les = sorted(after, key=lambda le: math.inf if le == "+Inf" else float(le))
    total = after["+Inf"] - before.get("+Inf", 0)
    for le in les:
        if after[le] - before.get(le, 0) >= q * total:
            return le, total
    return "+Inf", total


def healthy(st: dict[str, Any]) -> bool:
    return bool(st.get("phase") == "Healthy" and st.get("stableRevision")
                and not st.get("canaryRevision"))


def held(st: dict[str, Any]) -> bool:
    return bool(st.get("canaryWeight") == 50 and (st.get("analysis") or {})
                .get("const", {}).get("verdict") == "Pass")


class Fleet:
    """The run's N rollouts, created and released ``--batch`` at a time."""

    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench, self.args = bench, args
        self.names = [f"s{i}" for i in range(args.rollouts)]

    def manifest(self, name: str, **kw: Any) -> dict[str, Any]:
        return manifest(name, self.bench.ns, self.bench.tag, self.bench.env["PROMETHEUS_URL"],
                        self.args.interval, **kw)

    def create(self, name: str) -> None:
        self.bench.cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.bench.ns, PLURAL, self.manifest(name))

    def release(self, name: str) -> None:
        self.bench.cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.bench.ns, PLURAL, name,
            {"spec": {"template": self.manifest(
                name, image="registry.k8s.io/pause:3.9")["spec"]["template"]}})

    def ramp(self, action: Any, pred: Any, what: str) -> float:
        """Apply ``action`` to the rollouts ``--batch`` at a time, each batch once the previous
        ones satisfy ``pred`` (a rollout waiting for its pods is reconciled every 2 s: hundreds
        at once would be a herd, see docs/benchmarks.md).  Returns the seconds it took."""
        t = time.time()
        for k in range(0, len(self.names), self.args.batch):
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(action, self.names[k:k + self.args.batch]))
            upto = set(self.names[:k + self.args.batch])

            def ready(upto: set[str] = upto) -> bool:
                statuses = list_status(self.bench.cluster, self.bench.ns)
                n = sum(1 for name, st in statuses.items() if name in upto and pred(st))
                print(f"    {what}: {n}/{len(upto)} of {len(self.names)}", flush=True)
                return n == len(upto)

            wait_for(ready, self.args.setup_timeout, what, interval=5, tolerate=())
        return round(time.time() - t, 1)


def measure_steady_state(bench: Bench, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    """RSS and load every 5 s, every rollout's analysis age every 15 s, and the reconcile lag
    histogram's increase over ``--measure`` seconds."""
    interval = parse_duration(args.interval)
    _, _, lag0 = histogram(bench.op.metrics(timeout=10), LAG)
    cpu0, m0 = cpu_seconds(pid), time.monotonic()
    rss, loads, ages, stale_max = [], [], [], []
    late = 0
    next_list = 0.0
    end = time.monotonic() + args.measure
    while time.monotonic() < end:
        rss.append(rss_mib(pid))
        loads.append(os.getloadavg()[0])
        if time.monotonic() >= next_list:
            next_list = time.monotonic() + 15
            now = time.time()
            sample = [now - (parse_iso((st.get("analysis") or {}).get("const", {})
                                       .get("measuredAt")) or 0)
                      for st in list_status(bench.cluster, bench.ns).values()]
            ages += sample
            stale_max.append(max(sample))
            late += sum(1 for a in sample if a > interval + 2)
        time.sleep(5)
    text1 = bench.op.metrics(timeout=10)
    lag_count1, _, lag1 = histogram(text1, LAG)
    cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - m0)
    p50, n_lag = bucket_quantile(lag0, lag1, 0.50)
    p99, _ = bucket_quantile(lag0, lag1, 0.99)
    errors = [line for line in text1.splitlines()
              if line.startswith("inference_rollout_reconcile_errors_total")]
    return {
        "rollouts": args.rollouts,
        "interval_s": interval,
        "measure_s": args.measure,
        "rss_mib": {"idle": bench.info["rss_idle_mib"], "max": max(rss), "last": rss[-1]},
        "cpu_cores": round(cpu, 3),
        "reconcile_lag": {"observations": n_lag, "per_second": round(n_lag / args.measure, 2),
                          "p50_le_s": p50, "p99_le_s": p99,
                          "buckets_before": lag0, "buckets_after": lag1,
                          "count_total": lag_count1},
        "analysis_age_s": {"samples": len(ages), "p50": percentile(ages, 50),
                           "p99": percentile(ages, 99), "max": max(ages, default=math.nan),
                           "over_interval_plus_2s": late},
        "loadavg_1m": {"mean": sum(loads) / len(loads), "max": max(loads)},
        "reconcile_errors": errors,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench("scale", args)
    nodes: list[str] = []
    try:
        nodes = create_nodes(bench.cluster, bench.tag, max(1, math.ceil(2 * args.rollouts / 500)))
        bench.op.start()
        assert bench.op.proc is not None
        pid = bench.op.proc.pid
        time.sleep(2)
        bench.info["rss_idle_mib"] = rss_mib(pid)
        fleet = Fleet(bench, args)
        bench.info["first_release_s"] = fleet.ramp(fleet.create, healthy, "Healthy")
        bench.info["second_release_s"] = fleet.ramp(fleet.release, held, "at 50% with a Pass")
        result = {**bench.info, **measure_steady_state(bench, args, pid)}
    finally:
        gone = bench.finish(timeout=300, operator_first=True)
        delete_nodes(bench.cluster, nodes)
        bench.info["cleanup_ok"] = gone
    result["cleanup_ok"] = gone
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", type=int, default=100)
    p.add_argument("--interval", default="30s", help="analysis interval")
    p.add_argument("--measure", type=float, default=180, help="steady-state seconds")
    p.add_argument("--setup-timeout", type=float, default=600, help="seconds per batch")
    p.add_argument("--batch", type=int, default=100,
                   help="rollouts created (and released) at a time")
    args = p.parse_args()
    r = run(args)
    path = save(f"scale-{args.rollouts}", r)
    lag, age = r["reconcile_lag"], r["analysis_age_s"]
    print()
    print(f"{r['rollouts']} rollouts held at 50%, analysis every {r['interval_s']:g}s, "
          f"measured {r['measure_s']:g}s (load avg {r['loadavg_1m']['mean']:.1f})")
    print(f"RSS: idle {r['rss_mib']['idle']:.0f} MiB, max {r['rss_mib']['max']:.0f} MiB; "
          f"CPU {r['cpu_cores']:.2f} cores")
    print(f"reconcile lag: {lag['observations']} reconciles ({lag['per_second']}/s), "
          f"p50 ≤ {lag['p50_le_s']} s, p99 ≤ {lag['p99_le_s']} s")
    print(f"analysis age: p50 {age['p50']:.1f}s p99 {age['p99']:.1f}s max {age['max']:.1f}s; "
          f"{age['over_interval_plus_2s']}/{age['samples']} samples older than interval + 2 s")
    print(f"reconcile errors: {r['reconcile_errors'] or 'none'}; cleanup ok: {r['cleanup_ok']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
