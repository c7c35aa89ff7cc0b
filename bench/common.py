"""Shared pieces of the benchmarks: a run's namespace and operator (:class:`Bench`), percentiles,
and independent observers (the HTTPRoutes of a namespace as the API server holds them, and the
operator's /metrics).  The sandbox itself is driven through :mod:`irsandbox` like the tests.

Every loop here is bounded (a stop event plus a hard deadline) and talks to loopback only.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / ".sandbox" / "bench"


def operator_source(ref: str = "HEAD") -> tuple[Path, str]:
    """A clean export of the operator package at ``ref`` (default: the last commit), so a run
    measures committed code, not whatever is being edited in the work tree meanwhile.
    ``IR_BENCH_REF=worktree`` uses the work tree as it is."""
    if ref == "worktree":
        return ROOT / "operator", "worktree"
    sha = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    dest = RESULTS / f"src-{sha[:12]}"
    if not (dest / "operator" / "inference_rollout").is_dir():
        tmp = RESULTS / f"src-{sha[:12]}.{os.getpid()}.tmp"
        tmp.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha, "operator"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        try:
            tmp.rename(dest)
        except OSError:  # another run exported it meanwhile
            subprocess.run(["rm", "-rf", str(tmp)], check=True)
    return dest / "operator", sha


#: The operator code under test: the bench's own imports (PromQL, revision hashes) use it too.
OPERATOR_SRC, OPERATOR_COMMIT = operator_source(os.environ.get("IR_BENCH_REF", "HEAD"))
for _p in (OPERATOR_SRC, ROOT / "sandbox"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from inference_rollout.core.cost import GPU_RESOURCE  # noqa: E402
from irsandbox.cluster import (  # noqa: E402
    GROUP,
    HTTPROUTE,
    PLURAL,
    VERSION,
    Cluster,
    ignore_status,
)
from irsandbox.common import free_port, sandbox_env, wait_for  # noqa: E402
from irsandbox.harness import OperatorProcess  # noqa: E402
from irsandbox.story import Release  # noqa: E402


class BenchOperator(OperatorProcess):
    """The harness' operator process, but importing the package from ``src`` (an export of a
    commit) instead of the work tree."""

    def __init__(self, env: dict[str, str], src: Path = OPERATOR_SRC, **kw: Any) -> None:
        super().__init__(env, **{"service_proxy": False, **kw})
        self.src = src

    def process_env(self) -> dict[str, str]:
        extra = os.environ.get("IR_BENCH_EXTRA_PYTHONPATH")  # e.g. a debugging sitecustomize
        return {**os.environ, **self.env,
                "PYTHONPATH": f"{self.src}:{extra}" if extra else str(self.src)}

    def start(self, cwd: Path | None = None) -> None:
        super().start(cwd or self.src.parent)


class Bench:
    """One benchmark run on the sandbox: a namespace of its own (``bench-<kind>-<tag>``) and an
    operator process (the exported commit) watching only it, on free ports.  ``info`` starts the
    run's JSON result."""

    def __init__(self, kind: str, args: Namespace, tag: str | None = None,
                 service_proxy: bool = False) -> None:
        """``service_proxy``: the operator reaches Services (probes, the evaluation gate)."""
        self.env = sandbox_env()
        self.cluster = Cluster(self.env)
        ensure_crd(self.cluster)
        self.tag = tag or uuid.uuid4().hex[:6]
        self.ns = f"bench-{kind}-{self.tag}"
        self.op = BenchOperator(self.env, log_name=f"bench-{self.ns}", namespaces=[self.ns],
                                metrics_port=free_port(), liveness_port=free_port(),
                                service_proxy=service_proxy)
        self.info: dict[str, Any] = {"namespace": self.ns, "machine": machine(),
                                     "args": vars(args), "operator_commit": OPERATOR_COMMIT}
        self.started = time.time()
        print(f"namespace {self.ns}; operator {OPERATOR_COMMIT[:12]}; log {self.op.log_path}",
              flush=True)
        self.cluster.create_namespace(self.ns)

    def release(self, manifest: dict[str, Any]) -> Release:
        return Release(self.cluster, self.op, self.ns, manifest)

    def observer_client(self) -> Cluster:
        """A client of its own, for an observer thread."""
        return Cluster(self.env)

    def elapsed(self) -> float:
        return round(time.time() - self.started, 1)

    def finish(self, keep: bool = False, **cleanup: Any) -> bool:
        """Stop the operator; unless ``keep``, delete the namespace (see
        :func:`cleanup_namespace`).  True when the namespace is gone (or kept)."""
        if keep:
            self.op.stop()
            return True
        return cleanup_namespace(self.cluster, self.ns, self.op, **cleanup)


def free_gpus(cluster: Cluster) -> int:
    """GPUs no running or pending pod requests, over the sandbox's nodes: what a benchmark's
    lanes may take.  A lane that cannot get its canary's pods waits past its progress deadline
    and is rolled back for it, which a verdict benchmark would count as a false rollback."""
    total = sum(int((n.status.allocatable or {}).get(GPU_RESOURCE, 0))
                for n in cluster.core.list_node().items)
    used = 0
    for pod in cluster.core.list_pod_for_all_namespaces().items:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            used += int(((c.resources and c.resources.requests) or {}).get(GPU_RESOURCE, 0))
    return total - used


