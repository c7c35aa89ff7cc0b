"""Cut streams through the sandbox's gateway: how many streamed chat completions come back 200 and
are then broken, with and without routes changing meanwhile (issue 11; docs/sandbox.md, "A
Traefik defect the tests found").

    .venv/bin/python bench/gateway_streams.py [--runs 8] [--requests 600] [--rate 60]
        [--churn] [--direct] [--json PATH]

Method: one namespace with two one-pod revisions (simulators at 5 ms per token) behind a 50/50
route under the sandbox's Gateway (Traefik); ``--runs`` rounds of ``--requests`` streamed chat
completions at ``--rate`` req/s (up to 128 in flight), read to their end, no retries; each failure
is recorded with its status and its time since its start. ``--churn`` rewrites an unrelated
route's weights every 0.3 s meanwhile (each write makes Traefik rebuild its configuration);
``--direct`` sends the same load straight to the stable pod's own address, without a gateway.
No operator is involved. Exit status 0 always: this measures, it does not judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from typing import Any

import common  # noqa: F401  (sandbox/ on the path)

from irsandbox import manifests
from irsandbox.cluster import Cluster
from irsandbox.common import sandbox_env
from irsandbox.loadgen import run_load
from irsandbox.podspec import LABEL_REVISION


def two_revisions(kit: Cluster, ns: str, canary_weight: int) -> tuple[str, str]:
    """Two one-pod revisions (``stable``, ``canary``) behind route ``chat`` split
    100 − ``canary_weight`` / ``canary_weight``, and an unrelated route ``other`` for
    :func:`churn`; waits until the gateway serves the split.  Returns (the route's host, the
    stable pod's name)."""
    host = f"chat.{ns}.example"
    for rev in ("stable", "canary"):
        kit.create(ns, manifests.vllm_deployment(
            f"chat-{rev}", revision=rev, annotations={"sim.inference.dev/itl-ms": "5"}))
        kit.create(ns, manifests.service(f"chat-{rev}", "chat", rev))
    weights = {"chat-stable": 100 - canary_weight, "chat-canary": canary_weight}
    kit.create(ns, manifests.httproute("chat", list(weights.items()), [host]))
    kit.create(ns, manifests.service("other", "other", "none"))
    kit.create(ns, manifests.httproute("other", [("other", 1)], [f"other.{ns}.example"]))
    stable = kit.wait_serving(ns, f"{LABEL_REVISION}=stable", 1)[0]
    kit.wait_serving(ns, f"{LABEL_REVISION}=canary", 1)
    kit.wait_programmed(ns, "chat", {"chat-stable": 1, "chat-canary": 1})  # one pod each
    return host, stable


def churn(kit: Cluster, ns: str, stop: threading.Event, period: float = 0.3) -> int:
    """Rewrite route ``other``'s weight every ``period`` s until ``stop``; returns the writes."""
    writes = 0
    while not stop.wait(period):
        kit.set_weights(ns, "other", {"other": 1 + writes % 50})
        writes += 1
    return writes


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rate", type=float, default=60)
    ap.add_argument("--churn", action="store_true")
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    kit = Cluster(sandbox_env())
    ns = f"bench-streams-{uuid.uuid4().hex[:5]}"
    kit.create_namespace(ns)
    try:
        host, stable = two_revisions(kit, ns, 50)
        url = (f"http://{kit.endpoints()[stable]['pod_address']}" if args.direct
               else kit.gateway_url)
        stop = threading.Event()
        writes: list[int] = []
        churner = threading.Thread(target=lambda: writes.append(churn(kit, ns, stop)))
        if args.churn:
            churner.start()
        requests, failures = 0, []
        try:
            for _ in range(args.runs):
                report = asyncio.run(run_load(
                    url, host=host, model="llama", rate=args.rate, requests=args.requests,
                    stream=True, max_tokens=20, concurrency=128, retry=False))
                requests += report.requests
                failures += [{"error": r.error, "status": r.status,
                              "latency_s": round(r.latency, 4)}
                             for r in report.results if r.error]
        finally:
            stop.set()
            if args.churn:
                churner.join()
        result = {"via": "pod" if args.direct else kit.gateway_url, "churn": args.churn,
                  "route_writes": sum(writes), "requests": requests, "failed": len(failures),
                  "failures": failures, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        kit.delete_namespace(ns)
    print(f"{result['requests']} streamed requests via {result['via']}"
          f"{' with ' + str(result['route_writes']) + ' route writes' if args.churn else ''}: "
          f"{result['failed']} failed {[(f['error'], f['status']) for f in failures][:10]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
