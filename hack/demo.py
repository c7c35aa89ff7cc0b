"""The demo: two gray releases on the local sandbox, shown live.

1. ``chat`` v1 is deployed (2 GPU pods, each backed by a vLLM simulator).
2. v2 is released: 5% → 20% → 50% → 100%, Prometheus analysis after every shift, promoted.
3. v3 is released with a TTFT regression (first token in 400 ms against a 100 ms SLO): the
   operator rolls it back by itself, and Traefik sends all traffic to v2 again.

Traffic flows through Traefik (the sandbox's Gateway API implementation) at 20 requests/s the
whole time; the table is read live from the InferenceRollout's status and the HTTPRoute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "sandbox")]

from irsandbox.cluster import Cluster  # noqa: E402
from irsandbox.common import sandbox_env  # noqa: E402
from irsandbox.harness import (  # noqa: E402
    BackgroundLoad,
    OperatorProcess,
    measure_shares,
    settle_on,
)
from irsandbox.manifests import sandbox_rollout, with_template  # noqa: E402
from irsandbox.story import Release  # noqa: E402

NS = "demo"


def show(rel: Release, until, timeout: float, title: str) -> dict:
    print(f"\n== {title}")
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        st = rel.status()
        step = (st.get("currentStep") or 0) + 1 if st.get("canaryRevision") else "-"
        line = (f"  {st.get('phase', '?'):<11} step {step}  route {rel.route()}  | "
                f"{st.get('message', '')}")
        if line != last:
            print(time.strftime("%H:%M:%S"), line, flush=True)
            last = line
        if until(st):
            return st
        time.sleep(1)
    raise SystemExit(f"demo: timed out waiting for: {title}")


def main() -> int:
    env = sandbox_env()
    cluster = Cluster(env)
    cluster.install_crd()
    # A previous demo's namespace: its operator has stopped, so its rollout's deletion is
    # finished here (release-finalizers) and the namespace must be gone before it is made again
    # (creating it while it is still Terminating "succeeds" with a 409 and then refuses objects).
    cluster.delete_namespace(NS)
    if not cluster.namespace_gone(NS) and cluster.finish_deletions(NS, wait=120):
        raise SystemExit(f"demo: namespace {NS} is still Terminating; see "
                         "`kubectl get ns demo -o yaml` (status.conditions)")
    cluster.create_namespace(NS)
    op = OperatorProcess(env, log_name="operator-demo", namespaces=[NS], metrics_port=18581,
                         liveness_port=18580)
    op.start()
    print(f"operator running (log: {op.log_path}); Prometheus {env['PROMETHEUS_URL']}, "
          f"gateway {env['GATEWAY_URL']}")
    manifest = sandbox_rollout("chat", prometheus=env["PROMETHEUS_URL"],
                       analysis={"verdicts": "Sequential", "slo": {"ttftP99": "100ms"}})
    rel = Release(cluster, op, NS, manifest)
    load = None
    try:
        rel.apply()
        st = show(rel, lambda s: s.get("phase") == "Healthy", 120, "deploy v1")
        v1 = st["stableRevision"]
        load = BackgroundLoad(env, rel.host)
        rel.apply(with_template(manifest, version="v2"))
        st = show(rel, lambda s: s.get("phase") == "Healthy" and s.get("stableRevision") != v1,
                  420, "release v2: 5% → 20% → 50% → 100% with analysis")
        v2 = st["stableRevision"]
        shares = measure_shares(env, rel.host, 200)
        print(f"  through Traefik now: {shares.share(v2):.0%} on v2 ({v2})")
        rel.apply(with_template(rel.manifest, version="v3", ttft_ms=400))
        st = show(rel, lambda s: s.get("phase") == "Degraded", 240,
                  "release v3 with a TTFT regression (400 ms vs SLO 100 ms × 1.5)")
        # The rollback is one route write; Traefik follows a moment later: measure after that.
        settle_on(env, rel.host, v2)
        shares = measure_shares(env, rel.host, 200)
        print("\n== summary")
        print(f"  v1 {v1} → v2 {v2}: promoted through 5/20/50/100")
        print(f"  v3 {st['canaryRevision']}: rolled back — {st['message']}")
        print(f"  traffic through Traefik after the rollback: {shares.share(v2):.0%} on v2")
        print(f"  operator metrics: http://127.0.0.1:{op.metrics_port}/metrics; "
              "stop the sandbox with `make sandbox-down`")
        return 0 if shares.share(v2) == 1.0 else 1
    finally:
        if load:
            load.stop()
        op.stop()


if __name__ == "__main__":
    sys.exit(main())
