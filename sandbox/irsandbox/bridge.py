"""The pod bridge: the sandbox's container runtime for vLLM pods.

For every pod that is scheduled on a KWOK node and runs a vLLM server (a container named ``vllm``,
or one whose args contain ``--model``), the bridge runs one llm-d-inference-sim process on a free
loopback port, with the pod's model name and the behaviour its ``sim.inference.dev/*``
annotations ask for (``--startup-duration`` = ``startup-seconds``: the simulated model load), and
in front of it a shim (``irsandbox.faultproxy``) on a second port: it counts the responses served
as vLLM's ``http_requests_total``/``http_request_duration_seconds`` (appended to the simulator's
``/metrics``) and corrupts ``business-fail-rate`` percent of the completions.

- The pod enters the endpoint map (``<state>/bridge/endpoints.json``, pod -> 127.0.0.1:<shim
  port>, which the gateway routes by) once its simulator answers ``/health`` and its shim
  ``/-/shim/config``.
- KWOK owns the pod's ``Ready`` condition (sandbox/kwok/stages.yaml: Ready after
  ``startup-seconds``). The bridge reports the simulator's own ``/health/ready`` verdict in the
  pod condition ``sim.inference.dev/loaded``.
- Prometheus finds each pod itself, from the API server (``kubernetes_sd_configs``, role pod, in
  up.sh's prometheus.yml), and scrapes its shim on the pod's own address: nothing here tells it.
- Annotation changes on a running pod go to the simulator's ``/admin/config`` (latencies, failure
  injection) or the shim (business-fail-rate).
- When the pod object is gone: out of the map, SIGTERM after ``--drain-seconds``.
- **Pods with addresses** (``--pod-network CIDR`` and ``--pod-netns NAME``, what ``up.sh`` passes
  as ``IR_POD_NETWORK`` and ``IR_POD_NETNS``): KWOK gives each pod an IP of that range, which is
  local inside the sandbox's pod network namespace and reached from the host through a veth
  pair; the shim also listens on ``<podIP>:<containerPort>`` inside that namespace, the address
  the pod's EndpointSlice names. A real gateway (Traefik) then reaches pods as in a cluster. The
  bridge starts a pod's processes once KWOK has written its IP, and has the shim close that
  listener as soon as the pod object is gone (KWOK reuses the IP at once).

    python -m irsandbox.bridge [--kubeconfig PATH] [--state-dir .sandbox]

Restart-safe: the processes it started are recorded in ``<state>/bridge/state.json``; a restarted
bridge adopts those whose pod still exists and stops the others (also any process that carries
its owner mark in the environment but is missing from the state file). See docs/sandbox-bridge.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import netns, podspec
from .common import (
    find_sim_binary,
    pid_cmdline,
    pid_environ,
    read_json,
    run_until_signalled,
    setup_logging,
    use_state_dir,
    write_json_atomic,
)
from .kube import Informer, load_kube_config, wait_synced
from .podspec import Behaviour, VLLMArgs

log = logging.getLogger("bridge")

OWNER_ENV = "IR_BRIDGE_OWNER"
POD_UID_ENV = "IR_BRIDGE_POD_UID"
#: Simulator ports: below Linux's ephemeral range (32768+) and clear of the sandbox's fixed ports.
PORT_RANGE = range(21000, 30000)
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listen_addresses(port: int, netns_name: str = "") -> set[str]:
    """IPv4 addresses with a TCP socket listening on ``port`` (from /proc/net/tcp) in this
    process's network namespace, or in namespace ``netns_name`` (the pod network's)."""
    if netns_name:
        return netns.run_in(netns_name, lambda: listen_addresses(port))
    out: set[str] = set()
    try:
        with open("/proc/thread-self/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state = fields[1], fields[3]
                addr_hex, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:
                    out.add(socket.inet_ntoa(bytes.fromhex(addr_hex)[::-1]))
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    return out


def pod_address(pod: dict[str, Any],
                network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
                ) -> tuple[str, int] | None:
    """(pod IP, the port its vLLM server listens on) for a pod whose IP KWOK took from the pod
    network; None before it has one, or for an IP outside it (a hostNetwork pod: the node's
    127.0.0.1), which keeps its loopback port only."""
    ip = (pod.get("status") or {}).get("podIP") or ""
    if network is None or not ip:
        return None
    try:
        if ipaddress.ip_address(ip) not in network:
            return None
    except ValueError:
        return None
    args = podspec.vllm_args_of(pod)
    return ip, (args.port if args and args.port else podspec.VLLM_DEFAULT_PORT)


def is_kwok_node(node: dict[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    if KWOK_NODE_ANNOTATION in (meta.get("annotations") or {}):
        return True
    labels = meta.get("labels") or {}
    return labels.get("type") == "kwok" or KWOK_NODE_ANNOTATION in labels


@dataclass
class Backend:
    """One pod's "container": the simulator and the shim in front of it (a backend adopted from
    a bridge older than the always-on shim may have none: ``shim_port`` 0)."""

    uid: str
    namespace: str
    name: str
    node: str
    sim_port: int
    args: dict[str, Any]
    behaviour: dict[str, Any]
    sim_pid: int = 0
    shim_port: int = 0
    shim_pid: int = 0
    started_at: float = 0.0
    restarts: int = 0
    loaded: bool = False
    loaded_at: float = 0.0
    serving: bool = False
    pod_ip: str = ""
    pod_port: int = 0
    # runtime only (not persisted)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    stopping_at: float = 0.0
    kill_at: float = 0.0
    next_restart_at: float = 0.0
    warned: str = ""

    PERSISTED = ("uid", "namespace", "name", "node", "sim_port", "args", "behaviour", "sim_pid",
                 "shim_port", "shim_pid", "started_at", "restarts", "loaded", "loaded_at",
                 "serving", "pod_ip", "pod_port")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def port(self) -> int:
        """The port traffic and scrapes go to (the shim's; the simulator's if it has none)."""
        return self.shim_port or self.sim_port

    @property
    def vllm_args(self) -> VLLMArgs:
        a = dict(self.args)
        a["served_model_names"] = tuple(a.get("served_model_names") or ())
        return VLLMArgs(**a)

    @property
    def behave(self) -> Behaviour:
        b = dict(self.behaviour)
        b["failure_types"] = tuple(b.get("failure_types") or podspec.DEFAULT_FAILURE_TYPES)
        b.pop("problems", None)
        return Behaviour(**b)

    def to_state(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.PERSISTED}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Backend:
        return cls(**{k: d[k] for k in cls.PERSISTED if k in d})

    def file_stem(self) -> str:
        return f"{self.namespace}_{self.name}"[:200]


def behaviour_dict(b: Behaviour) -> dict[str, Any]:
    d = asdict(b)
    d.pop("problems", None)
    d["failure_types"] = list(d["failure_types"])
    return d


class Bridge:
    def __init__(self, api: client.ApiClient, state: Path, sim_binary: str,
                 all_nodes: bool = False, drain_seconds: float = 1.0,
                 python: str = sys.executable, loaded_condition: bool = True,
                 pod_network: str = "", pod_netns: str = "") -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.state = state
        self.sim_binary = sim_binary
        self.all_nodes = all_nodes
        self.drain_seconds = drain_seconds
        self.python = python
        self.loaded_condition = loaded_condition
        self.pod_network = ipaddress.ip_network(pod_network) if pod_network else None
        self.pod_netns = pod_netns
        self._cond_written: dict[str, str] = {}
        self._warned_wildcard = False
        self.dir = state / "bridge"
        self.logs = state / "logs" / "pods"
        self.pids = state / "pids"
        for d in (self.dir, self.logs, self.pids):
            d.mkdir(parents=True, exist_ok=True)
        self.owner = str(state)
        self.backends: dict[str, Backend] = {}  # by pod uid
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.http = httpx.Client(timeout=httpx.Timeout(1.0, connect=0.3), trust_env=False)
        self._published: Any = None
        self._saved: Any = None
        self._last_status = 0.0
        self.pods = Informer("pods", self.core.list_pod_for_all_namespaces,
                             handler=self._on_event)
        self.nodes = Informer("nodes", self.core.list_node, handler=self._on_event)

    # --- events ------------------------------------------------------------------------------

    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        self.wake.set()

    # --- state file and orphans --------------------------------------------------------------

    def load_state(self) -> None:
        data = read_json(self.dir / "state.json", {}) or {}
        adopted = set()
        for raw in (data.get("backends") or {}).values():
            try:
                b = Backend.from_state(raw)
            except TypeError:
                continue
            if not self._alive(b, "sim") or (b.shim_port and not self._alive(b, "shim")):
                # half a pod is no pod: stop what is left; reconcile starts it afresh if wanted
                log.info("%s: processes from the state file are gone", b.key)
                self._kill_pid(b.shim_pid, "faultproxy")
                self._kill_pid(b.sim_pid, "llm-d-inference-sim")
                self._remove_pidfiles(b)
                continue
            self.backends[b.uid] = b
            adopted.update(p for p in (b.sim_pid, b.shim_pid) if p)
            log.info("%s: adopted simulator pid %s on port %s", b.key, b.sim_pid, b.port)
        # processes with our owner mark that the state file does not know: orphans
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in adopted or int(entry) == os.getpid():
                continue
            env = pid_environ(int(entry))
            if env.get(OWNER_ENV) == self.owner:
                log.warning("killing orphan pid %s (%s)", entry, pid_cmdline(int(entry))[:120])
                self._signal_group(int(entry), signal.SIGKILL)

    def save_state(self) -> None:
        data = {"pid": os.getpid(),
                "backends": {uid: b.to_state() for uid, b in sorted(self.backends.items())}}
        if data != self._saved:
            write_json_atomic(self.dir / "state.json", data)
            self._saved = data

    # --- processes ---------------------------------------------------------------------------

    def _alive(self, b: Backend, which: str) -> bool:
        proc = b.procs.get(which)
        if proc is not None:
            return proc.poll() is None
        pid = b.sim_pid if which == "sim" else b.shim_pid
        if not pid:
            return False
        cmd = pid_cmdline(pid)
        port = b.sim_port if which == "sim" else b.shim_port
        marker = "llm-d-inference-sim" if which == "sim" else "irsandbox.faultproxy"
        return marker in cmd and f"port={port}" in cmd

    @staticmethod
    def _signal_group(pid: int, sig: int) -> None:
        if pid <= 0:
            return
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _kill_pid(self, pid: int, marker: str) -> None:
        if pid and marker in pid_cmdline(pid):
            self._signal_group(pid, signal.SIGKILL)

    def _pidfile(self, b: Backend, which: str) -> Path:
        return self.pids / f"{which}-{b.file_stem()}.pid"

    def _remove_pidfiles(self, b: Backend) -> None:
        for which in ("sim", "shim"):
            with contextlib.suppress(FileNotFoundError):
                self._pidfile(b, which).unlink()

    def _free_port(self, taken: set[int]) -> int:
        used = taken | {p for b in self.backends.values() for p in (b.sim_port, b.shim_port)}
        start = PORT_RANGE.start + (os.getpid() * 7) % len(PORT_RANGE)
        for i in range(len(PORT_RANGE)):
            port = PORT_RANGE.start + (start - PORT_RANGE.start + i) % len(PORT_RANGE)
            if port not in used and port_free(port):
                return port
        raise RuntimeError("no free loopback port for a simulator")

    def _spawn(self, b: Backend, which: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        logfile = self.logs / f"{b.file_stem()}.{which}.log"
        env = dict(os.environ)
        env.update({
            OWNER_ENV: self.owner, POD_UID_ENV: b.uid,
            "POD_NAME": b.name, "POD_NAMESPACE": b.namespace, "POD_IP": b.pod_ip or "127.0.0.1",
        })
        if which == "shim":
            env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
        with open(logfile, "ab") as out:
            out.write(f"--- {now_rfc3339()} {' '.join(cmd)}\n".encode())
            out.flush()
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                    cwd=str(self.state))
        self._pidfile(b, which).write_text(f"{proc.pid}\n")
        b.procs[which] = proc
        return proc

    def _start_processes(self, b: Backend) -> None:
        args, behave = b.vllm_args, b.behave
        cmd = podspec.sim_command(self.sim_binary, b.sim_port, args, behave)
        proc = self._spawn(b, "sim", cmd)
        b.sim_pid = proc.pid
        b.started_at = time.time()
        b.loaded = False
        b.loaded_at = 0.0
        b.serving = False
        # the shim, always: vLLM's HTTP metrics are counted there (and business failures made)
        if not b.shim_port:
            b.shim_port = self._free_port({b.sim_port})
        labels = (self.pods.get(b.key) or {}).get("metadata", {}).get("labels") or {}
        rollout, revision = podspec.revision_of(labels, b.name)
        shim_cmd = [
            self.python, "-m", "irsandbox.faultproxy", f"--listen-port={b.shim_port}",
            f"--upstream-port={b.sim_port}", f"--rate={behave.business_fail_rate or 0:g}",
            f"--pod={b.key}", f"--rollout={rollout}", f"--revision={revision}",
        ]
        if b.pod_ip:
            shim_cmd.append(f"--pod-address={b.pod_ip}:{b.pod_port}")
            if self.pod_netns:
                shim_cmd.append(f"--pod-netns={self.pod_netns}")
        shim = self._spawn(b, "shim", shim_cmd)
        b.shim_pid = shim.pid
        log.info("%s: started simulator pid %s on 127.0.0.1:%s, shim on :%s (model %s)", b.key,
                 b.sim_pid, b.sim_port, b.shim_port, args.public_name)

    def start_backend(self, pod: dict[str, Any], args: VLLMArgs) -> Backend:
        meta = pod["metadata"]
        behave = podspec.behaviour_of(meta.get("annotations"))
        for problem in behave.problems:
            log.warning("%s/%s: %s", meta["namespace"], meta["name"], problem)
        b = Backend(
            uid=meta["uid"], namespace=meta["namespace"], name=meta["name"],
            node=pod["spec"].get("nodeName", ""), sim_port=self._free_port(set()),
            args={**asdict(args), "served_model_names": list(args.served_model_names)},
            behaviour=behaviour_dict(behave),
        )
        if self.pod_network is not None:
            b.pod_ip, b.pod_port = pod_address(pod, self.pod_network) or ("", 0)
        self.backends[b.uid] = b
        self._start_processes(b)
        return b

    def _terminate(self, b: Backend, sig: int) -> None:
        for which, pid in (("shim", b.shim_pid), ("sim", b.sim_pid)):
            if pid and self._alive(b, which):
                self._signal_group(pid, sig)

    def stop_backend(self, b: Backend, reason: str) -> None:
        """Begin stopping: out of the endpoint map now, SIGTERM after the drain delay."""
        if b.stopping_at:
            return
        log.info("%s: stopping simulator pid %s (%s)", b.key, b.sim_pid, reason)
        b.stopping_at = time.monotonic() + self.drain_seconds
        self._release_pod_address(b)

    def _release_pod_address(self, b: Backend) -> None:
        """The pod's IP is free the moment its object is gone: KWOK hands it to the next pod at
        once (its IP pool's ``Put`` on deletion), whose shim must listen on it while this one
        still drains. SIGUSR1 makes the shim close that listener only (irsandbox.faultproxy)."""
        if b.pod_ip and b.shim_pid and self._alive(b, "shim"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(b.shim_pid, signal.SIGUSR1)

    def _progress_stop(self, b: Backend) -> bool:
        """Returns True once the backend's processes are gone."""
        now = time.monotonic()
        if now < b.stopping_at:
            return False
        if not b.kill_at:
            self._terminate(b, signal.SIGTERM)
            b.kill_at = now + 5.0
        if self._alive(b, "sim") or (b.shim_pid and self._alive(b, "shim")):
            if now >= b.kill_at:
                self._terminate(b, signal.SIGKILL)
            return False
        for proc in b.procs.values():
            with contextlib.suppress(Exception):
                proc.wait(timeout=0)
        self._remove_pidfiles(b)
        return True

    # --- behaviour changes on a running pod -------------------------------------------------

    def apply_annotations(self, b: Backend, pod: dict[str, Any]) -> None:
        """Latencies and failure injection go to the running simulator through its
        ``/admin/config``; the business-fail rate (absent: 0) to the shim. ``mode`` needs a new
        process: it applies to new pods only."""
        new = podspec.behaviour_of((pod.get("metadata") or {}).get("annotations"))
        old = b.behave
        if new == old:
            return
        applied = behaviour_dict(old)
        delta = podspec.admin_config_delta(old, new)
        if delta:
            try:
                r = self.http.post(f"http://127.0.0.1:{b.sim_port}/admin/config", json=delta)
                r.raise_for_status()
            except httpx.HTTPError as e:
                log.warning("%s: /admin/config %s failed: %s", b.key, delta, e)
                return
            log.info("%s: applied %s through /admin/config", b.key, delta)
            for k in ("ttft_ms", "itl_ms", "failure_rate", "failure_types"):
                applied[k] = behaviour_dict(new)[k]
        if b.shim_port and (new.business_fail_rate or 0) != (old.business_fail_rate or 0):
            try:
                r = self.http.post(f"http://127.0.0.1:{b.shim_port}/-/shim/config",
                                   json={"business-fail-rate": new.business_fail_rate or 0})
                r.raise_for_status()
            except httpx.HTTPError as e:
                log.warning("%s: shim config failed: %s", b.key, e)
                return
            log.info("%s: business-fail-rate now %g%%", b.key, new.business_fail_rate or 0)
        if b.shim_port:
            applied["business_fail_rate"] = new.business_fail_rate
        # the simulated load time matters again only if the process restarts
        applied["startup_seconds"] = new.startup_seconds
        b.behaviour = applied
        if b.behave != new and b.warned != repr(new):
            b.warned = repr(new)
            log.warning("%s: mode (and, for a pod started without a shim, business-fail-rate) "
                        "applies to new pods only; the running simulator keeps mode=%s "
                        "business-fail-rate=%s", b.key, b.behave.mode,
                        b.behave.business_fail_rate)

    # --- readiness ------------------------------------------------------------------------------

    def probe(self, b: Backend) -> None:
        """``serving``: the simulator answers ``/health`` (and the shim, if any): only then
        is the pod in the endpoint map the gateway routes by. ``loaded``: ``/health/ready`` is 200
        (after ``--startup-duration``, the simulated model load)."""
        if b.loaded:
            return
        base = f"http://127.0.0.1:{b.sim_port}"
        try:
            if not b.serving:
                if self.http.get(f"{base}/health", timeout=0.5).status_code != 200:
                    return
                if b.shim_port and not self._shim_up(b):
                    return
                b.serving = True
                log.info("%s: simulator serving on 127.0.0.1:%s after %.2fs", b.key, b.port,
                         time.time() - b.started_at)
                if "0.0.0.0" in listen_addresses(b.sim_port) and not self._warned_wildcard:
                    self._warned_wildcard = True
                    log.warning("the simulator listens on 0.0.0.0:%s, not loopback only: this "
                                "llm-d-inference-sim build ignores POD_IP for its listener (see "
                                "docs/sandbox-bridge.md, 'Loopback only')", b.sim_port)
            r = self.http.get(f"{base}/health/ready", timeout=0.5)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            b.loaded = True
            b.loaded_at = time.time()
            log.info("%s: model loaded after %.1fs", b.key, b.loaded_at - b.started_at)

    def _shim_up(self, b: Backend) -> bool:
        try:
            return self.http.get(f"http://127.0.0.1:{b.shim_port}/-/shim/config",
                                 timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def sync_loaded_condition(self, b: Backend, pod: dict[str, Any]) -> None:
        """Report the simulator's own view in the pod condition ``sim.inference.dev/loaded``.

        KWOK owns ``Ready`` (sandbox/kwok/stages.yaml: Running, then Ready after the
        ``sim.inference.dev/startup-seconds`` annotation, the same time the bridge passes to the
        simulator's ``--startup-duration``); the bridge never writes ``Ready`` (KWOK's pod-ready
        stage would set it back). This condition is the simulator's ``/health/ready`` verdict,
        for tests and people to compare with ``Ready``.
        """
        if not self.loaded_condition or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        want = "True" if b.loaded else "False"
        cur = podspec.condition(pod, podspec.CONDITION_LOADED)
        if cur is not None and cur.get("status") == want:
            return
        if self._cond_written.get(b.uid) == want:
            return  # written; the informer has not seen it yet
        reason = "ModelLoaded" if b.loaded else "ModelLoading"
        message = (f"llm-d-inference-sim /health/ready is {'200' if b.loaded else '503'} "
                   f"(model {b.vllm_args.public_name}, startup {b.behave.startup_seconds:g}s)")
        body = {"status": {"conditions": [{
            "type": podspec.CONDITION_LOADED, "status": want, "reason": reason,
            "message": message, "lastTransitionTime": now_rfc3339(), "lastProbeTime": None}]}}
        try:
            self.core.patch_namespaced_pod_status(
                b.name, b.namespace, body,
                _content_type="application/strategic-merge-patch+json")
            self._cond_written[b.uid] = want
        except ApiException as e:
            if e.status != 404:
                log.warning("%s: status patch failed: %s %s", b.key, e.status, e.reason)

    # --- publishing -----------------------------------------------------------------------------

    def publish(self) -> None:
        pods: dict[str, Any] = {}
        for b in self.backends.values():
            if b.stopping_at or not b.serving:
                continue
            pod = self.pods.get(b.key) or {}
            labels = (pod.get("metadata") or {}).get("labels") or {}
            rollout, revision = podspec.revision_of(labels, b.name)
            args = b.vllm_args
            pods[b.key] = {
                "namespace": b.namespace, "pod": b.name, "uid": b.uid, "node": b.node,
                "address": f"127.0.0.1:{b.port}", "port": b.port, "sim_port": b.sim_port,
                "pod_address": f"{b.pod_ip}:{b.pod_port}" if b.pod_ip else None,
                "shim_port": b.shim_port or None, "model": args.public_name,
                "served_model_names": list(args.served_model_names) or [args.model],
                "labels": labels, "rollout": rollout, "revision": revision,
                "loaded": b.loaded, "ready": podspec.is_pod_ready(pod) if pod else False,
            }
        doc = {"pods": pods,
               "ports": {str(v["port"]): k for k, v in sorted(pods.items())}}
        if doc == self._published:
            return
        write_json_atomic(self.dir / "endpoints.json", {"updated": now_rfc3339(), **doc})
        self._published = doc

    def write_status(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._last_status < 5:
            return
        self._last_status = time.monotonic()
        write_json_atomic(self.dir / "status.json", {
            "pid": os.getpid(), "synced": True, "time": now_rfc3339(),
            "backends": len(self.backends),
            "loaded": sum(1 for b in self.backends.values() if b.loaded),
        })

    # --- the loop ---------------------------------------------------------------------------

    def wanted(self) -> dict[str, tuple[dict[str, Any], VLLMArgs]]:
        nodes = {n["metadata"]["name"]: n for n in self.nodes.items()}
        out: dict[str, tuple[dict[str, Any], VLLMArgs]] = {}
        for pod in self.pods.items():
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            node = spec.get("nodeName")
            # a terminating pod keeps its simulator (in-flight requests finish; its endpoint is
            # already not ready) until the pod object is gone; none is started for one
            if not node or (meta.get("deletionTimestamp") and meta.get("uid") not in self.backends):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if not self.all_nodes and not (node in nodes and is_kwok_node(nodes[node])):
                continue
            args = podspec.vllm_args_of(pod)
            if args is None:
                continue
            out[meta["uid"]] = (pod, args)
        return out

    def reconcile(self) -> None:
        wanted = self.wanted()
        for uid, b in list(self.backends.items()):
            if uid not in wanted:
                self.stop_backend(b, "pod deleted")
            if b.stopping_at and self._progress_stop(b):
                del self.backends[uid]
        for uid, (pod, args) in wanted.items():
            b = self.backends.get(uid)
            if b is None:
                if self.pod_network is not None and not (pod.get("status") or {}).get("podIP"):
                    continue  # KWOK writes the IP with its "running" stage: the next event
                try:
                    self.start_backend(pod, args)
                except Exception:
                    log.exception("%s: could not start the simulator", podspec.pod_key(pod))
                continue
            if b.stopping_at:
                continue
            if not self._alive(b, "sim") or (b.shim_pid and not self._alive(b, "shim")):
                now = time.monotonic()
                if not b.next_restart_at:
                    b.restarts += 1
                    delay = min(30.0, 2.0 ** min(b.restarts - 1, 5))
                    b.next_restart_at = now + delay
                    b.loaded = False
                    b.serving = False
                    log.warning("%s: simulator exited (see %s); restart %d in %.0fs", b.key,
                                self.logs / f"{b.file_stem()}.sim.log", b.restarts, delay)
                    self._terminate(b, signal.SIGKILL)
                elif now >= b.next_restart_at:
                    b.next_restart_at = 0.0
                    for proc in b.procs.values():
                        with contextlib.suppress(Exception):
                            proc.wait(timeout=0)
                    b.procs.clear()
                    self._start_processes(b)
            else:
                self.apply_annotations(b, pod)
                self.probe(b)
            self.sync_loaded_condition(b, pod)
        self.publish()
        self.save_state()
        self.write_status()

    def run(self) -> None:
        self.load_state()
        self.pods.start()
        self.nodes.start()
        if not wait_synced([self.pods, self.nodes], timeout=120):
            raise SystemExit("bridge: could not list pods and nodes from the API server")
        self.reconcile()
        self.write_status(force=True)
        log.info("bridge synced: %d backend(s); state in %s", len(self.backends), self.dir)
        while not self.stop.is_set():
            self.wake.wait(0.2)
            self.wake.clear()
            try:
                self.reconcile()
            except Exception:
                log.exception("reconcile failed")
        self.save_state()

    def shutdown(self, stop_backends: bool) -> None:
        if stop_backends:
            for b in self.backends.values():
                self._terminate(b, signal.SIGTERM)
                self._remove_pidfiles(b)
            self.backends.clear()
            self.publish()
            self.save_state()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m irsandbox.bridge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--state-dir", default=None, help="default: $IR_STATE or <repo>/.sandbox")
    parser.add_argument("--sim-binary", default=None,
                        help="default: $IR_SIM_BIN, the cached build, or PATH")
    parser.add_argument("--all-nodes", action="store_true",
                        help="serve pods on every node, not only KWOK nodes")
    parser.add_argument("--drain-seconds", type=float, default=1.0,
                        help="keep a deleted pod's simulator this long after it leaves the "
                             "endpoint map, for in-flight requests")
    parser.add_argument("--stop-backends-on-exit", action="store_true",
                        help="stop all simulators when the bridge exits (default: leave them "
                             "running, like containers across a kubelet restart)")
    parser.add_argument("--no-loaded-condition", action="store_true",
                        help="do not write the sim.inference.dev/loaded pod condition")
    parser.add_argument("--pod-network", default=os.environ.get("IR_POD_NETWORK", ""),
                        metavar="CIDR",
                        help="pods' IPs in this range are reachable (up.sh's pod network "
                             "namespace): the shim also listens on <podIP>:<containerPort> "
                             "(default: $IR_POD_NETWORK; empty: loopback ports only)")
    parser.add_argument("--pod-netns", default=os.environ.get("IR_POD_NETNS", ""),
                        metavar="NAME",
                        help="the network namespace where the pod network is local (up.sh makes "
                             "it): shims listen on pod addresses inside it (default: "
                             "$IR_POD_NETNS)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging("bridge", args.verbose)
    state = use_state_dir(args.state_dir)
    bridge = Bridge(load_kube_config(args.kubeconfig), state,
                    args.sim_binary or find_sim_binary(), all_nodes=args.all_nodes,
                    drain_seconds=args.drain_seconds,
                    loaded_condition=not args.no_loaded_condition,
                    pod_network=args.pod_network, pod_netns=args.pod_netns)
    try:
        run_until_signalled(bridge, log)
    finally:
        bridge.shutdown(args.stop_backends_on_exit)


if __name__ == "__main__":
    main()
