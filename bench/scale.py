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

The sandbox gateway (nginx) watches every HTTPRoute, so N routes are created in its config; they
have no endpoints and do not change during the measurement.
"""

from __future__ import annotations

import argparse
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common import (
    OPERATOR_COMMIT,
    BenchOperator,
    cleanup_namespace,
    ensure_crd,
    free_port,
    histogram,
    machine,
    parse_iso,
    percentile,
    rss_mib,
    save,
    scrape,
)
from kubernetes.client.exceptions import ApiException

from inference_rollout.api.duration import parse_duration
from irsandbox.harness import GROUP, PLURAL, VERSION, Cluster, sandbox_env, wait_for

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
        try:
            cluster.core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


def manifest(name: str, ns: str, tag: str, prometheus: str, interval: str,
             image: str = "registry.k8s.io/pause:3.10") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRollout",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "app", "image": image,
                                    "ports": [{"name": "http", "containerPort": 8000}]}],
                    "nodeSelector": {TAINT: tag},
                    "tolerations": [
                        {"key": TAINT, "operator": "Equal", "value": tag,
                         "effect": "NoSchedule"},
                        {"key": "kwok.x-k8s.io/node", "operator": "Exists",
                         "effect": "NoSchedule"}],
                },
            },
            "traffic": {"gatewayAPI": {"parentRefs": [{"name": "sandbox"}],
                                       "hostnames": [f"{name}.{ns}.test"]}},
            "strategy": {"steps": [{"weight": 50, "pause": "24h"}, {"weight": 100}],
                         "progressDeadline": "20m"},
            "analysis": {
                "interval": interval,
                "prometheus": {"address": prometheus, "timeout": "5s", "scrapeInterval": "1s"},
                "minSamples": 0,
                "metrics": [{"name": "const", "query": "vector(1)", "max": 2}],
            },
        },
    }


def list_status(cluster: Cluster, ns: str) -> dict[str, dict[str, Any]]:
    items = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL,
                                                         _request_timeout=60)["items"]
    return {i["metadata"]["name"]: i.get("status") or {} for i in items}


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = sandbox_env()
    cluster = Cluster(env)
    ensure_crd(cluster)
    interval = parse_duration(args.interval)
    tag = uuid.uuid4().hex[:6]
    ns = f"bench-scale-{tag}"
    op = BenchOperator(env, log_name=f"bench-{ns}", namespaces=[ns],
                       metrics_port=free_port(), liveness_port=free_port())
    info: dict[str, Any] = {"namespace": ns, "machine": machine(), "args": vars(args),
                            "operator_commit": OPERATOR_COMMIT}
    print(f"namespace {ns}; operator {OPERATOR_COMMIT[:12]}; log {op.log_path}", flush=True)
    nodes: list[str] = []
    cluster.create_namespace(ns)
    try:
        nodes = create_nodes(cluster, tag, max(1, math.ceil(2 * args.rollouts / 500)))
        op.start()
        assert op.proc is not None
        pid = op.proc.pid
        time.sleep(2)
        info["rss_idle_mib"] = rss_mib(pid)
        names = [f"s{i}" for i in range(args.rollouts)]

        def create(name: str) -> None:
            cluster.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL,
                manifest(name, ns, tag, env["PROMETHEUS_URL"], args.interval))

        def statuses() -> dict[str, dict[str, Any]]:
            return list_status(cluster, ns)

        def healthy(st: dict[str, Any]) -> bool:
            return bool(st.get("phase") == "Healthy" and st.get("stableRevision")
                        and not st.get("canaryRevision"))

        def held(st: dict[str, Any]) -> bool:
            return bool(st.get("canaryWeight") == 50 and (st.get("analysis") or {})
                        .get("const", {}).get("verdict") == "Pass")

        def release(name: str) -> None:
            cluster.custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name,
                {"spec": {"template": manifest(name, ns, tag, env["PROMETHEUS_URL"],
                                               args.interval, image="registry.k8s.io/pause:3.9"
                                               )["spec"]["template"]}})

        def ramp(action: Any, pred: Any, what: str) -> float:
            """Apply ``action`` to the rollouts ``--batch`` at a time, each batch once the
            previous ones satisfy ``pred`` (a rollout waiting for its pods is reconciled every
            2 s: hundreds at once would be a herd, see docs/benchmarks.md)."""
            t = time.time()
            for k in range(0, len(names), args.batch):
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(action, names[k:k + args.batch]))
                upto = set(names[:k + args.batch])

                def ready(upto: set[str] = upto) -> bool:
                    n = sum(1 for name, st in statuses().items() if name in upto and pred(st))
                    print(f"    {what}: {n}/{len(upto)} of {len(names)}", flush=True)
                    return n == len(upto)

                wait_for(ready, args.setup_timeout, what, interval=5)
            return round(time.time() - t, 1)

        info["first_release_s"] = ramp(create, healthy, "Healthy")
        info["second_release_s"] = ramp(release, held, "at 50% with a Pass")

        # --- steady state -----------------------------------------------------------------
        text0 = scrape(op.metrics_port, timeout=10)
        _, _, lag0 = histogram(text0, LAG)
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
                          for st in list_status(cluster, ns).values()]
                ages += sample
                stale_max.append(max(sample))
                late += sum(1 for a in sample if a > interval + 2)
            time.sleep(5)
        text1 = scrape(op.metrics_port, timeout=10)
        lag_count1, _, lag1 = histogram(text1, LAG)
        cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - m0)
        p50, n_lag = bucket_quantile(lag0, lag1, 0.50)
        p99, _ = bucket_quantile(lag0, lag1, 0.99)
        errors = [line for line in text1.splitlines()
                  if line.startswith("inference_rollout_reconcile_errors_total")]
        result = {
            **info,
            "rollouts": args.rollouts,
            "interval_s": interval,
            "measure_s": args.measure,
            "rss_mib": {"idle": info["rss_idle_mib"], "max": max(rss), "last": rss[-1]},
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
    finally:
        gone = cleanup_namespace(cluster, ns, op, timeout=300, operator_first=True)
        delete_nodes(cluster, nodes)
        info["cleanup_ok"] = gone
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
