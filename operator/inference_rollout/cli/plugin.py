"""``kubectl inference-rollout``: follow and steer rollouts without editing their spec.

Steering verbs write one-shot requests into ``status.requests`` through the status subresource
(the operator acts on them and clears them), so a manifest synced from git never drifts.

    kubectl inference-rollout get NAME [-n NS] [-o text|json|yaml]
    kubectl inference-rollout watch NAME [--timeout 30m]   (exit 0 Healthy, 1 Degraded, 2 timeout)
    kubectl inference-rollout promote NAME [--full]
    kubectl inference-rollout abort|retry|pause|resume NAME
    kubectl inference-rollout report NAME [--release REV] [-o release.html]
    kubectl inference-rollout drill pod-kill|canary-fault|prometheus-outage|abort NAME [--dry-run]
    kubectl inference-rollout lint -f FILE...      (offline)
    kubectl inference-rollout budget -f FILE       (offline)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx
import yaml

from ..api.duration import parse_duration
from ..kube import Kube, KubeError, load_configuration
from ..paths import ApiPath, ns_path, rollout_path
from . import drill, report
from .offline import add_offline_commands
from .render import printable_values, render_rollout

REQUEST_OF_VERB = {"abort": "abort", "retry": "retry", "pause": "pause", "resume": "resume"}


class CliError(Exception):
    """A failure the user can act on; printed without a traceback, exit code 1."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl inference-rollout",
                                description=__doc__.split("\n")[0])
    p.add_argument("--kubeconfig", default=None)
    sub = p.add_subparsers(dest="verb", required=True)

    def with_target(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("name")
        sp.add_argument("-n", "--namespace", default=None)
        return sp

    get = with_target("get", "show a rollout: revisions, weights, step, metrics vs thresholds")
    get.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    watch = with_target("watch", "follow a rollout live; exit 0 when Healthy, 1 when Degraded")
    watch.add_argument("--timeout", default="30m", help="give up after this long (exit 2)")
    watch.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    promote = with_target("promote", "finish the current step now (--full: go to 100%%)")
    promote.add_argument("--full", action="store_true")
    for verb, text in (("abort", "roll back: all traffic to stable"),
                       ("retry", "start an aborted release again from step 1"),
                       ("pause", "hold the release at its current step"),
                       ("resume", "continue a paused release")):
        with_target(verb, text)
    report.add_arguments(with_target("report", "write one release as a self-contained HTML "
                                                 "page: weights, metrics, verdicts, Events"))
    drill.add_arguments(sub.add_parser("drill", help="a planned, bounded failure drill with "
                                                     "a report (docs/drills.md)"))
    add_offline_commands(sub)
    return p


def _namespace(arg: str | None, kubeconfig: str | None) -> str:
    if arg:
        return arg
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig)
        return str(active.get("context", {}).get("namespace") or "default")
    except Exception:  # in-cluster or no context namespace
        return "default"


async def _run(args: argparse.Namespace) -> int:
    ns = _namespace(args.namespace, args.kubeconfig)
    try:
        kube = Kube(await load_configuration(args.kubeconfig))
    except Exception as e:
        raise CliError(f"no cluster: cannot load kubeconfig ({e})") from e
    try:
        path = rollout_path(ns, args.name)
        if args.verb == "get":
            body = await _get(kube, path, ns, args.name)
            _print(body, args.output)
            return 0
        if args.verb == "watch":
            return await _watch(kube, path, ns, args)
        if args.verb == "drill":
            return await drill.run(kube, ns, args)
        if args.verb == "report":
            print(await report.write_report(kube, ns, args))
            return 0
        request = "promoteFull" if args.verb == "promote" and args.full else \
            REQUEST_OF_VERB.get(args.verb, "promote")
        await _get(kube, path, ns, args.name)
        await kube.merge_patch(path.sub("status"), {"status": {"requests": {request: True}}})
        print(f"inferencerollout {ns}/{args.name}: {args.verb}"
              f"{' --full' if request == 'promoteFull' else ''} requested")
        return 0
    except KubeError as e:
        raise CliError(_explain(e, ns, args.name)) from e
    except (OSError, httpx.HTTPError) as e:
        raise CliError(f"no cluster: cannot reach the API server ({e!r})") from e
    except (ValueError, drill.Refused) as e:  # bad input, no such release, a drill refused
        raise CliError(str(e)) from e
    finally:
        await kube.close()


async def _get(kube: Kube, path: ApiPath, ns: str, name: str) -> dict[str, Any]:
    return await kube.get(path)


WATCH_TIMEOUT_EXIT = 2


async def _watch(kube: Kube, path: ApiPath, ns: str, args: argparse.Namespace) -> int:
    """Redraw the rollout and its recent Events until it settles.  The exit code lets a CI
    pipeline gate on a release: 0 Healthy (for the current generation), 1 Degraded, 2 timeout."""
    deadline = time.monotonic() + parse_duration(args.timeout)
    tty = sys.stdout.isatty()
    while True:
        body = await kube.get(path)
        events = await kube.get(ns_path("", "v1", ns, "events"), params={
            "fieldSelector": f"involvedObject.name={args.name},"
                             "involvedObject.kind=InferenceRollout"})
        recent = sorted(events.get("items", []),
                        key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")[-5:]
        view = render_rollout(body) + "\nRecent events:\n" + "\n".join(
            f"  {e.get('type', ''):<8} {e.get('reason', ''):<24} {e.get('message', '')}"
            for e in printable_values(recent))
        print(("\x1b[H\x1b[2J" if tty else "\n") + view, flush=True)
        st = body.get("status") or {}
        current = st.get("observedGeneration") == body["metadata"].get("generation")
        if current and st.get("phase") == "Healthy" and not st.get("canaryRevision"):
            return 0
        if current and st.get("phase") == "Degraded":
            return 1
        if time.monotonic() >= deadline:
            print(f"timed out after {args.timeout}", file=sys.stderr)
            return WATCH_TIMEOUT_EXIT
        await asyncio.sleep(args.interval)


def _explain(e: KubeError, ns: str, name: str) -> str:
    if e.status == 0:  # no HTTP answer at all
        return f"no cluster: cannot reach the API server ({e.message})"
    if e.status == 404 and "the server could not find the requested resource" in e.message:
        return ("the InferenceRollout CRD is not installed: kubectl apply --server-side -f "
                "crds/rollouts.inference.dev_inferencerollouts.yaml (or helm install the chart)")
    if e.status == 404:
        return f"inferencerollout {ns}/{name} not found (check -n NAMESPACE)"
    if e.status in (401, 403):
        return f"no permission: {e.message}"
    return str(e)


def _print(body: dict[str, Any], output: str) -> None:
    if output == "json":
        print(json.dumps(body, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(body, sort_keys=False), end="")
    else:
        print(render_rollout(body))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "func", None) is not None:  # lint / budget: offline, no cluster
        return int(args.func(args))
    try:
        return asyncio.run(_run(args))
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
