"""What the side-by-side run measures from outside the controllers: each user request and the pod
that answered it (the load generator, through the gateway), the pods that exist (pod-seconds and
model loads), and a controller's CPU time and RSS (``/proc``, its process tree)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from common import Background, rss_mib

from irsandbox.cluster import Cluster
from irsandbox.loadgen import RequestResult, run_load
from irsandbox.manifests import SIM_MODEL


@dataclass
class Answered:
    """One request: when it finished (epoch seconds), the pod that answered, its error."""

    at: float
    pod: str
    error: str


@dataclass
class LoadRecorder:
    """``rate`` req/s through the gateway to ``host`` (irsandbox.loadgen's open loop) in a thread
    of its own until :meth:`stop`, recording every answer."""

    gateway: str
    host: str
    rate: float
    max_seconds: float = 900.0
    answers: list[Answered] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True,
                                        name=f"load-{self.host}")

    async def _main(self) -> None:
        stop = asyncio.Event()

        async def watch() -> None:
            while not self._stop.is_set():
                await asyncio.sleep(0.1)
            stop.set()

        def record(r: RequestResult) -> None:
            with self._lock:
                self.answers.append(Answered(time.time(), r.pod.split("/", 1)[-1], r.error))

        watcher = asyncio.create_task(watch())
        await run_load(self.gateway, model=SIM_MODEL, host=self.host, rate=self.rate,
                       duration=self.max_seconds, stop=stop, max_tokens=8, on_result=record)
        watcher.cancel()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def between(self, start: float, end: float) -> list[Answered]:
        with self._lock:
            return [a for a in self.answers if start <= a.at <= end]


@dataclass
class PodCounter(Background):
    """LIST the namespace's pods every ``period`` s: pod-seconds of the pods whose name starts
    with ``prefix`` (scheduled, not yet deleted), and every such pod name ever seen."""

    cluster: Cluster
    namespace: str
    prefix: str
    period: float = 1.0
    pod_seconds: float = 0.0
    seen: dict[str, float] = field(default_factory=dict)  # pod -> first seen (epoch s)
    current: int = 0
    polls: int = 0

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        last = time.time()
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                pods = self.cluster.core.list_namespaced_pod(self.namespace, _request_timeout=5)
            except Exception:
                self.errors += 1
                self._stop.wait(self.period)
                continue
            now = time.time()
            live = [p.metadata.name for p in pods.items
                    if p.metadata.name.startswith(self.prefix) and p.spec.node_name
                    and p.metadata.deletion_timestamp is None]
            self.pod_seconds += self.current * (now - last)
            self.current, last = len(live), now
            for name in live:
                self.seen.setdefault(name, now)
            self.polls += 1
            self._stop.wait(self.period)


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a controller's plugin processes), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_sum(pid: int, per_process: Callable[[int], float]) -> float:
    """``per_process`` summed over ``pid``'s process tree (a child that just exited: skipped)."""
    total = per_process(pid)
    for p in process_tree(pid)[1:]:
        with contextlib.suppress(OSError):
            total += per_process(p)
    return total


@dataclass
class ProcSampler(Background):
    """A process tree's RSS every ``period`` s (its maximum) and its CPU time over the sampling
    (a process that exits meanwhile: its CPU time leaves the sum)."""

    pid: int
    period: float = 1.0
    rss_max_mib: float = 0.0
    cpu_start: float = 0.0
    cpu_end: float = 0.0

    def _run(self) -> None:
        self.cpu_start = self.cpu_end = tree_sum(self.pid, cpu_seconds)
        deadline = time.monotonic() + self.max_seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                self.rss_max_mib = max(self.rss_max_mib, tree_sum(self.pid, rss_mib))
                self.cpu_end = tree_sum(self.pid, cpu_seconds)
            except OSError:
                self.errors += 1
            self._stop.wait(self.period)

    def stop(self) -> None:
        super().stop()
        try:
            self.cpu_end = tree_sum(self.pid, cpu_seconds)
        except OSError:
            self.errors += 1

    @property
    def cpu(self) -> float:
        return self.cpu_end - self.cpu_start
