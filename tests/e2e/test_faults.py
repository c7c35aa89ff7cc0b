"""Faults end to end: Prometheus down mid-step, the operator SIGKILLed in every phase.

The route is watched by an independent observer thread (100 ms polls of the HTTPRoute) so the
assertions are about what traffic actually saw, not about what the operator says it did.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import REPO, state_dir, wait_for
from irsandbox.harness import OperatorProcess
from irsandbox.story import Given, Release, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]


class RouteObserver(threading.Thread):
    """Records every distinct canary weight the HTTPRoute holds for one canary revision."""

    def __init__(self, rel: Release) -> None:
        super().__init__(daemon=True)
        self.rel, self.canary = rel, ""
        self.seen: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                weights = self.rel.route()
            except Exception:  # the API server is fine here; a hiccup is not a finding
                weights = {}
            if self.canary and self.canary in weights:
                w = weights[self.canary]
                if not self.seen or self.seen[-1] != w:
                    self.seen.append(w)
            time.sleep(0.1)

    def stop(self) -> list[int]:
        self.halt.set()
        self.join(5)
        return self.seen


def _prometheus_pid() -> int:
    return int((state_dir() / "pids" / "prometheus.pid").read_text().split()[0])


def test_prometheus_down_mid_step_never_promotes_and_resumes_after(
        given: Given, when: When, then: Then, story: Story) -> None:
    # Given a release holding 20% for 10 s, analysed every 5 s
    v1 = given.rollout("prom", steps=[{"weight": 20, "pause": "10s"}, {"weight": 100}],
                       analysis={"consecutiveErrorLimit": 50})
    given.load()
    when.template_changes(version="v2")
    then.weight_reaches(20)
    # When Prometheus stops for longer than the step's hold
    subprocess.run(["kill", str(_prometheus_pid())], check=True)
    try:
        down_until = time.monotonic() + 25
        while time.monotonic() < down_until:
            st = story.release.status()
            # Then nothing is promoted while the analysis is blind
            assert st.get("currentStep") == 0 and st.get("canaryWeight") == 20, st
            assert story.release.route()[v1] == 80
            time.sleep(1)
        st = story.release.status()
        assert "errors" in st.get("analysis", {}), st
        errors = st["analysis"]["errors"]
        assert errors["verdict"] == "Error" and errors["consecutiveErrors"] >= 2, errors
        assert "Unreachable" in (errors.get("error") or "")
    finally:
        subprocess.run(["bash", str(REPO / "sandbox" / "up.sh")], check=True,
                       capture_output=True, timeout=180)
    # and the release goes on once Prometheus answers again
    then.healthy(revision=story.release.status()["canaryRevision"], timeout=120)


def test_operator_sigkilled_in_every_phase_ends_right(
        given: Given, when: When, then: Then, story: Story) -> None:
    op = story.op
    given.rollout("kill", steps=[{"weight": 5, "pause": "6s"}, {"weight": 20, "pause": "6s"},
                                 {"weight": 50, "pause": "6s"}, {"weight": 100}],
                  analysis={"slo": {"ttftP99": "100ms"}})
    given.load()
    observer = RouteObserver(story.release)
    try:
        # Ramping: killed right after the new template is applied (canary pods starting)
        when.template_changes(version="v2")
        when.operator_killed(down_for=2)
        v2 = then.canary()
        observer.canary = v2
        observer.start()
        # Pausing: killed in the middle of the 20% hold
        then.weight_reaches(20)
        time.sleep(2)
        when.operator_killed(down_for=4)
        # Analysing: killed just after a measurement was due at 50%
        st = then.weight_reaches(50)
        last = st.get("lastAnalysisAt")
        wait_for(lambda: story.release.status().get("lastAnalysisAt") != last, 30,
                 "an analysis at 50%", interval=0.5, tolerate=())
        when.operator_killed(down_for=3)
        # Then the release ends promoted, every step seen once, in order, none skipped
        then.healthy(revision=v2, timeout=120)
        seen = observer.stop()
        assert [w for w in seen if w > 0] == [5, 20, 50, 100], seen

        # Rolling back: a TTFT regression, the operator killed as the rollback is due
        observer = RouteObserver(story.release)
        when.template_changes(version="v3", ttft_ms=400)
        v3 = then.canary()
        observer.canary = v3
        observer.start()
        then.status(lambda s: s.get("canaryWeight") == 5, 90, "v3 at 5%")
        when.operator_killed(down_for=3)
        st = then.degraded(120, "v3 rolled back")
        assert st["abortReason"] == "AnalysisFailed"
        assert st["stableRevision"] == v2
        time.sleep(1)
        seen = observer.stop()
        assert seen[-1] == 0 and max(seen) == 5, seen
        then.route_is({v2: 100, v3: 0})
    finally:
        observer.halt.set()
        if not op.running():
            op.start()


def test_a_deleted_namespace_is_not_held_by_the_finalizer(
        cluster: Cluster, operator_process: OperatorProcess,
        new_namespace: Callable[[], str]) -> None:
    # Given a namespace with a healthy rollout mid-release, served by the operator in namespaces
    # mode (kopf may stop watching a namespace before its rollouts are deleted)
    ns = new_namespace()
    story = Story(cluster, operator_process, ns)
    story.given.rollout("gone", steps=[{"weight": 20, "manual": True}, {"weight": 100}])
    story.when.template_changes(version="v2")
    story.then.weight_reaches(20)
    # When the whole namespace is deleted
    cluster.delete_namespace(ns)

    # Then it goes: the rollout's finalizer is removed, by the delete handler or the watchdog
    try:
        wait_for(lambda: cluster.namespace_gone(ns), 120, f"namespace {ns} deleted", interval=2,
                 tolerate=())
    except TimeoutError:
        left = cluster.rollouts(ns)
        raise AssertionError(
            f"namespace {ns} still Terminating; rollouts left: "
            f"{[(r['metadata']['name'], r['metadata'].get('finalizers')) for r in left]}\n"
            f"operator log:\n{operator_process.tail(30)}") from None
