"""Adapter releases end to end (issue 31, item 1; docs/adapters.md): the operator as a process
(``--adapter-releases``), the sandbox's API server and Prometheus, Traefik carrying requests for
the adapter's model name, and a simulator per pod with runtime LoRA whose adapters the operator
loads at each pod's own address.

What is checked is what a user and an SRE would look at: the pods (same UIDs, no restart: no
pod was started or replaced), each pod's own ``/v1/models`` (the adapter version it serves),
and the answers through the gateway (when the canary's first one came, and none failed).
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from inference_rollout.api import ANN_ADAPTER_SET_MOVED_AT
from inference_rollout.workloads.lora import PodServer, VLLMAdapters
from irsandbox.harness import plugin
from irsandbox.manifests import with_template
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

ADAPTER, V1, V2 = "support", "/adapters/support/v1", "/adapters/support/v2"
#: The sandbox's bad adapter: the shim fails every request to its name (irsandbox.faultproxy).
BAD = "/adapters/support/v2?sim-failure-rate=100"
PODS = 4


def lora_rollout(given: Given, name: str) -> dict[str, Any]:
    """Four simulator pods with runtime LoRA (the switches the lints ask for) serving
    ``support`` at v1; error rate analysed per 5 s window."""
    m = given.manifest(name, replicas=PODS)
    vllm = m["spec"]["template"]["spec"]["containers"][0]
    vllm["args"] += ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16"]
    vllm["env"] = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}]
    m["spec"]["adapters"] = [{"name": ADAPTER, "source": V1}]
    return m


def adapters_change(story: Story, source: str) -> None:
    rel = story.release
    changed = copy.deepcopy(rel.manifest)
    changed["spec"]["adapters"] = [{"name": ADAPTER, "source": source}]
    rel.apply(changed)


def pods(story: Story) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in story.cluster.pods(
        story.ns, f"rollouts.inference.dev/rollout={story.release.name}")}


def identities(story: Story) -> dict[str, tuple[str, int]]:
    """Each pod's uid and container restarts: equal before and after means no pod was
    started, replaced or restarted."""
    return {name: (p["metadata"]["uid"], sum(c.get("restartCount", 0) for c in
                                              p["status"].get("containerStatuses") or []))
            for name, p in pods(story).items()}


def served(story: Story) -> dict[str, str | None]:
    """Each pod's own ``/v1/models``: the source its ``support`` adapter was loaded from."""
    async def read() -> dict[str, str | None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            lora = VLLMAdapters(client)
            found = pods(story)
            lists = await asyncio.gather(*(lora.loaded(PodServer(p["status"]["podIP"], 8000))
                                           for p in found.values()))
            return {name: loaded.get(ADAPTER) for name, loaded in zip(found, lists, strict=True)}
    return asyncio.run(read())


def versions(status: dict[str, Any]) -> dict[str, str | None]:
    """``status.adapterPods``: pod -> the serving version whose Service selects it."""
    return {p["pod"]: p.get("version") for p in status.get("adapterPods") or []}


def admitted_at(story: Story, pod: str) -> float:
    text = pods(story)[pod]["metadata"]["annotations"][ANN_ADAPTER_SET_MOVED_AT]
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_good_adapter_release_is_promoted_with_no_new_pod_and_no_restart(
        given: Given, when: When, then: Then, story: Story) -> None:
    # Given four pods serving support v1, admitted by the operator (started `pending`)
    v1 = given.rollout(manifest=lora_rollout(given, "lora"))
    before = identities(story)
    assert len(before) == PODS
    assert set(served(story).values()) == {V1}
    assert set(versions(story.release.status()).values()) == {v1}
    # When the adapter's source changes, and nothing else, under requests for the adapter
    with then.traffic_throughout(rate=20, model=ADAPTER) as watch:
        changed_at = time.time()
        adapters_change(story, V2)
        v2 = then.canary(timeout=30)
        # Then the canary carries 5 % within seconds, on one moved pod
        st = then.hold_starts(5, canary=v2, timeout=30)
        on_canary = [p for p, v in versions(st).items() if v == v2]
        assert len(on_canary) == 1, st.get("adapterPods")
        then.status(lambda s: any(
            pod in on_canary and t > admitted_at(story, pod) for t, pod_ns, _ in watch.answers
            for pod in [pod_ns.split("/")[-1]]), 30, "the canary's first answer")
        # and the release is promoted through every step
        done = then.healthy(revision=v2, timeout=240)
    first = min(t for t, pod_ns, error in watch.answers if not error
                and pod_ns.split("/")[-1] in on_canary
                and t > admitted_at(story, pod_ns.split("/")[-1]))
    print(f"adapter release: first canary answer {first - changed_at:.1f}s after the change, "
          f"promoted after {done['releaseCost']['decidedAfter']:.0f}s, "
          f"{len(watch.answers)} answers")
    assert first - changed_at < 10, f"first canary answer {first - changed_at:.1f}s after"
    assert done["analysis"]["errors"]["verdict"] == "Pass"
    report = watch.report
    assert report is not None and report.failed == 0, report.summary()
    # No pod was started, replaced or restarted, and every pod serves v2, by its own word
    then.status(lambda s: set(versions(s).values()) == {v2}, 60, "every pod on v2")
    assert identities(story) == before
    assert set(served(story).values()) == {V2}
    then.route_is({v2: 100})
    cost = done.get("releaseCost") or {}
    assert cost.get("podsStarted", 0) == 0, cost


def test_a_bad_adapter_is_rolled_back_and_every_pod_serves_the_previous_version(
        given: Given, when: When, then: Then, story: Story) -> None:
    v1 = given.rollout(manifest=lora_rollout(given, "badlora"))
    before = identities(story)
    # When the new adapter version fails every request to its name
    with then.traffic_throughout(rate=20, model=ADAPTER):
        adapters_change(story, BAD)
        st = then.degraded(timeout=120, what="the bad adapter rolled back")
    assert st["abortReason"] == "AnalysisFailed", st.get("message")
    assert st["analysis"]["errors"]["verdict"] == "Fail"
    then.route_becomes({v1: 100, st["canaryRevision"]: 0})
    # Then its pods go back: every pod serves v1 again, by its own /v1/models, none restarted
    then.status(lambda s: set(versions(s).values()) == {v1}, 60, "every pod back on v1")
    assert set(served(story).values()) == {V1}
    assert identities(story) == before


@pytest.mark.timeout(600)
def test_the_operator_killed_at_each_phase_of_an_adapter_release_ends_right(
        given: Given, when: When, then: Then, story: Story) -> None:
    """SIGKILL right after the change (Services and first moves), at 5 % (a pod moved), at
    50 % (pods mid-move), and at 100 % or promotion: the release ends promoted, every pod
    serving v2 by its own word, none restarted."""
    v1 = given.rollout(manifest=lora_rollout(given, "killlora"))
    before = identities(story)
    with then.traffic_throughout(rate=20, model=ADAPTER):
        adapters_change(story, V2)
        when.operator_killed(down_for=2)
        v2 = then.canary(timeout=30)
        for weight in (5, 50, 100):
            then.status(lambda s, w=weight: (s.get("canaryWeight") or 0) >= w
                        or s.get("stableRevision") == v2, 120, f"{weight}% or promoted")
            when.operator_killed(down_for=2)
        done = then.healthy(revision=v2, timeout=240)
    assert done["stableRevision"] == v2 and v1 != v2
    then.status(lambda s: set(versions(s).values()) == {v2}, 90, "every pod on v2")
    assert set(served(story).values()) == {V2}
    assert identities(story) == before


def test_a_template_release_during_an_adapter_release_supersedes_it(
        given: Given, when: When, then: Then, story: Story) -> None:
    """docs/adapters.md: a new template mid-adapter-release is a template release whose new
    pods load the spec's adapters before they take traffic; the adapter release's weight goes
    to 0 at once and the old template's pods go once it is promoted."""
    given.rollout(manifest=lora_rollout(given, "mixlora"))
    old_pods = set(identities(story))
    (old_deployment,) = story.cluster.deployments(story.ns)
    with then.traffic_throughout(rate=20, model=ADAPTER) as watch:
        # Given an adapter release (support v2) holding 20 %
        adapters_change(story, V2)
        adapter_canary = then.canary(timeout=30)
        then.hold_starts(20, canary=adapter_canary, timeout=60)
        # When the template changes too (a new image), adapters as they are in the spec (v2)
        rel = story.release
        rel.apply(with_template(rel.manifest, version="v2"))
        # Then the new template's revision is the canary, the adapter release's weight is gone
        st = then.status(lambda s: s.get("canaryRevision") not in (None, adapter_canary),
                         30, "the template release replaces the adapter release")
        v3 = st["canaryRevision"]
        assert rel.route().get(adapter_canary, 0) == 0, rel.route()
        # and it is promoted, its pods serving the spec's adapters (v2), the old pods gone
        then.healthy(revision=v3, timeout=240)
    then.status(lambda s: set(versions(s).values()) == {v3}, 90, "every pod on the new version")
    then.status(lambda s: not old_pods & set(identities(story)), 90, "the old template's pods gone")
    assert set(served(story).values()) == {V2}
    assert len(identities(story)) == PODS
    then.route_is({v3: 100})
    then.status(lambda s: old_deployment not in story.cluster.deployments(story.ns), 60,
                "the old template's Deployment deleted")
    report = watch.report
    assert report is not None and report.failed == 0, report.summary()


def test_a_pod_replaced_mid_release_serves_its_set_before_it_takes_traffic(
        given: Given, when: When, then: Then, story: Story) -> None:
    """A stable pod deleted at 20 %: its ReplicaSet's replacement starts ``pending`` (in no
    Service), is loaded with the set it is to serve and only then admitted, so it never
    answers for a set it does not serve (a 404 for the adapter, or another version); the
    release is promoted with every pod, the new one too, on v2.  The deleted pod itself may
    fail the requests the gateway had sent it (KWOK deletes a pod at once, with no graceful
    termination): those are the only failures allowed, each a 502 to its address."""
    given.rollout(manifest=lora_rollout(given, "replora"))
    with then.traffic_throughout(rate=20, model=ADAPTER) as watch:
        adapters_change(story, V2)
        v2 = then.canary(timeout=30)
        st = then.hold_starts(20, canary=v2, timeout=60)
        v1 = st["stableRevision"]
        victim = next(p for p, v in versions(st).items() if v == v1)
        victim_ip = pods(story)[victim]["status"]["podIP"]
        story.cluster.kubectl("-n", story.ns, "delete", "pod", victim, "--wait=false")
        # Then a new pod comes, is admitted to a set only once its /v1/models serves it
        then.status(lambda s: victim not in versions(s) and len(versions(s)) == PODS
                    and None not in versions(s).values(), 90, "the replacement admitted")
        done = then.healthy(revision=v2, timeout=240)
    assert done["stableRevision"] == v2
    then.status(lambda s: set(versions(s).values()) == {v2}, 90, "every pod on v2")
    assert set(served(story).values()) == {V2}
    report = watch.report
    assert report is not None
    deleted = sum(n for what, n in report.gateway_failures.items()
                  if what.startswith("502 ") and what.endswith(f"-> {victim_ip}:8000"))
    assert report.failed == deleted, report.summary()
    assert deleted <= 5, report.summary()  # what was in flight to it: a second's worth at most


def test_removing_the_adapters_unloads_them_from_every_pod_with_no_restart(
        given: Given, when: When, then: Then, story: Story) -> None:
    """``spec.adapters`` removed, the template unchanged: a release of the empty set, carried
    like any adapter release (a share of the running pods per step, drained, unloaded,
    relabelled), so the base model keeps answering throughout and no pod is started."""
    v1 = given.rollout(manifest=lora_rollout(given, "unlora"))
    before = identities(story)
    rel = story.release
    with then.traffic_throughout(rate=20) as watch:  # the base model's name
        plain = copy.deepcopy(rel.manifest)
        del plain["spec"]["adapters"]
        rel.apply(plain)
        bare = then.canary(timeout=30)
        then.hold_starts(5, canary=bare, timeout=30)
        done = then.healthy(revision=bare, timeout=240)
    assert done["stableRevision"] == bare and bare != v1
    then.status(lambda s: set(versions(s).values()) == {bare}, 60, "every pod on the bare set")
    assert set(served(story).values()) == {None}  # no pod lists the adapter any more
    assert identities(story) == before
    then.route_is({bare: 100})
    then.status(lambda s: f"{rel.name}-{v1}" not in {
        svc.metadata.name for svc in story.cluster.core.list_namespaced_service(story.ns).items},
        90, "the adapters' version's Service deleted")
    report = watch.report
    assert report is not None and report.failed == 0, report.summary()


def test_a_pod_kill_drill_counts_a_replacement_back_once_it_serves_the_stable(
        given: Given, when: When, then: Then, story: Story, tmp_path: Any) -> None:
    """``kubectl inference-rollout drill pod-kill`` on a rollout with adapters: the stable's
    pods are the ones ``status.adapterPods`` puts on it (its Deployment is named by the
    template, its pods labelled by it), and the pod is back only once its replacement has
    been loaded and admitted, not once it is Ready."""
    v1 = given.rollout(manifest=lora_rollout(given, "drilllora"))
    before = set(identities(story))
    with then.traffic_throughout(rate=20, model=ADAPTER) as watch:
        out = plugin(story.env, "drill", "pod-kill", "drilllora", "-n", story.ns,
                     "--count", "1", "--recovery-timeout", "90s",
                     "--report", str(tmp_path / "drill"), timeout=150)
        ended = time.time()
    report = json.loads((tmp_path / "drill.json").read_text())
    assert out.returncode == 0 and report["verdict"] == "pass", out.stdout + out.stderr
    after = set(identities(story))
    (victim,), (replacement,) = before - after, after - before
    st = story.release.status()
    assert victim not in versions(st) and versions(st) == dict.fromkeys(after, v1), st
    assert set(served(story).values()) == {V1}  # the replacement too, by its own word
    # the drill said "back" only after the operator had loaded and admitted the replacement
    assert admitted_at(story, replacement) < ended
    traffic = watch.report
    assert traffic is not None
    assert traffic.failed <= 5, traffic.summary()  # what was in flight to the deleted pod


def test_a_long_generation_finishes_before_its_pods_adapter_changes(
        given: Given, when: When, then: Then, story: Story) -> None:
    """The drain waits on the pod's own count of requests in flight (``/metrics``), not only
    the least time (1 s here): a generation of about 9 s that is running on every pod when the
    release starts finishes (200) before the first moved pod is loaded and admitted."""
    m = lora_rollout(given, "drainlora")
    m["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
        "sim.inference.dev/itl-ms"] = "30"  # 300 tokens: 9 s; the stories' 4 tokens: 0.1 s
    given.rollout(manifest=m)
    finished: dict[str, tuple[int, float]] = {}

    def generate(pod: str, ip: str) -> None:
        answer = httpx.post(f"http://{ip}:8000/v1/chat/completions", timeout=60, json={
            "model": ADAPTER, "max_tokens": 300,
            "messages": [{"role": "user", "content": " ".join(["word"] * 300)}]})
        finished[pod] = (answer.status_code, time.time())

    running = [threading.Thread(target=generate, args=(name, p["status"]["podIP"]))
               for name, p in pods(story).items()]
    for t in running:
        t.start()
    time.sleep(1)  # every generation under way
    adapters_change(story, V2)
    v2 = then.canary(timeout=30)
    st = then.status(lambda s: v2 in versions(s).values(), 90, "a pod moved to v2")
    (moved,) = [p for p, v in versions(st).items() if v == v2]
    for t in running:
        t.join(60)
    assert {code for code, _ in finished.values()} == {200}, finished
    assert admitted_at(story, moved) > finished[moved][1], (
        f"{moved} admitted to v2 {finished[moved][1] - admitted_at(story, moved):.1f} s "
        "before its generation finished")
