"""The Argo CD health check and resource actions (deploy/argocd), run by a real Lua interpreter.

Argo CD runs these scripts in gopher-lua (Lua 5.1) with only the base, table and a restricted os
library (util/lua/lua.go: no string or math library), the live object in the global ``obj``.
:func:`run_lua` mirrors that with lupa's Lua 5.1, so a script that needs a library Argo CD does
not load fails here too.  The status objects are built with the operator's own status model, so
field names cannot drift from what the operator writes; tests/sandbox/test_delivery_rbac.py feeds
the same scripts objects written by the real operator.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import lupa.lua51 as lupa  # a dev dependency (pyproject.toml): Lua 5.1, as Argo CD's gopher-lua
import pytest
import yaml

from inference_rollout.api.status import Condition, InferenceRolloutStatus

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
HEALTH_CODES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
ACTIONS = ("promote", "abort", "retry")

# --- a Lua VM like Argo CD's -------------------------------------------------------------------


def _to_lua(lua: Any, value: Any) -> Any:
    """JSON → Lua as Argo CD's decodeValue does: objects and arrays become tables (arrays
    1-based), null becomes nil (so the key is absent)."""
    if isinstance(value, dict):
        t = lua.table()
        for k, v in value.items():
            if v is not None:
                t[k] = _to_lua(lua, v)
        return t
    if isinstance(value, list):
        t = lua.table()
        for i, v in enumerate(value, start=1):
            t[i] = _to_lua(lua, v)
        return t
    return value


def _from_lua(value: Any) -> Any:
    """Lua → JSON: a table with keys 1..n is an array; an empty table is an empty object (Argo CD
    reconciles {} with [] against the live object before patching)."""
    if lupa.lua_type(value) != "table":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    keys = list(value.keys())
    if keys and all(isinstance(k, int) for k in keys) and sorted(keys) == list(
            range(1, len(keys) + 1)):
        return [_from_lua(value[i]) for i in range(1, len(keys) + 1)]
    return {str(k): _from_lua(value[k]) for k in keys}


def run_lua(script: Path, obj: dict[str, Any]) -> Any:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    # Argo CD opens package, base, table and a "safe" os (time, clock, date, difftime) only.
    lua.execute("string = nil; math = nil; io = nil; debug = nil; coroutine = nil; "
                "os = {time = os.time, clock = os.clock, date = os.date, difftime = os.difftime}")
    lua.globals().obj = _to_lua(lua, obj)
    return _from_lua(lua.execute(script.read_text()))


def health(obj: dict[str, Any]) -> dict[str, str]:
    """What Argo CD shows for ``obj``: {"status": ..., "message": ...}."""
    out = run_lua(ARGOCD / "health.lua", obj)
    assert isinstance(out, dict) and out.get("status") in HEALTH_CODES, out
    return out


def discover(obj: dict[str, Any]) -> dict[str, bool]:
    """Action name → enabled."""
    out = run_lua(ARGOCD / "actions" / "discovery.lua", obj)
    assert set(out) == set(ACTIONS), out
    return {name: not spec.get("disabled", False) for name, spec in out.items()}


def merge_diff(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch from ``old`` to ``new`` (what Argo CD computes before patching),
    treating {} and [] alike as Argo CD does."""
    if isinstance(old, dict) and isinstance(new, dict):
        patch: dict[str, Any] = {}
        for k in old.keys() | new.keys():
            if k not in new:
                patch[k] = None
            elif k not in old:
                patch[k] = new[k]
            else:
                sub = merge_diff(old[k], new[k])
                if sub != {}:
                    patch[k] = sub
        return patch
    if old in ({}, []) and new in ({}, []):
        return {}
    return {} if old == new else new


