"""``kubectl inference-rollout drill {pod-kill,canary-fault,prometheus-outage} NAME``: failure
drills as a routine (Principle 10; docs/drills.md).

Every drill is planned (the plan is printed first; ``--dry-run`` stops there), bounded
(``--max-duration``), refuses a rollout in the middle of a release unless ``--force``, and can be
aborted -- Ctrl-C, the time bound, or ``drill abort NAME`` from another terminal -- which undoes
it.  What undoes a drill is written into the rollout's annotations before the drill changes
anything (``rollouts.inference.dev/drill-undo``: JSON patch operations), so ``drill abort`` can
undo a drill whose process died.  The result is a Markdown and a JSON report, and the
annotation ``rollouts.inference.dev/last-drill`` on the rollout: the operator records it as a
``DrillPassed``/``DrillFailed`` Event and sends the ``Drill`` notice to the rollout's
notification endpoints (docs/notifications.md). The CLI sends nothing itself: it is a client of
the API (an import contract forbids it the notifier), and needs no Secret.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from ..api import ANN_LAST_DRILL, GROUP
from ..api.duration import parse_duration
from ..kube import Kube, KubeError
from ..paths import ApiPath, rollout_path
from .drill_report import DrillRecord

ANN_DRILL = f"{GROUP}/drill"
ANN_UNDO = f"{GROUP}/drill-undo"
KINDS = ("pod-kill", "canary-fault", "prometheus-outage")


class Refused(Exception):
    """The drill may not start (mid-release, another drill running, nothing to kill)."""


def add_arguments(drill: argparse.ArgumentParser) -> None:
    drill.add_argument("kind", choices=(*KINDS, "abort"),
                       help="the drill, or abort: undo the drill running on NAME")
    drill.add_argument("name")
    drill.add_argument("-n", "--namespace", default=None)
    drill.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    drill.add_argument("--max-duration", default="10m",
                       help="abort and undo after this long (default 10m)")
    drill.add_argument("--force", action="store_true",
                       help="run even though a release is in progress")
    drill.add_argument("--report", default=None, metavar="PREFIX",
                       help="write PREFIX.md and PREFIX.json (default drill-KIND-NAME-TIME)")
    fault = drill.add_argument_group("canary-fault")
    fault.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE",
                       help="a pod annotation of the faulty release, e.g. "
                            "sim.inference.dev/failure-rate=30 (repeatable)")
    fault.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                       help="an environment variable of the serving container (repeatable)")
    fault.add_argument("--arg", action="append", default=[], metavar="ARG",
                       help="an extra argument of the serving container (repeatable)")
    fault.add_argument("--within", type=int, default=3, metavar="N",
                       help="the rollback must come within N analysis intervals of the canary's "
                            "first traffic (default 3)")
    kill = drill.add_argument_group("pod-kill")
    kill.add_argument("--count", type=int, default=1, help="pods to delete (default 1)")
    kill.add_argument("--recovery-timeout", default="3m",
                      help="the pods must be back (Ready) within this long (default 3m)")
    kill.add_argument("--probe-url", default=None, metavar="URL",
                      help="send requests here during the drill (the gateway) and check the "
                           "error rate and p99")
    kill.add_argument("--probe-host", default=None, help="Host header of the probe's requests")
    kill.add_argument("--probe-rps", type=float, default=5.0)
    kill.add_argument("--max-error-rate", type=float, default=0.01)
    kill.add_argument("--max-p99", default=None, metavar="DURATION",
                      help="p99 latency the probe must stay under (default: spec.analysis.slo."
                           "e2eP99, else not checked)")
    outage = drill.add_argument_group("prometheus-outage")
    outage.add_argument("--outage", default="60s", help="how long Prometheus is cut (default 60s)")
    outage.add_argument("--cut-address", default="http://127.0.0.1:9",
                        help="the address the rollout analyses against meanwhile (default: a "
                             "closed loopback port)")


async def run(kube: Kube, ns: str, args: argparse.Namespace) -> int:
    """Run (or abort) a drill; the exit code: 0 pass or dry-run, 1 fail or aborted."""
    from . import drill_kinds

    path = rollout_path(ns, args.name)
    if args.kind == "abort":
        undone = await undo(kube, path)
        print(f"inferencerollout {ns}/{args.name}: " + (
            "drill aborted and undone" if undone else "no drill to undo"))
        return 0
    body = await kube.get(path)
    plan, act = drill_kinds.prepare(args.kind, kube, ns, body, args)
    record = DrillRecord(args.kind, ns, args.name, plan, dry_run=args.dry_run)
    print(f"Drill {args.kind} on {ns}/{args.name}:\n" + "\n".join(
        f"  {i}. {step}" for i, step in enumerate(plan, 1)), flush=True)
    if args.dry_run:
        return 0
    max_s = parse_duration(args.max_duration)
    try:
        async with asyncio.timeout(max_s):
            await act(record)
    except TimeoutError:
        record.aborted = f"max duration {args.max_duration} reached"
    except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels the main task)
        record.aborted = "interrupted"
    except DrillAborted as e:
        record.aborted = str(e)
    finally:  # only this drill's own change: a refused drill must not undo a running one
        if record.drill_id is not None and await asyncio.shield(
                undo(kube, path, record.drill_id)):
            record.note("undone: the rollout's spec is as before the drill")
    prefix = args.report or (f"drill-{args.kind}-{args.name}-"
                             f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}")
    written = record.write(prefix)
    print(f"\nDrill {args.kind}: {record.verdict.upper()} (report: "
          f"{', '.join(map(str, written))})", flush=True)
    await _record_result(kube, path, record)
    return 0 if record.verdict == "pass" else 1


class DrillAborted(Exception):
    """``drill abort`` removed the drill's annotation while the drill ran."""


