"""Shared pieces of the benchmarks: paths, free ports, percentiles, and two independent observers
(the HTTPRoutes of a namespace as the API server holds them, and the operator's /metrics).

Every loop here is bounded (a stop event plus a hard deadline) and talks to loopback only.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import urllib.request
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
for _p in (OPERATOR_SRC, ROOT / "sandbox", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from kubernetes.client.exceptions import ApiException  # noqa: E402

from irsandbox.harness import Cluster, OperatorProcess, wait_for  # noqa: E402

ROUTE_GROUP, ROUTE_VERSION, ROUTE_PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"


class BenchOperator(OperatorProcess):
    """The harness' operator process, but importing the package from ``src`` (an export of a
    commit) instead of the work tree."""

    def __init__(self, env: dict[str, str], src: Path = OPERATOR_SRC, **kw: Any) -> None:
        super().__init__(env, **kw)
        self.src = src

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        scope = [a for ns in self.namespaces or [] for a in ("--namespace", ns)]
        cmd = [sys.executable, "-m", "inference_rollout", "operator", *scope,
               "--log-format", "json", "--metrics-port", str(self.metrics_port),
               "--liveness-port", str(self.liveness_port)]
        extra = os.environ.get("IR_BENCH_EXTRA_PYTHONPATH")  # e.g. a debugging sitecustomize
        env = {**os.environ, **self.env,
               "PYTHONPATH": f"{self.src}:{extra}" if extra else str(self.src)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.src.parent)
        wait_for(self._live, 30, f"operator liveness on :{self.liveness_port} "
                 f"(log: {self.log_path})")


def ensure_crd(cluster: Cluster) -> None:
    """Install the CRD only if the sandbox has none: other engineers' runs may be using a newer
    one from their work tree, and re-applying ours would change it under them."""
    try:
        cluster.ext.read_custom_resource_definition("inferencerollouts.rollouts.inference.dev")
    except ApiException as e:
        if e.status != 404:
            raise
        cluster.install_crd()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
class RouteObserver:
    """LIST the namespace's HTTPRoutes every ``period`` seconds (one request for all of them) and
    record every change of weights, with the poll bounds around it.  Its own API client."""

    cluster: Cluster
    namespace: str
    period: float = 0.02
    max_seconds: float = 3600.0
    changes: list[RouteChange] = field(default_factory=list)
    polls: int = 0
    rtts: list[float] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="route-observer")
        self._lock = threading.Lock()
        self.current: dict[str, dict[str, int]] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def snapshot(self) -> list[RouteChange]:
        with self._lock:
            return list(self.changes)

    def _list(self) -> list[dict[str, Any]]:
        resp = self.cluster.custom.list_namespaced_custom_object(
            ROUTE_GROUP, ROUTE_VERSION, self.namespace, ROUTE_PLURAL, _preload_content=False,
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
                name = obj["metadata"]["name"]
                rules = obj.get("spec", {}).get("rules") or [{}]
                weights = {r["name"]: int(r.get("weight", 1))
                           for r in rules[0].get("backendRefs") or []}
                before = self.current.get(name)
                if before is not None and before != weights:
                    managed = next((m.get("time") for m in obj["metadata"].get("managedFields")
                                    or [] if m.get("manager") == "inference-rollout"
                                    and not m.get("subresource")), None)
                    with self._lock:
                        self.changes.append(RouteChange(name, last_sent, got, before, weights,
                                                        managed))
                self.current[name] = weights
            last_sent = sent
            self._stop.wait(max(0.0, self.period - (time.time() - sent)))


@dataclass
class RouteWatcher:
    """A WATCH on the namespace's HTTPRoutes: each change of weights with the time its event
    arrived (an upper bound of when the write landed, without a polling gap).  Re-watches from
    the last resourceVersion every ``chunk`` seconds (the server closes the stream)."""

    cluster: Cluster
    namespace: str
    max_seconds: float = 3600.0
    chunk: int = 30
    changes: list[RouteChange] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="route-watcher")
        self._lock = threading.Lock()
        self.current: dict[str, dict[str, int]] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.chunk + 5)

    def snapshot(self) -> list[RouteChange]:
        with self._lock:
            return list(self.changes)

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
                    ROUTE_GROUP, ROUTE_VERSION, self.namespace, ROUTE_PLURAL, **kw)
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
        if ev.get("type") not in ("ADDED", "MODIFIED"):
            return str((obj.get("metadata") or {}).get("resourceVersion") or "")
        name = obj["metadata"]["name"]
        rules = obj.get("spec", {}).get("rules") or [{}]
        weights = {r["name"]: int(r.get("weight", 1)) for r in rules[0].get("backendRefs") or []}
        before = self.current.get(name)
        if before is not None and before != weights:
            with self._lock:
                self.changes.append(RouteChange(name, got, got, before, weights, None))
        self.current[name] = weights
        return str(obj["metadata"].get("resourceVersion") or "")


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
class MetricsPoller:
    """Scrape the operator's /metrics every ``period`` seconds and record each increment of one
    histogram.  With a short period most increments are single observations, whose exact value
    is the increment of ``_sum`` (the text format prints ``%g``: 6 significant digits)."""

    port: int
    name: str
    period: float = 0.025
    max_seconds: float = 3600.0
    steps: list[HistogramStep] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="metrics-poller")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

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
    from irsandbox.harness import GROUP, PLURAL, VERSION

    items = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    for obj in items:
        try:
            cluster.custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, obj["metadata"]["name"],
                {"metadata": {"finalizers": None}})
        except ApiException as e:
            if e.status != 404:
                raise


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
            wait_for(gone, timeout, f"namespace {ns} deleted", interval=2)
            return True
        except TimeoutError:
            pass
        finally:
            op.stop()
        strip_finalizers(cluster, ns)
    try:
        wait_for(gone, max(60.0, timeout), f"namespace {ns} deleted", interval=2)
        return True
    except TimeoutError:
        return False
