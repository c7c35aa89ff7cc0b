"""Given / When / Then for a rollout on the sandbox, so each end-to-end test reads as its story
(the shape of argo-rollouts' e2e fixtures: ``given.rollout(...)``, ``when.template_changes(...)``,
``then.weight_reaches(...)``).

:class:`Release` is one InferenceRollout under test with thin verbs over the cluster and the
operator; the benchmarks and the demo drive it directly.  A :class:`Story` holds one test's
release and the load it started; its three faces share it: :class:`Given` sets the scene (a
healthy rollout, load, a user's route), :class:`When` acts (a new template, a steering request,
a deletion, an operator crash), :class:`Then` waits for and checks what follows (a status, the
route's weights, what traffic through the gateway sees).  A verb that waits fails with the
rollout's status and the operator's log.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from .cluster import Cluster
from .common import wait_for
from .harness import (
    BackgroundLoad,
    OperatorProcess,
    TrafficWatch,
    measure_shares,
    settle_on,
    summary_line,
)
from .loadgen import LoadReport
from .manifests import httproute, sandbox_rollout, with_template

#: nginx's weighted round robin is exact; 4 pp covers a burst boundary
SHARE_TOLERANCE = 0.04


class Release:
    """One rollout under test: thin verbs over the cluster and the operator."""

    def __init__(self, cluster: Cluster, op: OperatorProcess, ns: str,
                 manifest: dict[str, Any]) -> None:
        self.cluster, self.op, self.ns = cluster, op, ns
        self.name = manifest["metadata"]["name"]
        # Unique per namespace: the sandbox gateway routes by Host, and a leftover route with
        # the same hostname elsewhere would take this test's traffic.
        self.host = f"{self.name}.{ns}.test"
        self.manifest = self._hosted(manifest)

    def _hosted(self, manifest: dict[str, Any]) -> dict[str, Any]:
        m = copy.deepcopy(manifest)
        gw = m["spec"]["traffic"]["gatewayAPI"]
        if "parentRefs" in gw:
            gw["hostnames"] = [self.host]
        return m

    def apply(self, manifest: dict[str, Any] | None = None) -> None:
        if manifest is not None:
            self.manifest = self._hosted(manifest)
        self.cluster.apply_rollout(self.ns, self.manifest)

    def status(self) -> dict[str, Any]:
        return self.cluster.status(self.ns, self.name)

    def wait(self, check: Callable[[dict[str, Any]], Any], timeout: float,
             what: str) -> dict[str, Any]:
        """Poll the status until ``check(status)``; fail with the status and the operator's log."""
        def probe() -> dict[str, Any] | None:
            st = self.status()
            return st if check(st) else None
        try:
            return wait_for(probe, timeout, f"{self.name}: {what}", interval=0.5, tolerate=())
        except TimeoutError as e:
            dump = getattr(self.op, "dump_tasks", None)
            if dump is not None:  # what the operator was doing, in its log (handlers._log_tasks)
                dump()
            raise AssertionError(
                f"{e}\nstatus: {summary_line(self.status())}\nmessage: "
                f"{self.status().get('message')}\noperator log (its tasks' stacks logged just "
                f"before; all of it: {getattr(self.op, 'log_path', '?')}):\n{self.op.tail(25)}"
            ) from None

    def wait_healthy(self, revision: str | None = None, timeout: float = 120) -> dict[str, Any]:
        return self.wait(lambda s: s.get("phase") == "Healthy" and not s.get("canaryRevision")
                         and (revision is None or s.get("stableRevision") == revision),
                         timeout, f"Healthy{' on ' + revision if revision else ''}")

    def healthy_under_load(self) -> tuple[str, BackgroundLoad]:
        """Given: the rollout applied and Healthy, with steady load through the gateway (stop
        it when done); its stable revision."""
        self.apply()
        stable = str(self.wait_healthy()["stableRevision"])
        return stable, BackgroundLoad(self.cluster.env, self.host)

    def wait_canary(self, timeout: float = 60) -> str:
        st = self.wait(lambda s: bool(s.get("canaryRevision")), timeout, "a canary revision")
        return str(st["canaryRevision"])

    def route(self) -> dict[str, int]:
        """Weights by revision as the HTTPRoute holds them."""
        prefix = f"{self.name}-"
        return {svc.removeprefix(prefix): w
                for svc, w in self.cluster.route_weights(self.ns, self.name).items()}

    def events(self) -> list[str]:
        return [f"{e['reason']}: {e['message']}" for e in self.cluster.events(self.ns, self.name)]


