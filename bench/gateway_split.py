"""How exact is the gateway's weighted split at low traffic, with and without configuration
churn?  (Found while benchmarking the peers at 0.2 canary req/s, 2026-12-07: a 5 % canary got no
request for 25–30 s.)

    .venv/bin/python bench/gateway_split.py [--weight 5] [--rate 4] [--seconds 120]
        [--churn-periods 0 5 2 1] [--json PATH]

Method: one namespace, two one-pod revisions behind route ``chat`` split 100 − ``--weight`` /
``--weight`` under the sandbox's Gateway (Traefik), and an unrelated route ``other``
(:func:`gateway_streams.two_revisions`). For each churn period P (0: none), ``--seconds`` of
``--rate`` chat completions per second (open loop, Poisson) to ``chat`` while ``other``'s weight
is rewritten every P s — the stand-in for anything else changing in a cluster the gateway
watches (a pod, an EndpointSlice, another team's route). Per period: the canary's answers
(``X-Serving-Revision``) against the expected share, with its 95 % Wilson interval, and the
longest run of requests without a canary answer. No operator is involved.

Why it can matter: Traefik 3's weighted round robin is an earliest-deadline-first schedule
(``pkg/server/service/loadbalancer/wrr``) whose deadlines start at 1/weight each time the
configuration is built, so after every rebuild the 95-weight backend is picked about 19 times
before the 5-weight one; if rebuilds come more often than every 19 requests, the small weight may
never be picked at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from typing import Any

from calibration import wilson
from gateway_streams import churn, two_revisions

from irsandbox.cluster import Cluster
from irsandbox.common import sandbox_env
from irsandbox.loadgen import run_load


def longest_gap(revisions: list[str], canary: str) -> int:
    """The most consecutive answers in ``revisions`` (in send order) none of which is ``canary``."""
    gap = best = 0
    for rev in revisions:
        gap = 0 if rev == canary else gap + 1
        best = max(best, gap)
    return best


def measure(kit: Cluster, ns: str, host: str, args: argparse.Namespace,
            period: float) -> dict[str, Any]:
    stop = threading.Event()
    writes: list[int] = []
    churner = threading.Thread(target=lambda: writes.append(churn(kit, ns, stop, period)))
    if period:
        churner.start()
    try:
        report = asyncio.run(run_load(kit.gateway_url, host=host, model="llama", rate=args.rate,
                                      duration=args.seconds, max_tokens=4, seed=args.seed))
    finally:
        stop.set()
        if period:
            churner.join()
    answered = sorted((r for r in report.results if not r.error), key=lambda r: r.index)
    revisions = [r.revision for r in answered]
    k, n = revisions.count("canary"), len(revisions)
    lo, hi = wilson(k, n)
    return {"churn_period_s": period, "route_writes": sum(writes), "answered": n,
            "errors": len(report.results) - n, "canary": k, "share": k / n if n else None,
            "ci95": [lo, hi], "expected": args.weight / 100,
            "longest_run_without_canary": longest_gap(revisions, "canary")}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weight", type=int, default=5)
    ap.add_argument("--rate", type=float, default=4)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--churn-periods", type=float, nargs="+", default=[0, 5, 2, 1])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    kit = Cluster(sandbox_env())
    ns = f"bench-split-{uuid.uuid4().hex[:5]}"
    kit.create_namespace(ns)
    rows = []
    try:
        host, _ = two_revisions(kit, ns, args.weight)
        for period in args.churn_periods:
            row = measure(kit, ns, host, args, period)
            rows.append(row)
            print(f"churn every {period:g} s ({row['route_writes']} writes): canary "
                  f"{row['canary']}/{row['answered']} = {100 * (row['share'] or 0):.1f} % "
                  f"(95 % CI {100 * row['ci95'][0]:.1f}–{100 * row['ci95'][1]:.1f} %, expected "
                  f"{args.weight} %), longest run without it {row['longest_run_without_canary']}",
                  flush=True)
    finally:
        kit.delete_namespace(ns)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "args": vars(args), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