async def begin(kube: Kube, path: ApiPath, record: DrillRecord, undo_ops: list[dict[str, Any]],
                change: list[dict[str, Any]]) -> None:
    """Mark the rollout as drilled, with what undoes the drill, and make the drill's change --
    one JSON patch, so there is never a change without its undo recorded.  Refused when another
    drill's mark is there.  The mark's id goes into ``record``: only its owner undoes it."""
    body = await kube.get(path)
    annotations = body["metadata"].get("annotations") or {}
    if ANN_DRILL in annotations:
        raise Refused(f"another drill is running on this rollout ({annotations[ANN_DRILL]}); "
                      "wait for it, or undo it with `kubectl inference-rollout drill abort NAME`")
    drill_id = uuid.uuid4().hex
    marks = [{"op": "add", "path": "/metadata/annotations", "value": {}}] if not annotations \
        else []
    marks += [
        {"op": "add", "path": f"/metadata/annotations/{_escape(ANN_DRILL)}",
         "value": json.dumps({"kind": record.kind, "id": drill_id,
                              "startedAt": datetime.now(UTC).isoformat()})},
        {"op": "add", "path": f"/metadata/annotations/{_escape(ANN_UNDO)}",
         "value": json.dumps(undo_ops)},
    ]
    await kube.request("PATCH", path, [{"op": "test", "path": "/metadata/resourceVersion",
                                        "value": body["metadata"]["resourceVersion"]},
                                       *marks, *change], "application/json-patch+json")
    record.drill_id = drill_id


async def still_running(kube: Kube, path: ApiPath) -> None:
    """Raise :class:`DrillAborted` when ``drill abort`` has undone this drill meanwhile."""
    body = await kube.get(path)
    if ANN_DRILL not in (body["metadata"].get("annotations") or {}):
        raise DrillAborted("aborted with `drill abort`")


async def undo(kube: Kube, path: ApiPath, drill_id: str | None = None) -> bool:
    """Apply the recorded undo and drop the marks, atomically (a JSON patch that tests the marks
    are still there, so two undos never both apply).  With ``drill_id``, only that drill's.
    False when there was nothing to undo."""
    for _attempt in range(5):
        body = await kube.get(path)
        annotations = body["metadata"].get("annotations") or {}
        if ANN_UNDO not in annotations or (
                drill_id is not None and _mark_id(annotations.get(ANN_DRILL)) != drill_id):
            return False
        ops = [{"op": "test", "path": f"/metadata/annotations/{_escape(ANN_UNDO)}",
                "value": annotations[ANN_UNDO]},
               *json.loads(annotations[ANN_UNDO]),
               {"op": "remove", "path": f"/metadata/annotations/{_escape(ANN_UNDO)}"},
               {"op": "remove", "path": f"/metadata/annotations/{_escape(ANN_DRILL)}"}]
        try:
            await kube.request("PATCH", path, ops, "application/json-patch+json")
            return True
        except KubeError as e:
            if e.status not in (409, 422):  # a concurrent write: read again
                raise
    raise KubeError(409, "PATCH", path, "the drill's undo kept conflicting; run drill abort")


def _mark_id(mark: str | None) -> str | None:
    try:
        return str(json.loads(mark or "{}").get("id"))
    except (ValueError, AttributeError):
        return None


def _escape(key: str) -> str:
    """An annotation key as a JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


async def _record_result(kube: Kube, path: ApiPath, record: DrillRecord) -> None:
    """Leave the result on the rollout (annotation ``last-drill``) for the operator, which posts
    the Event and notifies once per drill id (core/decide.py ``_record_drill``)."""
    failed = [c.name for c in record.checks if not c.passed]
    summary = (f"drill {record.kind}: {record.verdict}"
               + (f" ({record.aborted})" if record.aborted else "")
               + (f"; failed: {', '.join(failed)}" if failed else ""))
    result = {"id": record.drill_id or uuid.uuid4().hex, "kind": record.kind,
              "verdict": record.verdict, "summary": summary[:300]}
    try:
        await kube.merge_patch(path, {"metadata": {"annotations": {
            ANN_LAST_DRILL: json.dumps(result, separators=(",", ":"))}}})
    except KubeError as e:
        print(f"the result could not be left on the rollout for the operator to notify: "
              f"{e.message}")
        return
    print("result left on the rollout (annotation last-drill): the operator posts the Event "
          "and notifies as spec.notifications says")
