"""``kubectl inference-rollout drill`` against an in-memory API server whose "operator" and
"Deployment controller" follow a script (tests/unit/memory_kube.py): the plan and its
refusals, the drill's mark and undo written before and after its change, each drill's checks
and verdict, the exit code and the Markdown/JSON report."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.memory_kube import MemoryKube

from inference_rollout.api import ANN_LAST_DRILL, DRILL_ID_PATTERN
from inference_rollout.cli import drill, drill_kinds, plugin
from inference_rollout.kube import KubeError
from inference_rollout.paths import ApiPath, ns_path, rollout_path
from irsandbox.manifests import container, inference_rollout

NS, NAME, STABLE, CANARY = "prod", "chat", "a1a1a1a1a1", "c1c1c1c1c1"
ROLLOUT = rollout_path(NS, NAME)
ROUTE = ns_path("gateway.networking.k8s.io", "v1", NS, "httproutes", NAME)
PODS = ns_path("", "v1", NS, "pods")
DEPLOYMENT = ns_path("apps", "v1", NS, "deployments", f"{NAME}-{STABLE}")
HEALTHY = {"phase": "Healthy", "stableRevision": STABLE, "canaryWeight": 0}


def rollout(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = inference_rollout(NAME, containers=[container(args=["--model", "m1"])], analysis={
        "interval": "10s", "prometheus": {"address": "http://prom:9090"},
        "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]})
    body["metadata"]["namespace"] = NS
    body["status"] = dict(HEALTHY if status is None else status)
    return body


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {drill_kinds.LABEL_ROLLOUT: NAME,
                                                 drill_kinds.LABEL_REVISION: STABLE}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class Scripted(MemoryKube):
    """Once a drill has marked the rollout, each read of it shows the next status of
    ``script`` (the operator at work); a deleted pod is replaced by a new Ready one."""

    def __init__(self, script: list[dict[str, Any]] | None = None) -> None:
        super().__init__({
            ROLLOUT: rollout(),
            ROUTE: {"metadata": {"name": NAME}, "spec": {"rules": [{"backendRefs": [
                {"name": f"{NAME}-{STABLE}", "weight": 100}]}]}},
            DEPLOYMENT: {"metadata": {"name": f"{NAME}-{STABLE}"}, "spec": {"replicas": 2}},
            f"{PODS}/p1": pod("p1"), f"{PODS}/p2": pod("p2")})
        self.script = list(script or [])
        self.replaced = 0

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        obj = self.objects.get(str(path))
        marked = obj is not None and drill.ANN_DRILL in (
            obj["metadata"].get("annotations") or {})
        if method == "GET" and str(path) == ROLLOUT and marked and self.script:
            obj = self.objects[ROLLOUT]
            obj["status"] = {**obj["status"], **self.script.pop(0)}
        out = await super().request(method, path, body, content_type, params, accept)
        if method == "DELETE" and str(path).startswith(PODS + "/"):
            self.replaced += 1
            self.put(f"{PODS}/new{self.replaced}", pod(f"new{self.replaced}"))
        return out


@pytest.fixture()
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(drill_kinds, "POLL_S", 0.0)
    yield


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kube: MemoryKube,
        *argv: str) -> tuple[int, str, str]:
    async def load(_kubeconfig: str | None) -> object:
        return object()

    monkeypatch.setattr(plugin, "load_configuration", load)
    monkeypatch.setattr(plugin, "Kube", lambda _cfg: kube)
    code = plugin.main(["drill", *argv, NAME, "-n", NS])
    out, err = capsys.readouterr()
    return code, out, err


def report(prefix: Path) -> dict[str, Any]:
    md = Path(f"{prefix}.md").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(Path(f"{prefix}.json").read_text(encoding="utf-8"))
    assert md.startswith(f"# Drill `{data['kind']}` on {NS}/{NAME}: **{data['verdict'].upper()}**")
    for check in data["checks"]:
        assert f"| {check['name']} |" in md
    return data


def test_a_dry_run_prints_the_plan_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kube = Scripted()
    code, out, _ = run(monkeypatch, capsys, kube, "canary-fault", "--dry-run",
                       "--annotation", "sim.inference.dev/failure-rate=30", "--within", "2")
    assert code == 0
    assert out.splitlines()[0] == f"Drill canary-fault on {NS}/{NAME}:"
    assert "  3. verify the operator rolls it back within 2 analysis intervals (20 s)" in out
    assert kube.writes() == []


@pytest.mark.parametrize(("status", "argv", "message"), [
    ({}, ["pod-kill"], "the rollout has no stable revision yet"),
    ({**HEALTHY, "phase": "Progressing", "canaryRevision": CANARY}, ["pod-kill"],
     f"the rollout is mid-release (phase Progressing, canary {CANARY})"),
    (HEALTHY, ["canary-fault"], "canary-fault needs a fault: --annotation, --env or --arg"),
    (HEALTHY, ["canary-fault", "--env", "NOEQUALS"], "--env 'NOEQUALS': write KEY=VALUE"),
])
def test_refused_drills_say_why_and_change_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        status: dict[str, Any], argv: list[str], message: str) -> None:
    kube = Scripted()
    kube.put(ROLLOUT, rollout(status))
    code, _, err = run(monkeypatch, capsys, kube, *argv)
    assert code == 1 and err.startswith(f"error: {message}"), err
    assert kube.writes() == []


def test_a_caught_canary_fault_passes_and_the_template_is_restored(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = Scripted(script=[
        {"phase": "Progressing", "canaryRevision": CANARY, "canaryWeight": 0},
        {"canaryWeight": 5},
        {"canaryWeight": 0, "aborted": True, "abortReason": "AnalysisFailed",
         "message": "errors 0.3", "phase": "Degraded"}])
    original = kube.objects[ROLLOUT]["spec"]["template"]
    prefix = tmp_path / "fault"
    code, out, _ = run(monkeypatch, capsys, kube, "canary-fault", "--report", str(prefix),
                       "--annotation", "sim.inference.dev/failure-rate=30",
                       "--env", "FAIL=1", "--arg=--bad")
    assert code == 0, out
    assert "Drill canary-fault: PASS" in out
    # the faulty template was written together with the drill's mark and its undo
    (_, _, ops) = next(c for c in kube.writes("PATCH") if c[1] == ROLLOUT)
    assert ops[0]["op"] == "test" and ops[0]["path"] == "/metadata/resourceVersion"
    faulty = ops[-1]["value"]
    assert faulty["metadata"]["annotations"] == {"sim.inference.dev/failure-rate": "30"}
    serving = faulty["spec"]["containers"][0]
    assert serving["env"] == [{"name": "FAIL", "value": "1"}]
    assert serving["args"] == ["--model", "m1", "--bad"]
    stored = kube.objects[ROLLOUT]
    assert stored["spec"]["template"] == original
    assert drill.ANN_DRILL not in stored["metadata"].get("annotations", {})
    data = report(prefix)
    assert data["verdict"] == "pass" and data["numbers"]["outcome"] == "rolled back"
    assert {c["name"] for c in data["checks"]} == {
        "traffic on stable before", "the faulty canary was rolled back",
        "rolled back within 3 intervals", "traffic on stable after"}


def test_a_promoted_fault_fails_the_drill(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = Scripted(script=[{"canaryRevision": CANARY, "canaryWeight": 50},
                            {"stableRevision": CANARY, "canaryWeight": 0}])
    code, out, _ = run(monkeypatch, capsys, kube, "canary-fault", "--report",
                       str(tmp_path / "f"), "--annotation", "x=1")
    assert code == 1 and "Drill canary-fault: FAIL" in out
    data = report(tmp_path / "f")
    assert data["numbers"]["outcome"] == "promoted"
    assert [c["passed"] for c in data["checks"]] == [True, False]


def test_pod_kill_deletes_ready_pods_and_verifies_they_come_back(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = Scripted()
    code, out, _ = run(monkeypatch, capsys, kube, "pod-kill", "--count", "2",
                       "--report", str(tmp_path / "k"))
    assert code == 0, out
    deleted = sorted(p for m, p, _ in kube.writes("DELETE"))
    assert deleted == [f"{PODS}/p1", f"{PODS}/p2"]
    data = report(tmp_path / "k")
    assert [(c["name"], c["passed"]) for c in data["checks"]] == [
        ("traffic on stable before", True), ("route stayed on stable", True),
        ("pods back within 3m", True)]
    assert "seconds_to_recover" in data["numbers"]
    assert drill.ANN_DRILL not in kube.objects[ROLLOUT]["metadata"].get("annotations", {})


def test_pod_kill_refuses_to_kill_more_pods_than_are_ready(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        no_waiting: None) -> None:
    kube = Scripted()
    code, _, err = run(monkeypatch, capsys, kube, "pod-kill", "--count", "3")
    assert code == 1
    assert err.startswith(f"error: revision {STABLE} has 2 Ready pods, fewer than --count 3")
    assert kube.writes("DELETE") == []


TEMPLATE = "7e7e7e7e7e"  # an adapter rollout's pods carry their template's hash, not the version


class AdapterFleet(Scripted):
    """A rollout with adapters: one Deployment named by its template, the pods labelled with
    the template's hash, and ``status.adapterPods`` saying which serving version each serves.
    A deleted pod's replacement is in no version until the operator has loaded and admitted
    it, ``admit_after`` reads of the rollout later (never, with None)."""

    def __init__(self, admit_after: int | None) -> None:
        super().__init__()
        del self.objects[DEPLOYMENT]
        self.put(ns_path("apps", "v1", NS, "deployments", f"{NAME}-{TEMPLATE}"),
                 {"metadata": {"name": f"{NAME}-{TEMPLATE}"}, "spec": {"replicas": 2}})
        for name in ("p1", "p2"):
            self.put(f"{PODS}/{name}", self.adapter_pod(name))
        self.objects[ROLLOUT]["spec"]["replicas"] = 2
        self.objects[ROLLOUT]["status"]["adapterPods"] = [
            {"pod": "p1", "version": STABLE, "adapters": {"support": "/v1"}},
            {"pod": "p2", "version": STABLE, "adapters": {"support": "/v1"}}]
        self.admit_after, self.reads = admit_after, 0
        self.waiting: list[str] = []

    @staticmethod
    def adapter_pod(name: str) -> dict[str, Any]:
        body = pod(name)
        body["metadata"]["labels"][drill_kinds.LABEL_REVISION] = TEMPLATE
        return body

    async def request(self, method: str, path: ApiPath, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None,
                      accept: str | None = None) -> dict[str, Any]:
        status = self.objects[ROLLOUT]["status"]
        if method == "GET" and str(path) == ROLLOUT and self.waiting:
            self.reads += 1
            if self.admit_after is not None and self.reads >= self.admit_after:
                status["adapterPods"] += [{"pod": p, "version": STABLE, "adapters": {}}
                                          for p in self.waiting]
                self.waiting = []
        out = await super().request(method, path, body, content_type, params, accept)
        if method == "DELETE" and str(path).startswith(PODS + "/"):
            gone, new = str(path).rsplit("/", 1)[1], f"new{self.replaced}"
            self.put(f"{PODS}/{new}", self.adapter_pod(new))  # Ready, but not yet admitted
            status["adapterPods"] = [p for p in status["adapterPods"] if p["pod"] != gone]
            self.waiting.append(new)
        return out


def test_pod_kill_on_a_rollout_with_adapters_waits_for_the_replacements_to_serve_the_stable(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = AdapterFleet(admit_after=5)
    code, out, _ = run(monkeypatch, capsys, kube, "pod-kill", "--count", "2",
                       "--report", str(tmp_path / "k"))
    assert code == 0, out
    assert sorted(p for m, p, _ in kube.writes("DELETE")) == [f"{PODS}/p1", f"{PODS}/p2"]
    assert kube.reads >= 5 and not kube.waiting  # back only once admitted, not once Ready
    data = report(tmp_path / "k")
    assert [c["passed"] for c in data["checks"]] == [True, True, True]


def test_pod_kill_on_a_rollout_with_adapters_fails_if_no_replacement_is_admitted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = AdapterFleet(admit_after=None)  # Ready pods the operator never loads
    code, out, _ = run(monkeypatch, capsys, kube, "pod-kill", "--count", "1",
                       "--recovery-timeout", "1s", "--report", str(tmp_path / "k"))
    assert code == 1, out
    back = next(c for c in report(tmp_path / "k")["checks"] if c["name"].startswith("pods back"))
    assert not back["passed"] and back["detail"] == "not all Ready in time"


def test_an_outage_that_is_not_measured_as_errors_fails_and_is_undone(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        no_waiting: None) -> None:
    kube = Scripted(script=[{"canaryRevision": CANARY, "canaryWeight": 5, "currentStep": 0}])
    code, out, _ = run(monkeypatch, capsys, kube, "prometheus-outage", "--outage", "0s",
                       "--report", str(tmp_path / "o"))
    assert code == 1 and "Drill prometheus-outage: FAIL" in out
    cut = [ops for m, p, ops in kube.writes("PATCH")
           if p == ROLLOUT and isinstance(ops, list) and len(ops) == 1]
    assert cut == [[{"op": "replace", "path": "/spec/analysis/prometheus/address",
                     "value": "http://127.0.0.1:9"}]]
    assert kube.objects[ROLLOUT]["spec"]["analysis"]["prometheus"]["address"] == \
        "http://prom:9090"
    # the result is left on the rollout for the operator to record and notify (the CLI sends
    # nothing: the import contract forbids it the notifier)
    last = json.loads(kube.objects[ROLLOUT]["metadata"]["annotations"][ANN_LAST_DRILL])
    assert (last["kind"], last["verdict"]) == ("prometheus-outage", "fail")
    assert last["summary"] == ("drill prometheus-outage: fail; failed: the outage was measured "
                               "as errors")
    assert re.fullmatch(DRILL_ID_PATTERN, last["id"])
    checks = {c["name"]: c["passed"] for c in report(tmp_path / "o")["checks"]}
    assert checks == {"no promotion without evidence": True,
                      "the outage was measured as errors": False}


def test_an_outage_drill_needs_a_prometheus(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kube = Scripted()
    del kube.objects[ROLLOUT]["spec"]["analysis"]
    code, _, err = run(monkeypatch, capsys, kube, "prometheus-outage")
    assert code == 1 and "no spec.analysis.prometheus: nothing to cut" in err


def test_drill_abort_undoes_a_drill_whose_process_died(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    kube = Scripted()
    code, out, _ = run(monkeypatch, capsys, kube, "abort")
    assert code == 0 and out.strip() == f"inferencerollout {NS}/{NAME}: no drill to undo"
    obj = kube.objects[ROLLOUT]
    original = obj["spec"]["template"]
    obj["metadata"]["annotations"] = {
        drill.ANN_DRILL: json.dumps({"kind": "canary-fault", "id": "d1"}),
        drill.ANN_UNDO: json.dumps([{"op": "replace", "path": "/spec/template",
                                     "value": original}])}
    obj["spec"]["template"] = {"metadata": {"annotations": {"fault": "1"}}, "spec": {}}
    code, out, _ = run(monkeypatch, capsys, kube, "abort")
    assert out.strip() == f"inferencerollout {NS}/{NAME}: drill aborted and undone"
    assert kube.objects[ROLLOUT]["spec"]["template"] == original
    assert kube.objects[ROLLOUT]["metadata"]["annotations"] == {}


def test_a_second_drill_is_refused_while_one_is_marked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        no_waiting: None) -> None:
    kube = Scripted()
    kube.objects[ROLLOUT]["metadata"]["annotations"] = {drill.ANN_DRILL: "pod-kill (other)"}
    code, _, err = run(monkeypatch, capsys, kube, "pod-kill")
    assert code == 1
    assert "another drill is running on this rollout (pod-kill (other))" in err
    assert kube.objects[ROLLOUT]["metadata"]["annotations"] == {
        drill.ANN_DRILL: "pod-kill (other)"}  # a refused drill undoes nobody else's


def test_undo_gives_up_after_repeated_conflicts_and_raises_other_errors() -> None:
    kube = Scripted()
    kube.objects[ROLLOUT]["metadata"]["annotations"] = {
        drill.ANN_DRILL: json.dumps({"id": "d1"}), drill.ANN_UNDO: "[]"}
    kube.fail[("PATCH", ROLLOUT)] = KubeError(409, "PATCH", ROLLOUT, "conflict")
    with pytest.raises(KubeError, match="the drill's undo kept conflicting"):
        asyncio.run(drill.undo(kube, ROLLOUT))
    assert asyncio.run(drill.undo(kube, ROLLOUT, drill_id="someone-else")) is False
    kube.fail[("PATCH", ROLLOUT)] = KubeError(403, "PATCH", ROLLOUT, "forbidden")
    with pytest.raises(KubeError, match="forbidden"):
        asyncio.run(drill.undo(kube, ROLLOUT))
    assert drill._mark_id("not json") is None and drill._escape("a/b~c") == "a~1b~0c"