def ensure_crd(cluster: Cluster) -> None:
    """Install the CRD only if the sandbox has none: other engineers' runs may be using a newer
    one from their work tree, and re-applying ours would change it under them."""
    if ignore_status(404, cluster.ext.read_custom_resource_definition,
                     "inferencerollouts.rollouts.inference.dev") is None:
        cluster.install_crd()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(xs)))
    return xs[rank - 1]


def summary(values: list[float], unit: float = 1000.0) -> dict[str, float]:
    """n, p50, p90, p99, min, max (milliseconds by default)."""
    return {"n": len(values), "p50": percentile(values, 50) * unit,
            "p90": percentile(values, 90) * unit, "p99": percentile(values, 99) * unit,
            "min": min(values) * unit if values else math.nan,
            "max": max(values) * unit if values else math.nan}


def fmt_ms(s: dict[str, float]) -> str:
    return (f"n={s['n']} p50={s['p50']:.0f} ms p90={s['p90']:.0f} ms p99={s['p99']:.0f} ms "
            f"(min {s['min']:.0f}, max {s['max']:.0f})")


def machine() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {"cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
            "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
            "kernel": platform.release()}


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def parse_iso(text: str | None) -> float | None:
    """RFC 3339 (``2025-01-01T00:00:00.123Z``) to epoch seconds."""
    if not text:
        return None
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- the HTTPRoutes, polled ------------------------------------------------------------------


@dataclass
class RouteChange:
    """One route's backend weights changed between two polls.

    The write landed in the API server after ``lo`` (when the last poll that did not show it was
    sent) and before ``hi`` (when the first poll that shows it returned)."""

    route: str
    lo: float
    hi: float
    before: dict[str, int]
    after: dict[str, int]
    managed_time: str | None  # managedFields time of the operator's entry (whole seconds)


@dataclass
class Background:
    """A daemon thread running ``_run`` until :meth:`stop` or ``max_seconds``, counting the
    ``errors`` it outlived."""

    max_seconds: float = field(default=3600.0, kw_only=True)
    errors: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def _run(self) -> None:
        raise NotImplementedError

    def join_timeout(self) -> float:
        return 10.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a run that failed first never was)
            self._thread.join(self.join_timeout())


def route_weights(obj: dict[str, Any]) -> dict[str, int]:
    """An HTTPRoute's backend weights by name (its first rule)."""
    rules = obj.get("spec", {}).get("rules") or [{}]
    return {r["name"]: int(r.get("weight", 1)) for r in rules[0].get("backendRefs") or []}


