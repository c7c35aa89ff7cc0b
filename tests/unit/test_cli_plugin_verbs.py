"""``kubectl inference-rollout`` against an in-memory API server (tests/unit/memory_kube.py):
what each verb prints and writes, its exit code, and the one-line explanations of the API's
refusals.  Only the loading of a kubeconfig and the client's construction are replaced."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.memory_kube import MemoryKube

from inference_rollout.api import reasons as r
from inference_rollout.cli import plugin
from inference_rollout.kube import KubeError
from inference_rollout.paths import ns_path, rollout_path
from irsandbox.manifests import inference_rollout

NS, NAME = "prod", "chat"
ROLLOUT = rollout_path(NS, NAME)
EVENTS = ns_path("", "v1", NS, "events")
ANALYSIS = {"interval": "10s", "prometheus": {"address": "http://unused:9090"},
            "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]}


def rollout(status: dict[str, Any] | None = None, generation: int = 2) -> dict[str, Any]:
    body = inference_rollout(NAME, analysis=ANALYSIS)
    body["metadata"].update(namespace=NS, generation=generation)
    body["status"] = status or {"phase": "Healthy", "observedGeneration": generation,
                                "stableRevision": "a1a1a1a1a1", "canaryWeight": 0}
    return body


@pytest.fixture()
def kube(monkeypatch: pytest.MonkeyPatch) -> MemoryKube:
    api = MemoryKube({ROLLOUT: rollout()})

    async def load(_kubeconfig: str | None) -> object:
        return object()

    monkeypatch.setattr(plugin, "load_configuration", load)
    monkeypatch.setattr(plugin, "Kube", lambda _cfg: api)
    return api


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = plugin.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_get_prints_the_rollout_as_json_yaml_and_text(kube: MemoryKube,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "get", NAME, "-n", NS, "-o", "json")
    assert code == 0 and json.loads(out)["status"]["stableRevision"] == "a1a1a1a1a1"
    code, out, _ = run(capsys, "get", NAME, "-n", NS, "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["metadata"]["name"] == NAME
    code, out, _ = run(capsys, "get", NAME, "-n", NS)
    assert code == 0 and "a1a1a1a1a1" in out and "Healthy" in out
    assert kube.closed and kube.writes() == []


@pytest.mark.parametrize(("argv", "request_"), [
    (["promote"], "promote"), (["promote", "--full"], "promoteFull"), (["abort"], "abort"),
    (["retry"], "retry"), (["pause"], "pause"), (["resume"], "resume")])
def test_steering_writes_one_request_through_the_status_subresource(
        kube: MemoryKube, capsys: pytest.CaptureFixture[str], argv: list[str],
        request_: str) -> None:
    code, out, _ = run(capsys, *argv, NAME, "-n", NS)
    assert code == 0
    assert out.strip() == (f"inferencerollout {NS}/{NAME}: {argv[0]}"
                           f"{' --full' if request_ == 'promoteFull' else ''} requested")
    ((method, path, body),) = kube.writes()
    assert (method, path) == ("PATCH", ROLLOUT + "/status")
    assert body == {"status": {"requests": {request_: True}}}
    assert kube.objects[ROLLOUT]["spec"] == rollout()["spec"]  # the spec is never touched


@pytest.mark.parametrize(("error", "message"), [
    (None, f"error: inferencerollout {NS}/other not found (check -n NAMESPACE)"),
    (KubeError(404, "GET", ROLLOUT, "the server could not find the requested resource"),
     "error: the InferenceRollout CRD is not installed"),
    (KubeError(403, "GET", ROLLOUT, '{"message": "user cannot get"}'),
     "error: no permission: user cannot get"),
    (KubeError(0, "GET", ROLLOUT, "ClientConnectorError: refused"),
     "error: no cluster: cannot reach the API server (ClientConnectorError: refused)"),
    (KubeError(500, "GET", ROLLOUT, "etcd is down"), "error: GET"),
    (OSError("network is unreachable"), "error: no cluster: cannot reach the API server"),
])
def test_refusals_are_one_line_with_exit_code_1(kube: MemoryKube,
                                               capsys: pytest.CaptureFixture[str],
                                               error: Exception | None, message: str) -> None:
    if error is not None:  # None: no such object, and the in-memory API answers 404 itself
        kube.fail[("GET", rollout_path(NS, "other"))] = error
    code, out, err = run(capsys, "abort", "other", "-n", NS)
    assert code == 1 and out == ""
    assert err.startswith(message) and "Traceback" not in err
    assert kube.writes() == []  # nothing requested of a rollout that could not be read


def test_no_kubeconfig_is_explained(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    async def load(_kubeconfig: str | None) -> object:
        raise RuntimeError("no file")

    monkeypatch.setattr(plugin, "load_configuration", load)
    code, _, err = run(capsys, "get", NAME, "-n", NS)
    assert code == 1 and err == "error: no cluster: cannot load kubeconfig (no file)\n"


def test_the_namespace_comes_from_the_kubeconfigs_context(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u",
                                                 "namespace": "team-a"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://x"}}],
        "users": [{"name": "u", "user": {}}]}))
    assert plugin._namespace(None, str(config)) == "team-a"
    assert plugin._namespace("explicit", str(config)) == "explicit"
    assert plugin._namespace(None, str(tmp_path / "missing")) == "default"


@pytest.mark.parametrize(("status", "code"), [
    ({"phase": "Healthy", "observedGeneration": 2}, 0),
    ({"phase": "Degraded", "observedGeneration": 2, "canaryRevision": "c1c1c1c1c1"}, 1),
    ({"phase": "Healthy", "observedGeneration": 1}, 2),  # an older generation's Healthy
    ({"phase": "Progressing", "observedGeneration": 2, "canaryRevision": "c1c1c1c1c1"}, 2),
])
def test_watch_exits_by_the_phase_of_the_current_generation(
        kube: MemoryKube, capsys: pytest.CaptureFixture[str], status: dict[str, Any],
        code: int) -> None:
    kube.put(ROLLOUT, rollout(status))
    kube.put(f"{EVENTS}/e1", {"metadata": {"name": "e1"}, "type": "Warning",
                              "reason": "AnalysisFailed", "message": "rolled back",
                              "involvedObject": {"name": NAME, "kind": "InferenceRollout"},
                              "lastTimestamp": "2026-12-01T12:00:00Z"})
    got, out, err = run(capsys, "watch", NAME, "-n", NS, "--timeout", "0s", "--interval", "0")
    assert got == code
    assert "Recent events:" in out and "AnalysisFailed" in out
    assert ("timed out after 0s" in err) == (code == 2)


def event(at: datetime, reason: str, message: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{reason}-{at.timestamp():.0f}"}, "type": "Normal",
            "reason": reason, "message": message,
            "involvedObject": {"name": NAME, "kind": "InferenceRollout"},
            "lastTimestamp": at.isoformat().replace("+00:00", "Z")}


def test_report_writes_the_release_page_and_says_what_it_holds(
        kube: MemoryKube, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    for e in (event(t0, r.NEW_RELEASE, r.NEW_RELEASE_MSG.format(
                  canary="c1c1c1c1c1", stable="a1a1a1a1a1", steps=2)),
              event(t0 + timedelta(seconds=20), r.STEP_WEIGHT_SET, r.STEP_WEIGHT_SET_MSG.format(
                  step=1, steps=2, weight=5, canary="c1c1c1c1c1")),
              event(t0 + timedelta(seconds=60), r.PROMOTED, r.PROMOTED_MSG.format(
                  canary="c1c1c1c1c1", old="a1a1a1a1a1", delay="1m"))):
        kube.put(f"{EVENTS}/{e['metadata']['name']}", e)
    page = tmp_path / "release.html"
    code, out, _ = run(capsys, "report", NAME, "-n", NS, "-o", str(page))
    assert code == 0
    assert out.strip() == (f"{page}: release c1c1c1c1c1 of {NS}/{NAME}, Promoted "
                           "(3 events, weights from events)")
    html = page.read_text(encoding="utf-8")
    assert "c1c1c1c1c1" in html and "<svg" in html
    code, out, _ = run(capsys, "report", NAME, "-n", NS, "-o", "-", "--since", "1h")
    assert code == 0 and out.lstrip().startswith("<!") and "c1c1c1c1c1" in out


def test_report_of_an_unknown_release_says_why(kube: MemoryKube,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "report", NAME, "-n", NS, "--release", "ffffffffff")
    assert code == 1
    assert err.startswith("error: no NewRelease Event names revision ffffffffff")
