"""``inference-rollout``: run the operator, or print the CRD.

    inference-rollout operator [--namespace NS]... | --all-namespaces
                               [--log-format plain|json] [--liveness-port 8080]
                               [--metrics-port 8081] [--kubeconfig PATH]
                               [--prometheus-allow URL]... | --prometheus-allow-any]
                               [--no-confine-queries]
                               [--notify-allow URL]... [--notify-secret NAME]
                               [--leader-elect [--leader-election-namespace NS] ...]
    inference-rollout release-finalizers (--namespace NS)... | --all-namespaces [--kubeconfig PATH]
    inference-rollout crd
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from .leader import Timing


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inference-rollout", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    op = sub.add_parser("operator", help="run the operator against the current kubeconfig")
    scope = op.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", "-n", action="append", dest="namespaces",
                       help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true",
                       help="watch every namespace (needs cluster-wide RBAC)")
    op.add_argument("--log-format", choices=("plain", "json"), default="plain")
    op.add_argument("--liveness-port", type=int, default=8080)
    op.add_argument("--metrics-port", type=int, default=8081)
    op.add_argument("--kubeconfig", default=None,
                    help="default: $KUBECONFIG, ~/.kube/config, else in-cluster")
    op.add_argument("--verbose", "-v", action="store_true")
    op.add_argument("--service-proxy", default=None, metavar="URL",
                    help="send the business evaluation's requests to revision Services through "
                         "this HTTP forward proxy (when the operator runs outside the cluster)")
    lora = op.add_argument_group("LoRA adapter releases, a preview (docs/adapters.md)")
    lora.add_argument("--adapter-releases", action="store_true",
                      help="carry out adapter releases (spec.adapters): adapters loaded into "
                           "running pods, no new pod. Default: off (a rollout naming adapters "
                           "is Valid=False)")
    lora.add_argument("--adapter-drain-seconds", type=float, default=None, metavar="S",
                      help="the least time a pod out of its Service's endpoints drains before "
                           "its adapters change (default 3)")
    lora.add_argument("--adapter-drain-max-seconds", type=float, default=None, metavar="S",
                      help="after that, how long at most it waits for its vLLM to report no "
                           "request running or waiting (default 600)")
    tenancy = op.add_argument_group("tenancy (docs/security.md)")
    allow = tenancy.add_mutually_exclusive_group()
    allow.add_argument("--prometheus-allow", action="append", default=[], metavar="URL",
                       help="a Prometheus base URL rollouts may name (repeatable); an address "
                            "outside the list is never contacted and its metrics are errors. "
                            "Default: none (no rollout is measured until one is allowed)")
    allow.add_argument("--prometheus-allow-any", action="store_true",
                       help="the opt-out: rollouts may name any Prometheus address (one team "
                            "per cluster; a tenant's token then goes where its spec says)")
    tenancy.add_argument("--confine-queries", action=argparse.BooleanOptionalAction,
                         default=True,
                         help="add namespace=\"<the rollout's namespace>\" to every selector of "
                              "every query a rollout's metrics send (a conflicting namespace "
                              "matcher is an error). Default: on; --no-confine-queries is the "
                              "opt-out")
    notify = op.add_argument_group("notifications (docs/notifications.md)")
    notify.add_argument("--notify-allow", action="append", default=[], metavar="URL",
                        help="a webhook base URL notifications may go to (repeatable); default: "
                             "any public address (never loopback, private or link-local ones)")
    notify.add_argument("--notify-secret", default="", metavar="NAME",
                        help="the Secret in each namespace that names its webhooks, for rollouts "
                             "without spec.notifications.secretRef (conventionally "
                             "inference-rollout-notifications; default: none)")
    ha = op.add_argument_group("leader election (docs/reliability.md)")
    ha.add_argument("--leader-elect", action="store_true",
                    help="campaign for a coordination.k8s.io Lease and reconcile only while "
                         "holding it (run two replicas for a failover in seconds)")
    ha.add_argument("--leader-election-namespace", default=None, metavar="NS",
                    help="the Lease's namespace (default: $POD_NAMESPACE, the pod's namespace, "
                         "else default)")
    ha.add_argument("--leader-election-id", default="inference-rollout", metavar="NAME",
                    help="the Lease's name (replicas of one installation share it)")
    ha.add_argument("--leader-election-identity", default=None, metavar="ID",
                    help="this replica's name in the Lease (default: hostname and a random "
                         "suffix)")
    defaults = Timing()
    ha.add_argument("--lease-duration", type=float, default=defaults.lease_duration,
                    metavar="S", help="a standby takes over a Lease not renewed for this long")
    ha.add_argument("--renew-deadline", type=float, default=defaults.renew_deadline,
                    metavar="S", help="the leader stops (exits) when it could not renew for "
                                      "this long; shorter than --lease-duration")
    ha.add_argument("--retry-period", type=float, default=defaults.retry_period, metavar="S",
                    help="how often the leader renews and a standby polls")
    rel = sub.add_parser(
        "release-finalizers",
        help="when the operator is gone: return traffic to stable for every InferenceRollout "
             "marked for deletion, then remove its finalizer (docs/install.md, Uninstall)")
    rel_scope = rel.add_mutually_exclusive_group(required=True)
    rel_scope.add_argument("--namespace", "-n", action="append", dest="namespaces")
    rel_scope.add_argument("--all-namespaces", "-A", action="store_true")
    rel.add_argument("--kubeconfig", default=None)
    sub.add_parser("crd", help="print the CustomResourceDefinition YAML")
    return p


def run_operator(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers
    from .notify.delivery import Settings

    if args.kubeconfig:  # refused here, not in a traceback from kopf's login or startup
        from .kube import ConfigException, load_configuration
        try:
            asyncio.run(load_configuration(args.kubeconfig))
        except (ConfigException, OSError, ValueError) as e:
            sys.exit(f"inference-rollout operator: --kubeconfig: {e}")
    handlers.Runtime.kubeconfig = args.kubeconfig
    handlers.Runtime.metrics_port = args.metrics_port
    handlers.Runtime.service_proxy = args.service_proxy
    handlers.Runtime.prometheus_allow = tuple(args.prometheus_allow)
    handlers.Runtime.prometheus_allow_any = bool(args.prometheus_allow_any)
    handlers.Runtime.confine_queries = bool(args.confine_queries)
    handlers.Runtime.adapter_releases = bool(args.adapter_releases)
    if args.adapter_drain_seconds is not None:  # else the reconciler's own default
        handlers.Runtime.adapter_drain_seconds = max(0.0, float(args.adapter_drain_seconds))
    if args.adapter_drain_max_seconds is not None:
        handlers.Runtime.adapter_drain_max_seconds = max(0.0, float(args.adapter_drain_max_seconds))
    handlers.Runtime.clusterwide = bool(args.all_namespaces)
    handlers.Runtime.namespace_patterns = tuple(args.namespaces or ())
    handlers.Runtime.notify = Settings(allow=tuple(args.notify_allow),
                                       namespace_secret=args.notify_secret or None)
    fmt = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN
    kopf.configure(verbose=args.verbose, log_format=fmt)
    if not args.prometheus_allow and not args.prometheus_allow_any:
        logging.getLogger("inference_rollout").warning(
            "no Prometheus address is allowed: every rollout's metrics are errors and no release "
            "passes analysis. Name yours with --prometheus-allow URL (chart value "
            "tenancy.prometheusAllow), or allow any with --prometheus-allow-any "
            "(tenancy.allowAnyPrometheus) on a single-team cluster (docs/security.md)")

    def operator(stop_flag: asyncio.Event | None = None) -> Coroutine[Any, Any, None]:
        return kopf.operator(
            clusterwide=bool(args.all_namespaces),
            namespaces=args.namespaces or [],
            standalone=True,
            liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz",
            stop_flag=stop_flag,
        )

    if not args.leader_elect:
        asyncio.run(operator())
        return 0
    return asyncio.run(_lead_then_operate(args, operator))


#: The exit code of a leader that lost its Lease (the container restarts as a standby).
LOST_LEADERSHIP = 3


async def _lead_then_operate(
        args: argparse.Namespace,
        operator: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> int:
    """Wait for the Lease (serving /healthz meanwhile), then run kopf while a thread of its own
    renews it (:class:`~inference_rollout.leader.Holder`).  Losing the Lease ends the process at
    once: no write of this replica may follow another's takeover.  A clean stop (SIGTERM: kopf
    returns) releases the Lease for a fast handover."""
    import logging
    import os

    from .kube import Kube, load_configuration
    from .leader import (
        Holder,
        LeaseElector,
        Timing,
        default_identity,
        lease_namespace,
        standby_health,
    )

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a Lease poll a second is not news
    timing = Timing(args.lease_duration, args.renew_deadline, args.retry_period)
    config = await load_configuration(args.kubeconfig)

    def lease_client() -> Kube:
        # One request may take up to the renew deadline (hold() bounds each attempt by what is
        # left of it): a slow API server is not yet a lost Lease.
        return Kube(config, timeout=timing.renew_deadline)

    kube = lease_client()
    elector = LeaseElector(kube, lease_namespace(args.leader_election_namespace),
                           args.leader_election_id,
                           args.leader_election_identity or default_identity(), timing)
    async with standby_health(args.liveness_port):
        await elector.acquire()
    await kube.close()

    def lost() -> None:
        logging.getLogger("inference_rollout").critical(
            "leadership lost: exiting now so that no write follows another replica's takeover")
        logging.shutdown()
        os._exit(LOST_LEADERSHIP)

    holder = Holder(elector, lease_client, on_lost=lost)
    holder.start()
    stop = asyncio.Event()
    try:
        await operator(stop)
    finally:
        await asyncio.to_thread(holder.stop_and_release)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "operator":
        from .metrics.tenancy import check_allow_list

        timing = Timing(args.lease_duration, args.renew_deadline, args.retry_period)
        if args.leader_elect and timing.problems():
            parser.error(f"--lease-duration/--renew-deadline/--retry-period: "
                         f"{timing.problems()[0]}")

        bad = check_allow_list(args.prometheus_allow)
        if bad:
            parser.error(f"--prometheus-allow {bad[0]!r}: not a base URL; write e.g. "
                         "http://prometheus.monitoring:9090 (no query or fragment)")
        bad = check_allow_list(args.notify_allow)
        if bad:
            parser.error(f"--notify-allow {bad[0]!r}: not a base URL; write e.g. "
                         "https://hooks.slack.com/services (no query or fragment)")
        return run_operator(args)
    if args.command == "release-finalizers":
        import logging

        from .uninstall import run

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        return run(args.namespaces, args.kubeconfig)
    from .api.crd import render

    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
