"""Processes that drive the sandbox for the end-to-end tests, the benchmarks and the demo: the
operator as a real process (started, SIGKILLed, stopped at will) and steady background load
through the gateway.

The operator runs as ``inference-rollout operator`` with its own ports and log under
``.sandbox/logs``; the load is a ``irsandbox.loadgen`` process.  What they act on is read through
:class:`irsandbox.cluster.Cluster`, never through the operator itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from .common import REPO, operator_pythonpath, state_dir, wait_for
from .loadgen import LoadReport, run_load
from .manifests import SIM_MODEL

#: Past kopf's two namespace listings at start (see OperatorProcess.start).
KOPF_NAMESPACE_DISCOVERY_S = 3.0


class OperatorProcess:
    """The operator as a real process (``inference-rollout operator``), killable at will.
    ``namespaces`` (kopf globs) scopes it; without them it watches every namespace.  With
    ``service_proxy`` it reaches Services through the nginx translator's forward proxy (there is
    no cluster DNS here), as the evaluation gate needs.  It runs with the operator's secure
    defaults (queries confined to each rollout's namespace), allowed the sandbox's Prometheus
    (``PROMETHEUS_URL``) and any address in ``prometheus_allow``."""

    def __init__(self, env: dict[str, str], log_name: str = "operator",
                 namespaces: list[str] | None = None, metrics_port: int = 18481,
                 liveness_port: int = 18480, service_proxy: bool = True,
                 extra_args: tuple[str, ...] = (), unset_env: tuple[str, ...] = (),
                 prometheus_allow: tuple[str, ...] = ()) -> None:
        """``extra_args`` are appended to the command line; ``unset_env`` names variables the
        process must not inherit (e.g. ``KUBECONFIG``, to prove ``--kubeconfig`` alone works)."""
        self.env, self.namespaces, self.service_proxy = env, namespaces, service_proxy
        self.extra_args, self.unset_env = extra_args, unset_env
        self.prometheus_allow = tuple(a for a in (env.get("PROMETHEUS_URL", ""),
                                                  *prometheus_allow) if a)
        self.metrics_port, self.liveness_port = metrics_port, liveness_port
        self.log_path = state_dir() / "logs" / f"{log_name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        scope = (["--all-namespaces"] if not self.namespaces
                 else [a for ns in self.namespaces for a in ("--namespace", ns)])
        cmd = [sys.executable, "-m", "inference_rollout", "operator", *scope,
               "--log-format", "json", "--metrics-port", str(self.metrics_port),
               "--liveness-port", str(self.liveness_port)]
        for address in self.prometheus_allow:
            cmd += ["--prometheus-allow", address]
        if self.service_proxy and self.env.get("NGINX_GATEWAY_URL"):
            # the nginx translator forwards <svc>.<ns>.svc to the Service's pods (the sandbox has
            # no cluster DNS; Traefik, the sandbox's gateway, is no forward proxy)
            cmd += ["--service-proxy", self.env["NGINX_GATEWAY_URL"]]
        return [*cmd, *self.extra_args]

    def process_env(self) -> dict[str, str]:
        """The work tree's operator package first on the path."""
        env = {**os.environ, **self.env,
               "PYTHONPATH": operator_pythonpath()}
        for name in self.unset_env:
            env.pop(name, None)
        return env

    def start(self, cwd: Path = REPO) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), env=self.process_env(), stdout=log,
                                         stderr=subprocess.STDOUT, cwd=cwd)
        wait_for(self._live, 30, f"operator liveness on :{self.liveness_port} "
                 f"(log: {self.log_path})", interval=0.5, tolerate=())
        if self.namespaces and any(any(c in ns for c in "*?[") for ns in self.namespaces):
            # kopf (1.45.2, observation.py) lists namespaces, then starts a watcher whose own
            # first listing it ignores (events of type None): a namespace created between the
            # two is not watched until it changes. The first e2e test after a start once created
            # its namespace in that window and saw no reconcile for 120 s. Start tests after it.
            time.sleep(KOPF_NAMESPACE_DISCOVERY_S)

    def _live(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"operator exited; see {self.log_path}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz",
                                        timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self, timeout: float = 2.0) -> str:
        """The operator's /metrics page."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=timeout) as r:
            return str(r.read().decode())

    def dump_tasks(self) -> None:
        """SIGUSR2: the operator logs where each of its asyncio tasks waits (handlers.py)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(1.0)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no final status write — the crash the design must survive."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class BackgroundLoad:
    """A steady load through the gateway (a loadgen process) so Prometheus has samples, and the
    business counter per revision is exported for custom business-metric queries."""

    def __init__(self, env: dict[str, str], host: str, rate: float = 20, seconds: int = 900,
                 json_check: bool = False, metrics_port: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "irsandbox.loadgen", "--url", env["GATEWAY_URL"],
               "--host", host, "--model", SIM_MODEL, "--rate", str(rate),
               "--duration", str(seconds), "--max-tokens", "8"]
        for name, value in (headers or {}).items():
            cmd += ["--header", f"{name}:{value}"]
        if json_check:
            cmd.append("--json-check")
        if metrics_port:
            cmd += ["--metrics-port", str(metrics_port)]
        tag = "-headers" if headers else ""
        log_path = state_dir() / "logs" / f"loadgen-{host}{tag}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, env={**os.environ, **env, "PYTHONPATH": f"{REPO / 'sandbox'}"},
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class TrafficWatch:
    """Requests through the gateway at ``rate`` per second from a thread of this process, from
    :meth:`start` to :meth:`stop`, every answer kept: what users saw *throughout* an action
    (a deletion, a kill), where a burst afterwards sees only the state it ends in."""

    def __init__(self, env: dict[str, str], host: str, rate: float = 40,
                 model: str = SIM_MODEL) -> None:
        """``model``: the model name requests ask for (a LoRA adapter's, say)."""
        self.url, self.host, self.rate, self.model = env["GATEWAY_URL"], host, rate, model
        self.report: LoadReport | None = None
        #: (wall-clock time of the answer, the pod that answered, its error or "").
        self.answers: list[tuple[float, str, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"traffic-{host}", daemon=True)

    def _run(self) -> None:
        async def go() -> LoadReport:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._ready.set()
            return await run_load(self.url, model=self.model, host=self.host, rate=self.rate,
                                  stop=self._stop, concurrency=64, max_tokens=4, timeout=10,
                                  on_result=lambda r: self.answers.append(
                                      (time.time(), r.pod, r.error)))
        self.report = asyncio.run(go())

    def start(self) -> TrafficWatch:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> LoadReport:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert self.report is not None, "the traffic watch did not finish"
        return self.report


def plugin(env: dict[str, str], *args: str, timeout: float = 60
           ) -> subprocess.CompletedProcess[str]:
    """``kubectl inference-rollout ARGS`` as a user runs it: this checkout's plugin as a
    process with the sandbox's ``env`` (its kubeconfig), output captured, never raising on a
    non-zero exit (the tests read the code and the words)."""
    return subprocess.run(
        [sys.executable, "-m", "inference_rollout.cli.plugin", *args],
        env={**os.environ, **env, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"},
        capture_output=True, text=True, timeout=timeout, check=False)


def measure_shares(env: dict[str, str], host: str, requests: int = 400) -> LoadReport:
    """Send a burst through the gateway and report which revision served each response."""
    return asyncio.run(run_load(env["GATEWAY_URL"], model=SIM_MODEL, host=host, rate=0,
                                requests=requests, concurrency=16, max_tokens=4))


def settle_on(env: dict[str, str], host: str, revision: str, timeout: float = 30) -> None:
    """The gateway applies a route change a moment after the API server holds it (Traefik's
    provider reloads; the nginx translator regenerates and its old workers finish): wait until
    a burst of 40 requests goes all to ``revision``."""
    wait_for(lambda: measure_shares(env, host, 40).share(revision) == 1.0, timeout,
             f"the gateway sending everything to {revision}", interval=1, tolerate=())


def summary_line(status: dict[str, Any]) -> str:
    """A rollout's status in one line: phase, step, weight, each metric's value and verdict."""
    analysis = status.get("analysis") or {}
    metrics = "; ".join(
        f"{k}={'-' if v.get('value') is None else format(v['value'], '.4g')}"
        f"({v.get('verdict')}, {v.get('threshold')}"
        f"{', ' + v['error'] if v.get('error') else ''})" for k, v in sorted(analysis.items()))
    return (f"phase={status.get('phase')} step={status.get('currentStep')} "
            f"weight={status.get('canaryWeight')} {metrics}")