class Story:
    """One test's rollout, and the load it started (stopped by :meth:`close`)."""

    def __init__(self, cluster: Cluster, op: OperatorProcess, ns: str) -> None:
        self.cluster, self.op, self.ns = cluster, op, ns
        self.env = cluster.env
        self._release: Release | None = None
        self.loads: list[BackgroundLoad] = []
        self.given, self.when, self.then = Given(self), When(self), Then(self)

    @property
    def release(self) -> Release:
        assert self._release is not None, "the story has no rollout yet: given.rollout(...)"
        return self._release

    def close(self) -> None:
        for load in self.loads:
            load.stop()


class Given:
    """The scene: a healthy rollout, load on it, objects a user owns."""

    def __init__(self, story: Story) -> None:
        self.story = story

    def manifest(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """:func:`~irsandbox.manifests.sandbox_rollout` analysed by the sandbox's Prometheus."""
        return sandbox_rollout(name, prometheus=self.story.env["PROMETHEUS_URL"], **kwargs)

    def rollout(self, name: str = "", *, manifest: dict[str, Any] | None = None,
                **kwargs: Any) -> str:
        """A rollout applied and Healthy; returns its stable revision.  ``manifest`` when the
        test edits one, else :meth:`manifest` with ``kwargs``."""
        s = self.story
        s._release = Release(s.cluster, s.op, s.ns, manifest or self.manifest(name, **kwargs))
        s.release.apply()
        return str(s.release.wait_healthy()["stableRevision"])

    def load(self, **kwargs: Any) -> BackgroundLoad:
        """Steady load on the rollout's host (see :class:`BackgroundLoad`) until the end."""
        load = BackgroundLoad(self.story.env, self.story.release.host, **kwargs)
        self.story.loads.append(load)
        return load

    def user_route(self, name: str, hostname: str,
                   backends: list[tuple[str, int]] | None = None) -> None:
        """An HTTPRoute the user owns (the rollout's ``httpRouteRef`` mode)."""
        self.story.cluster.create(self.story.ns, httproute(name, backends or [], [hostname]))


class When:
    """What happens to the rollout."""

    def __init__(self, story: Story) -> None:
        self.story = story

    def template_changes(self, **changes: Any) -> None:
        """A new release: see :func:`~irsandbox.manifests.with_template` for ``changes``."""
        rel = self.story.release
        rel.apply(with_template(rel.manifest, **changes))

    def requested(self, verb: str) -> None:
        """``kubectl inference-rollout <verb>``."""
        self.story.cluster.request(self.story.ns, self.story.release.name, verb)

    def deleted(self) -> None:
        self.story.cluster.delete_rollout(self.story.ns, self.story.release.name)

    def operator_killed(self, down_for: float) -> None:
        """SIGKILL the operator, and start it again ``down_for`` seconds later."""
        self.story.op.kill()
        time.sleep(down_for)
        self.story.op.start()


class Then:
    """What follows: waits on the status, checks on the route and on traffic."""

    def __init__(self, story: Story) -> None:
        self.story = story

    def status(self, check: Callable[[dict[str, Any]], Any], timeout: float,
               what: str) -> dict[str, Any]:
        return self.story.release.wait(check, timeout, what)

    def canary(self, timeout: float = 60) -> str:
        """A canary revision appears; returns it."""
        return self.story.release.wait_canary(timeout)

    def weight_reaches(self, weight: int, timeout: float = 90,
                       canary: str | None = None) -> dict[str, Any]:
        return self.status(lambda s: s.get("canaryWeight") == weight
                           and (canary is None or s.get("canaryRevision") == canary),
                           timeout, f"canary at {weight}%")

    def hold_starts(self, weight: int, timeout: float = 90,
                    canary: str | None = None) -> dict[str, Any]:
        """The canary carries ``weight`` and the step's hold has started: the gateway accepted
        the route's generation (``stepStartedAt`` is empty until then, docs/operator.md)."""
        return self.status(lambda s: s.get("canaryWeight") == weight and s.get("stepStartedAt")
                           and (canary is None or s.get("canaryRevision") == canary),
                           timeout, f"canary at {weight}%, its hold started")

    def healthy(self, revision: str | None = None, timeout: float = 120) -> dict[str, Any]:
        return self.story.release.wait_healthy(revision, timeout)

    def degraded(self, timeout: float = 120, what: str = "rolled back (Degraded)"
                 ) -> dict[str, Any]:
        return self.status(lambda s: s.get("phase") == "Degraded", timeout, what)

    def route_is(self, weights: dict[str, int]) -> None:
        """The HTTPRoute holds exactly these weights by revision."""
        route = self.story.release.route()
        assert route == weights, route

    def route_becomes(self, weights: dict[str, int], timeout: float = 10) -> None:
        """The HTTPRoute comes to hold exactly these weights (the next write, not a drift)."""
        wait_for(lambda: self.story.release.route() == weights, timeout,
                 f"the route at {weights}", interval=0.2, tolerate=())

    def traffic(self, requests: int = 400) -> LoadReport:
        """A burst through the gateway: which revision served each response."""
        return measure_shares(self.story.env, self.story.release.host, requests)

    @contextlib.contextmanager
    def traffic_throughout(self, rate: float = 40,
                           model: str | None = None) -> Iterator[TrafficWatch]:
        """Requests at ``rate``/s (for ``model``: the simulator's base model by default) for as
        long as the block runs; ``.report`` after it: what users saw during the block's
        action, every answer counted."""
        watch = TrafficWatch(self.story.env, self.story.release.host, rate,
                             **({"model": model} if model else {})).start()
        try:
            yield watch
        finally:
            watch.stop()

    def traffic_near(self, revision: str, weight: int, timeout: float = 10) -> LoadReport:
        """The gateway follows the route a moment after the API server holds it: wait for a
        burst whose share on ``revision`` is ``weight`` % within :data:`SHARE_TOLERANCE`."""
        def near() -> LoadReport | None:
            shares = self.traffic()
            return shares if abs(shares.share(revision) - weight / 100) <= SHARE_TOLERANCE \
                else None
        return wait_for(near, timeout, f"the gateway at {weight}%", interval=0.2, tolerate=())

    def each_step_carried(self, stable: str, canary: str,
                          weights: tuple[int, ...] = (5, 20, 50)) -> None:
        """At each weight in turn: the status says it, the route holds it, and a burst through
        the gateway lands on the canary at that share, with no request failed."""
        for weight in weights:
            self.weight_reaches(weight, canary=canary)
            self.route_is({stable: 100 - weight, canary: weight})
            shares = self.traffic_near(canary, weight)
            assert shares.failed == 0, shares.summary()

    def settles_on(self, revision: str) -> None:
        """:func:`~irsandbox.harness.settle_on` for this story's rollout."""
        settle_on(self.story.env, self.story.release.host, revision)

    def rolled_back(self, stable: str, reason: str) -> dict[str, Any]:
        """Degraded for ``reason`` with the canary at 0 %, and traffic all on ``stable``."""
        st = self.degraded()
        assert st["abortReason"] == reason, st.get("message")
        assert st["canaryWeight"] == 0
        # A rollback's status is written before its route (a crash between them must not lose
        # the rollback), so the route follows a moment after the status shows it.
        self.route_becomes({stable: 100, st["canaryRevision"]: 0})
        self.settles_on(stable)
        shares = self.traffic(200)
        assert shares.share(stable) == 1.0, shares.summary()
        return st


def fresh_namespace(cluster: Cluster, prefix: str) -> Iterator[str]:
    """A new namespace ``<prefix>-<random>``, deleted afterwards (a fixture's body); its own
    operator has stopped by then, so its rollouts' deletions are finished for it."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    yield ns
    cluster.delete_namespace(ns)
    assert not cluster.finish_deletions(ns), f"namespace {ns} still Terminating"
