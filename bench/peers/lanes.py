"""One controller's lane: its namespace, its controller process, and the verbs a scenario needs
(create a healthy release, release a new pod template, is it done, which pods are the canary),
for our operator, Flagger and Argo Rollouts.  Every lane gets the pod template of the same
sandbox rollout, so the same simulators answer the same load."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from common import Bench, ignore_status

from inference_rollout.api.spec import AnalysisSpec
from inference_rollout.metrics.measure import Queries, build_queries
from inference_rollout.metrics.promql import Revision, regex_escape
from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.manifests import sandbox_rollout, with_template

from . import argo
from . import flagger as fl


@dataclass(frozen=True)
class Settings:
    """What both controllers are given alike."""

    interval_s: int
    steps: tuple[int, ...]  # canary weights before 100
    rate: float
    replicas: int
    gpus: int
    progress_deadline_s: int = 60


@dataclass(frozen=True)
class FlaggerPods(Revision):
    """Flagger's canary pods: the target Deployment's, ``<name>-<hash>-<suffix>`` (its primary's
    are ``<name>-primary-…`` and do not match)."""

    @property
    def pod_regex(self) -> str:
        return regex_escape(self.rollout) + "-[a-z0-9]+-[a-z0-9]+"


def our_manifest(name: str, prometheus: str, s: Settings, analysis: dict[str, Any],
                 metrics: list[dict[str, Any]], defaults: bool = False) -> dict[str, Any]:
    """Our rollout for a lane: the common steps and deadline; the analysis every ``interval_s``
    with the peers' sample guard, or with ``defaults`` the product's own interval, guard and rule
    (the sandbox's facts, its Prometheus and 1 s scrapes, stay)."""
    hold = f"{s.interval_s}s"
    fields = AnalysisSpec.model_fields
    base = ({"interval": fields["interval"].default, "minSamples": fields["min_samples"].default,
             "verdicts": fields["verdicts"].default} if defaults else {"interval": hold})
    return sandbox_rollout(
        name, prometheus=prometheus, replicas=s.replicas, gpus=s.gpus, metrics=metrics,
        steps=[*({"weight": w, "pause": hold} for w in s.steps), {"weight": 100}],
        analysis={**base, **analysis},
        progress_deadline=f"{s.progress_deadline_s}s")


class Lane:
    """A controller in a namespace of its own; ``kind`` names it in the table, ``prefix`` its
    objects, ``user`` its client identity (:mod:`identity`)."""

    kind = ""
    prefix = ""
    user = ""

    def __init__(self, bench: Bench, settings: Settings) -> None:
        self.bench, self.s = bench, settings
        self.ns = bench.ns
        self.cluster: Cluster = bench.observer_client()
        self.name = ""
        self.host = ""

    # set by subclasses per release
    stable_backend = ""
    stable_pod_prefix = ""

    def start(self) -> None:
        raise NotImplementedError

    def pid(self) -> int:
        raise NotImplementedError

    def controller(self) -> Any:
        """The controller's process (an irsandbox OperatorProcess), not started yet."""
        raise NotImplementedError

    def use_kubeconfig(self, path: str) -> None:
        """Run the controller as the user of the kubeconfig at ``path`` (before start)."""
        proc = self.controller()
        proc.env = {**proc.env, "KUBECONFIG": path}

    def create(self, name: str, manifest: dict[str, Any], probe_queries: Any) -> None:
        raise NotImplementedError

    def release(self, changes: dict[str, Any]) -> None:
        raise NotImplementedError

    def outcome(self) -> str | None:
        """"promoted", "rolled back", or None while the release is in progress."""
        raise NotImplementedError

    def canary_queries(self, metric: Any, window: str, min_samples: int) -> Queries | None:
        """The value and sample-count queries over the canary's pods (None: not known yet)."""
        raise NotImplementedError

    def delete(self) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError

    def is_canary_pod(self, pod: str) -> bool:
        return pod.startswith(f"{self.name}-") and not pod.startswith(self.stable_pod_prefix)


class OursLane(Lane):
    kind, prefix, user = "inference-rollout", "ir", "bench-inference-rollout"

    def __init__(self, bench: Bench, settings: Settings) -> None:
        super().__init__(bench, settings)
        self.rel: Any = None
        self.stable = ""
        self.released_at = 0.0

    def start(self) -> None:
        self.bench.op.start()

    def pid(self) -> int:
        assert self.bench.op.proc is not None
        return self.bench.op.proc.pid

    def controller(self) -> Any:
        return self.bench.op

    def create(self, name: str, manifest: dict[str, Any], probe_queries: Any = None) -> None:
        self.rel = self.bench.release(manifest)
        self.name, self.host = name, self.rel.host
        self.rel.apply()
        self.stable = self.rel.wait_healthy(timeout=180)["stableRevision"]
        self.stable_backend = f"{name}-{self.stable}"
        self.stable_pod_prefix = f"{name}-{self.stable}-"

    def release(self, changes: dict[str, Any]) -> None:
        self.rel.apply(with_template(self.rel.manifest, **changes))

    def outcome(self) -> str | None:
        st = self.rel.status()
        if st.get("phase") == "Degraded" and st.get("aborted"):
            return "rolled back"
        if (st.get("phase") == "Healthy" and not st.get("canaryRevision")
                and st.get("stableRevision") not in (None, self.stable)):
            return "promoted"
        return None

    def canary_queries(self, metric: Any, window: str, min_samples: int) -> Queries | None:
        """The operator's own queries for the canary revision, once the status names it."""
        canary = self.rel.status().get("canaryRevision")
        if not canary:
            return None
        return build_queries(metric, Revision(self.ns, self.name, canary), window, min_samples)

    def delete(self) -> None:
        ignore_status(404, self.cluster.delete_rollout, self.ns, self.name)

    def log_tail(self) -> str:
        return self.bench.op.tail(20)


class FlaggerLane(Lane):
    kind, prefix, user = "flagger", "fl", "bench-flagger"

    def __init__(self, bench: Bench, settings: Settings) -> None:
        super().__init__(bench, settings)
        self.proc = fl.FlaggerProcess(bench.env, self.ns)
        self.objects = fl.FlaggerObjects(self.cluster, self.ns)
        self.template: dict[str, Any] = {}

    def start(self) -> None:
        fl.install_crds(self.cluster)
        self.proc.start()

    def pid(self) -> int:
        return self.proc.pid

    def controller(self) -> Any:
        return self.proc

    def create(self, name: str, manifest: dict[str, Any], probe_queries: Any = None) -> None:
        """The same pod template as our rollout's, a MetricTemplate per metric with our PromQL
        for this canary's pods, and the Canary; waits until Flagger has initialised it."""
        self.name, self.host = name, f"{name}.{self.ns}.test"
        self.stable_backend, self.stable_pod_prefix = f"{name}-primary", f"{name}-primary-"
        self.template = copy.deepcopy(manifest["spec"]["template"])
        metric, window, min_samples = probe_queries
        q = build_queries(metric, FlaggerPods(self.ns, name, ""), window, min_samples)
        self.objects.create(fl.metric_template(
            name, fl.guarded(q.value, q.samples, min_samples), self.bench.env["PROMETHEUS_URL"]))
        self.objects.create(fl.deployment(name, self.template, self.s.replicas))
        self.objects.create(fl.canary(name, self.host, self.s.interval_s, list(self.s.steps),
                                      name, metric.max, self.s.progress_deadline_s))
        self.objects.wait_phase(name, ("Initialized",), 180, self.proc.tail)

    def release(self, changes: dict[str, Any]) -> None:
        m = with_template({"spec": {"template": self.template}}, **changes)
        self.template = m["spec"]["template"]
        self.objects.set_template(self.name, self.template)

    def outcome(self) -> str | None:
        phase = self.objects.status(self.name).get("phase")
        return {"Succeeded": "promoted", "Failed": "rolled back"}.get(str(phase))

    def canary_queries(self, metric: Any, window: str, min_samples: int) -> Queries:
        return build_queries(metric, FlaggerPods(self.ns, self.name, ""), window, min_samples)

    def delete(self) -> None:
        for plural in ("canaries", "metrictemplates"):
            ignore_status(404, self.cluster.custom.delete_namespaced_custom_object, fl.GROUP,
                          fl.API, self.ns, plural, self.name)
        ignore_status(404, self.cluster.apps.delete_namespaced_deployment, self.name, self.ns)
        ignore_status(404, self.cluster.apps.delete_namespaced_deployment,
                      f"{self.name}-primary", self.ns)

    def log_tail(self) -> str:
        return self.proc.tail(20)


class ArgoLane(Lane):
    kind, prefix, user = "argo-rollouts", "ar", "bench-argo-rollouts"

    def __init__(self, bench: Bench, settings: Settings) -> None:
        super().__init__(bench, settings)
        self.proc = argo.ArgoProcess(bench.env, self.ns)
        self.template: dict[str, Any] = {}
        self.stable = ""

    def start(self) -> None:
        """CRDs, the plugin's ConfigMap (read once, at the controller's start), the controller."""
        argo.install(self.cluster)
        ignore_status(409, self.cluster.core.create_namespaced_config_map, self.ns,
                      argo.plugin_config(self.ns))
        self.proc.start()

    def pid(self) -> int:
        return self.proc.pid

    def controller(self) -> Any:
        return self.proc

    def _custom(self, plural: str, verb: str, *args: Any) -> Any:
        group, version = ((argo.GROUP, argo.API) if plural != "httproutes"
                          else ("gateway.networking.k8s.io", "v1"))
        fn = getattr(self.cluster.custom, f"{verb}_namespaced_custom_object")
        return fn(group, version, self.ns, plural, *args)

    def status(self) -> dict[str, Any]:
        return self._custom("rollouts", "get", self.name).get("status") or {}

    def create(self, name: str, manifest: dict[str, Any], probe_queries: Any = None) -> None:
        """Services, route, an AnalysisTemplate with our PromQL for the canary's hash, the
        Rollout with the same pod template; waits until its first release is Healthy."""
        self.name, self.host = name, f"{name}.{self.ns}.test"
        self.stable_backend = f"{name}-stable"
        self.template = copy.deepcopy(manifest["spec"]["template"])
        metric, window, min_samples = probe_queries
        q = build_queries(metric, argo.ArgoPods(self.ns, name, argo.CANARY_HASH), window,
                          min_samples)
        for svc in argo.services(name):
            self.cluster.core.create_namespaced_service(self.ns, svc)
        self._custom("httproutes", "create", argo.http_route(name, self.host))
        self._custom("analysistemplates", "create", argo.analysis_template(
            name, fl.guarded(q.value, q.samples, min_samples), metric.max, self.s.interval_s,
            self.bench.env["PROMETHEUS_URL"]))
        self._custom("rollouts", "create", argo.rollout(
            name, self.ns, self.template, self.s.replicas, list(self.s.steps), self.s.interval_s,
            self.s.progress_deadline_s))

        def healthy() -> str | None:
            st = self.status()
            return st.get("stableRS") if st.get("phase") == "Healthy" else None
        try:
            self.stable = wait_for(healthy, 180, f"rollout {name} Healthy", interval=0.5,
                                   tolerate=())
        except TimeoutError as e:
            raise AssertionError(f"{e}\nstatus: {self.status()}\n{self.proc.tail()}") from None
        self.stable_pod_prefix = f"{name}-{self.stable}-"

    def release(self, changes: dict[str, Any]) -> None:
        m = with_template({"spec": {"template": self.template}}, **changes)
        self.template = m["spec"]["template"]
        self._custom("rollouts", "patch", self.name, {"spec": {"template": self.template}})

    def outcome(self) -> str | None:
        st = self.status()
        if st.get("abort"):
            return "rolled back"
        if (st.get("phase") == "Healthy" and st.get("stableRS") not in (None, self.stable)
                and st.get("stableRS") == st.get("currentPodHash")):
            return "promoted"
        return None

    def canary_queries(self, metric: Any, window: str, min_samples: int) -> Queries | None:
        canary = self.status().get("currentPodHash")
        if not canary or canary == self.stable:
            return None
        return build_queries(metric, argo.ArgoPods(self.ns, self.name, canary), window,
                             min_samples)

    def delete(self) -> None:
        for plural in ("rollouts", "analysistemplates", "httproutes"):
            ignore_status(404, self._custom, plural, "delete", self.name)
        for svc in argo.services(self.name):
            ignore_status(404, self.cluster.core.delete_namespaced_service,
                          svc["metadata"]["name"], self.ns)

    def log_tail(self) -> str:
        return self.proc.tail(20)