@dataclass
class RouteRecorder(Background):
    """Records each change of a route's weights (:class:`RouteChange`), thread-safely."""

    changes: list[RouteChange] = field(default_factory=list, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._lock = threading.Lock()
        self.current: dict[str, dict[str, int]] = {}

    def snapshot(self) -> list[RouteChange]:
        with self._lock:
            return list(self.changes)

    def _saw(self, name: str, weights: dict[str, int], lo: float, hi: float,
             managed: Any = None) -> None:
        """The route ``name`` holds ``weights`` as of a read sent at ``lo`` and back at ``hi``;
        ``managed`` (called only on a change) gives the managedFields time."""
        before = self.current.get(name)
        if before is not None and before != weights:
            with self._lock:
                self.changes.append(RouteChange(name, lo, hi, before, weights,
                                                managed() if managed else None))
        self.current[name] = weights


@dataclass
class RouteObserver(RouteRecorder):
    """LIST the namespace's HTTPRoutes every ``period`` seconds (one request for all of them) and
    record every change of weights, with the poll bounds around it.  Its own API client."""

    cluster: Cluster
    namespace: str
    period: float = 0.02
    polls: int = 0
    rtts: list[float] = field(default_factory=list)

    def _list(self) -> list[dict[str, Any]]:
        resp = self.cluster.custom.list_namespaced_custom_object(
            *HTTPROUTE[:2], self.namespace, HTTPROUTE[2], _preload_content=False,
            _request_timeout=2)
        return list(json.loads(resp.data).get("items") or [])

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        last_sent = time.time()
        while not self._stop.is_set() and time.monotonic() < deadline:
            sent = time.time()
            try:
                items = self._list()
            except Exception:
                self.errors += 1
                self._stop.wait(self.period)
                continue
            got = time.time()
            self.polls += 1
            if len(self.rtts) < 200_000:
                self.rtts.append(got - sent)
            for obj in items:
                self._saw(obj["metadata"]["name"], route_weights(obj), last_sent, got,
                          lambda obj=obj: _operator_write_time(obj))
            last_sent = sent
            self._stop.wait(max(0.0, self.period - (time.time() - sent)))


def _operator_write_time(obj: dict[str, Any]) -> str | None:
    """The managedFields time of the operator's spec write (whole seconds)."""
    return next((m.get("time") for m in obj["metadata"].get("managedFields") or []
                 if m.get("manager") == "inference-rollout" and not m.get("subresource")), None)


@dataclass
class RouteWatcher(RouteRecorder):
    """A WATCH on the namespace's HTTPRoutes: each change of weights with the time its event
    arrived (an upper bound of when the write landed, without a polling gap).  Re-watches from
    the last resourceVersion every ``chunk`` seconds (the server closes the stream)."""

    cluster: Cluster
    namespace: str
    chunk: int = 30

    def join_timeout(self) -> float:
        return self.chunk + 5

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        rv = ""
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                kw: dict[str, Any] = {"watch": True, "timeout_seconds": self.chunk,
                                      "_preload_content": False,
                                      "_request_timeout": self.chunk + 10}
                if rv:
                    kw["resource_version"] = rv
                resp = self.cluster.custom.list_namespaced_custom_object(
                    *HTTPROUTE[:2], self.namespace, HTTPROUTE[2], **kw)
                buf = b""
                for chunk in resp.stream(4096, decode_content=True):
                    got = time.time()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if line.strip():
                            rv = self._event(json.loads(line), got) or rv
                    if self._stop.is_set():
                        break
                resp.release_conn()
            except Exception:  # a watcher must outlive a transient error (and a 410 Gone)
                self.errors += 1
                rv = ""
                self._stop.wait(0.2)

    def _event(self, ev: dict[str, Any], got: float) -> str:
        obj = ev.get("object") or {}
        if ev.get("type") in ("ADDED", "MODIFIED"):
            self._saw(obj["metadata"]["name"], route_weights(obj), got, got)
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")


# --- the operator's /metrics, polled ----------------------------------------------------------


@dataclass
class HistogramStep:
    """New observations of a histogram between two scrapes: ``count`` of them summing to
    ``total`` seconds; they were observed after ``lo`` and before ``hi``."""

    lo: float
    hi: float
    count: int
    total: float


def scrape(port: int, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return str(r.read().decode())


def histogram(text: str, name: str) -> tuple[int, float, dict[str, int]]:
    """(count, sum, cumulative buckets by ``le``) of one unlabelled histogram."""
    count, total, buckets = 0, 0.0, {}
    for line in text.splitlines():
        if line.startswith(f"{name}_count "):
            count = int(float(line.split()[1]))
        elif line.startswith(f"{name}_sum "):
            total = float(line.split()[1])
        elif line.startswith(f'{name}_bucket{{le="'):
            le = line.split('"')[1]
            buckets[le] = int(float(line.split()[1]))
    return count, total, buckets


@dataclass
class MetricsPoller(Background):
    """Scrape the operator's /metrics every ``period`` seconds and record each increment of one
    histogram.  With a short period most increments are single observations, whose exact value
    is the increment of ``_sum`` (prometheus_client prints a float in full: repr)."""

    port: int
    name: str
    period: float = 0.025
    steps: list[HistogramStep] = field(default_factory=list)

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        prev: tuple[int, float] | None = None
        last_sent = time.time()
        while not self._stop.is_set() and time.monotonic() < deadline:
            sent = time.time()
            try:
                count, total, _ = histogram(scrape(self.port), self.name)
            except (OSError, ValueError):
                self.errors += 1
                self._stop.wait(self.period)
                continue
            got = time.time()
            if prev is not None and count > prev[0]:
                self.steps.append(HistogramStep(last_sent, got, count - prev[0], total - prev[1]))
            prev = (count, total)
            last_sent = sent
            self._stop.wait(max(0.0, self.period - (time.time() - sent)))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return math.nan


def strip_finalizers(cluster: Cluster, ns: str) -> None:
    """Remove the operator's finalizer from every rollout left in ``ns`` (the bench's own)."""
    for obj in cluster.rollouts(ns):
        ignore_status(404, cluster.custom.patch_namespaced_custom_object, GROUP, VERSION, ns,
                      PLURAL, obj["metadata"]["name"], {"metadata": {"finalizers": None}})


def cleanup_namespace(cluster: Cluster, ns: str, op: OperatorProcess,
                      timeout: float = 180.0, operator_first: bool = False) -> bool:
    """Delete the bench's namespace while its operator still runs (its finalizer returns traffic
    to stable, or lets go at once in a terminating namespace), then stop the operator.  If the
    namespace is still there after ``timeout``, strip the finalizer from the rollouts left in it
    (this namespace's only) so it does not stay Terminating.  ``operator_first``: stop the
    operator and strip the finalizers before deleting (hundreds of rollouts, where the deletion
    is not what is measured).  True when the namespace is gone."""

    def gone() -> bool:
        return cluster.namespace_gone(ns)

    if operator_first:
        op.stop()
        strip_finalizers(cluster, ns)
        cluster.delete_namespace(ns)
    else:
        cluster.delete_namespace(ns)
        try:
            wait_for(gone, timeout, f"namespace {ns} deleted", interval=2, tolerate=())
            return True
        except TimeoutError:
            pass
        finally:
            op.stop()
        strip_finalizers(cluster, ns)
    try:
        wait_for(gone, max(60.0, timeout), f"namespace {ns} deleted", interval=2, tolerate=())
        return True
    except TimeoutError:
        return False
