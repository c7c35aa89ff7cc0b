"""``inference-rollout``: run the operator, or print the CRD.

    inference-rollout operator [--namespace NS]... | --all-namespaces
                               [--log-format plain|json] [--liveness-port 8080]
                               [--metrics-port 8081] [--kubeconfig PATH]
                               [--prometheus-allow URL]... [--confine-queries]
                               [--notify-allow URL]... [--notify-secret NAME]
    inference-rollout crd
"""

from __future__ import annotations

import argparse
import asyncio
import sys


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
    tenancy = op.add_argument_group("tenancy (docs/security.md)")
    tenancy.add_argument("--prometheus-allow", action="append", default=[], metavar="URL",
                         help="a Prometheus base URL rollouts may name (repeatable); an address "
                              "outside the list is never contacted and its metrics are errors. "
                              "Default: any address")
    tenancy.add_argument("--confine-queries", action="store_true",
                         help="add namespace=\"<the rollout's namespace>\" to every selector of "
                              "every query (a conflicting namespace matcher is an error)")
    notify = op.add_argument_group("notifications (docs/notifications.md)")
    notify.add_argument("--notify-allow", action="append", default=[], metavar="URL",
                        help="a webhook base URL notifications may go to (repeatable); default: "
                             "any public address (never loopback, private or link-local ones)")
    notify.add_argument("--notify-secret", default="", metavar="NAME",
                        help="the Secret in each namespace that names its webhooks, for rollouts "
                             "without spec.notifications.secretRef (conventionally "
                             "inference-rollout-notifications; default: none)")
    sub.add_parser("crd", help="print the CustomResourceDefinition YAML")
    return p


def run_operator(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers
    from .notify.delivery import Settings

    if args.kubeconfig:  # refused here, not in a traceback from kopf's login or startup
        from kubernetes.config import ConfigException

        from .kube import load_configuration
        try:
            load_configuration(args.kubeconfig)
        except (ConfigException, OSError, ValueError) as e:
            sys.exit(f"inference-rollout operator: --kubeconfig: {e}")
    handlers.Runtime.kubeconfig = args.kubeconfig
    handlers.Runtime.metrics_port = args.metrics_port
    handlers.Runtime.service_proxy = args.service_proxy
    handlers.Runtime.prometheus_allow = tuple(args.prometheus_allow)
    handlers.Runtime.confine_queries = bool(args.confine_queries)
    handlers.Runtime.clusterwide = bool(args.all_namespaces)
    handlers.Runtime.notify = Settings(allow=tuple(args.notify_allow),
                                       namespace_secret=args.notify_secret or None)
    fmt = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN
    kopf.configure(verbose=args.verbose, log_format=fmt)
    asyncio.run(kopf.operator(
        clusterwide=bool(args.all_namespaces),
        namespaces=args.namespaces or [],
        standalone=True,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz",
    ))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "operator":
        from .metrics.tenancy import check_allow_list

        bad = check_allow_list(args.prometheus_allow)
        if bad:
            parser.error(f"--prometheus-allow {bad[0]!r}: not a base URL; write e.g. "
                         "http://prometheus.monitoring:9090 (no query or fragment)")
        bad = check_allow_list(args.notify_allow)
        if bad:
            parser.error(f"--notify-allow {bad[0]!r}: not a base URL; write e.g. "
                         "https://hooks.slack.com/services (no query or fragment)")
        return run_operator(args)
    from .api.crd import render

    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