def run_action(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The merge patch the action makes to ``obj``."""
    live = copy.deepcopy(obj)
    new = run_lua(ARGOCD / "actions" / name / "action.lua", obj)
    assert obj == live, "the script must not see the caller's dict"
    return merge_diff(_normalise(live), new)


def _normalise(obj: Any) -> Any:
    """Drop nulls, as the Lua side cannot hold them."""
    if isinstance(obj, dict):
        return {k: _normalise(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_normalise(v) for v in obj]
    return obj


# --- objects shaped like the operator's ---------------------------------------------------------

NOW = "2026-12-01T12:00:00Z"


def cond(type_: str, status: str, reason: str, message: str = "") -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message,
                     last_transition_time=NOW, observed_generation=7)


def rollout(generation: int = 7, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
        "metadata": {"name": "chat", "namespace": "serving", "generation": generation,
                     "uid": "0b7e5f0e-1111-2222-3333-444455556666"},
        "spec": {"replicas": 2},
    }
    if status:
        body["status"] = InferenceRolloutStatus(**status).to_body()
    return body


HEALTHY: dict[str, Any] = {
    "phase": "Healthy", "observed_generation": 7, "stable_revision": "5c9f7d0000",
    "message": "", "conditions": [cond("Progressing", "False", "ReleaseComplete")]}
PROGRESSING: dict[str, Any] = {
    "phase": "Progressing", "observed_generation": 7, "stable_revision": "5c9f7d0000",
    "canary_revision": "7d1a2b0000", "current_step": 1, "canary_weight": 20,
    "message": "step 2/4: 20% for 3m12s of 24h; errors 0.001 (Pass: ≤ 0.01)"}
PAUSED: dict[str, Any] = {
    **PROGRESSING, "phase": "Paused", "paused_reason": "PauseRequested",
    "message": "step 2/4: 20% for 3m12s of 24h",
    "conditions": [cond("Paused", "True", "PauseRequested", "paused by request at 20%")]}
ABORTED: dict[str, Any] = {
    **PROGRESSING, "phase": "Degraded", "aborted": True, "abort_reason": "AnalysisFailed",
    "canary_weight": 0, "message": "rolled back (AnalysisFailed); retry or change the "
    "template", "conditions": [cond("Aborted", "True", "AnalysisFailed", "ttft-p99 0.9s")]}
INVALID: dict[str, Any] = {
    "phase": "Degraded", "observed_generation": 7, "stable_revision": "5c9f7d0000",
    "message": "invalid spec: metadata.name too long",
    "conditions": [cond("Valid", "False", "InvalidSpec",
                        "invalid spec: metadata.name: 60 characters is too long")]}

# --- health ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "want"), [
    (HEALTHY, "Healthy"), (PROGRESSING, "Progressing"), (PAUSED, "Suspended"),
    (ABORTED, "Degraded"), (INVALID, "Degraded"),
])
def test_each_phase_maps_to_an_argo_health(status: dict[str, Any], want: str) -> None:
    assert health(rollout(**status))["status"] == want


def test_messages_come_from_the_status() -> None:
    assert health(rollout(**PROGRESSING))["message"].startswith("step 2/4: 20%")
    assert health(rollout(**HEALTHY))["message"] == "stable revision 5c9f7d0000 serves all traffic"
    assert health(rollout(**PAUSED))["message"] == "paused by request at 20%"
    assert health(rollout(**ABORTED))["message"].startswith("rolled back (AnalysisFailed)")
    # an invalid spec explains itself in the Valid condition, not only in the summary
    assert health(rollout(**INVALID))["message"].endswith("60 characters is too long")


def adapter_pods(*versions: str | None) -> list[dict[str, Any]]:
    return [{"pod": f"chat-x-{i}", "version": v, "adapters": {"support": "/a"}}
            for i, v in enumerate(versions)]


def test_an_adapter_release_shows_its_pods_per_version() -> None:
    """docs/adapters.md: during an adapter release the message says how many pods each
    version has (one being moved is in none)."""
    out = health(rollout(**PROGRESSING, adapter_pods=adapter_pods(
        "5c9f7d0000", "5c9f7d0000", "7d1a2b0000", None)))
    assert out["status"] == "Progressing"
    assert out["message"].endswith("; adapter pods: 5c9f7d0000 2, 7d1a2b0000 1, moving 1"), out


def test_healthy_waits_for_every_adapter_pod_on_the_stable_version() -> None:
    # Given all traffic on the stable version, one pod still moving back after a rollback
    moving = health(rollout(**HEALTHY, adapter_pods=adapter_pods("5c9f7d0000", None)))
    assert moving["status"] == "Progressing"
    assert moving["message"].startswith("1 of 2 pods serve the stable version 5c9f7d0000"), moving
    # Then Healthy once every pod serves it
    done = health(rollout(**HEALTHY, adapter_pods=adapter_pods("5c9f7d0000", "5c9f7d0000")))
    assert done == health(rollout(**HEALTHY))


def test_a_status_for_an_older_generation_is_not_trusted() -> None:
    # Given the operator last saw generation 6 (Healthy on the old template)
    stale = rollout(generation=7, **{**HEALTHY, "observed_generation": 6})
    # Then Argo CD waits instead of reporting the old template's health
    out = health(stale)
    assert out["status"] == "Progressing"
    assert out["message"] == "waiting for the operator: observed generation 6, current 7"
    # also for a stale Degraded: a new template may be the fix
    assert health(rollout(generation=8, **ABORTED))["status"] == "Progressing"


@pytest.mark.parametrize("status", [None, {}, {"observedGeneration": 7}, {"phase": "Healthy"}])
def test_no_status_yet_is_progressing(status: dict[str, Any] | None) -> None:
    obj = rollout()
    if status is not None:
        obj["status"] = status
    out = health(obj)
    assert out == {"status": "Progressing",
                   "message": "waiting for the operator to observe the rollout"}


def test_an_unknown_phase_is_unknown() -> None:
    obj = rollout(**HEALTHY)
    obj["status"]["phase"] = "Exploding"
    assert health(obj) == {"status": "Unknown", "message": "unknown phase Exploding"}


# --- actions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "enabled"), [
    (None, set()),
    (HEALTHY, set()),
    (PROGRESSING, {"promote", "abort"}),
    (PAUSED, {"promote", "abort"}),
    (ABORTED, {"retry"}),
    (INVALID, set()),
])
def test_discovery_offers_what_applies(status: dict[str, Any] | None, enabled: set[str]) -> None:
    obj = rollout(**status) if status else rollout()
    assert {name for name, on in discover(obj).items() if on} == enabled


@pytest.mark.parametrize("action", ACTIONS)
def test_each_action_only_sets_its_request(action: str) -> None:
    # Given a rollout mid-release, with the operator's status (requests all false)
    obj = rollout(**PROGRESSING)
    # When the action runs, the only change is status.requests.<action> = true: Argo CD sends it
    # to the status subresource, the spec is untouched
    assert run_action(action, obj) == {"status": {"requests": {action: True}}}


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_work_before_the_operator_wrote_a_status(action: str) -> None:
    assert run_action(action, rollout()) == {"status": {"requests": {action: True}}}


def test_the_vm_withholds_what_argo_cd_withholds(tmp_path: Path) -> None:
    # A script calling string.* or math.* fails in Argo CD; run_lua must fail on it too, or the
    # tests above would not prove the scripts run there.
    for call in ("string.len('x')", "math.floor(1.5)"):
        script = tmp_path / "probe.lua"
        script.write_text(f"return {call}")
        with pytest.raises(lupa.LuaError):
            run_lua(script, {})


def test_the_argocd_cm_patch_carries_exactly_these_scripts() -> None:
    # deploy/argocd/argocd-cm.yaml is what users apply; the .lua files are what is tested above.
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    data = cm["data"]
    key = "rollouts.inference.dev_InferenceRollout"
    assert data[f"resource.customizations.health.{key}"] == (ARGOCD / "health.lua").read_text()
    actions = yaml.safe_load(data[f"resource.customizations.actions.{key}"])
    assert actions["discovery.lua"] == (ARGOCD / "actions" / "discovery.lua").read_text()
    assert {d["name"]: d["action.lua"] for d in actions["definitions"]} == {
        a: (ARGOCD / "actions" / a / "action.lua").read_text() for a in ACTIONS}
