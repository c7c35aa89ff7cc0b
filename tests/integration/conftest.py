"""Integration fixtures: a real Prometheus server, started per test module or test, on localhost.

``prometheus`` (session scope) is a launcher: ``prometheus(scrape_configs)`` starts a fresh
Prometheus with those scrape jobs on 127.0.0.1 and a random free port, with its own temporary
storage, and returns a :class:`PrometheusServer`.  Every server it started is stopped at the end
of the session (or earlier with ``server.stop()``).  Nothing listens beyond the tests.

The Prometheus binary is the Debian package's ``/usr/bin/prometheus`` (``apt-get install -y
prometheus``) or ``$PROMETHEUS_BIN``.  A missing binary FAILS the test: these tests are the proof
that the PromQL works, and a silent skip would hide a broken CI image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from irsandbox.common import free_port, terminate, wait_for
from irsandbox.control_plane import ControlPlane
from irsandbox.control_plane import start as start_control_plane

INSTALL_HINT = (
    "prometheus is not installed: the integration tests need a real Prometheus. Install it with "
    "`apt-get update && apt-get install -y --no-install-recommends prometheus` (Debian/Ubuntu) "
    "or point PROMETHEUS_BIN at a prometheus binary."
)


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the raw result list (raises on an API error)."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        result: list[dict[str, Any]] = r.json()["data"]["result"]
        return result

    def wait_until(self, promql: str, ok: Callable[[list[dict[str, Any]]], bool],
                   timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``ok(result)``; fail with the last result and the log."""
        def check() -> tuple[list[dict[str, Any]]] | None:
            result = self.query(promql)
            return (result,) if ok(result) else None  # a tuple: an empty result may be ok
        try:
            return wait_for(check, timeout, repr(promql), interval=0.25, tolerate=())[0]
        except TimeoutError as e:
            pytest.fail(f"{e}\n{self.log[-2000:]}")

    def wait_for_targets(self, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` targets have been scraped successfully at least once."""
        self.wait_until("sum(up)", lambda r: bool(r) and float(r[0]["value"][1]) >= count,
                        timeout)

    def stop(self) -> None:
        terminate(self.process)


class PrometheusLauncher:
    def __init__(self, binary: str, base: Path) -> None:
        self.binary, self.base = binary, base
        self.servers: list[PrometheusServer] = []

    def __call__(self, scrape_configs: list[dict[str, Any]], *, scrape_interval: str = "1s",
                 extra_args: tuple[str, ...] = ()) -> PrometheusServer:
        workdir = Path(tempfile.mkdtemp(prefix="prometheus-", dir=self.base))
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": scrape_configs,
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        last_log = ""
        for _attempt in range(3):  # a port taken between free_port() and bind: try another
            port = free_port()
            with open(workdir / "prometheus.log", "wb") as log:
                proc = subprocess.Popen(
                    [self.binary, f"--config.file={workdir / 'prometheus.yml'}",
                     f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *extra_args],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )
            server = PrometheusServer(f"http://127.0.0.1:{port}", proc, workdir)
            if _wait_ready(server):
                self.servers.append(server)
                return server
            server.stop()
            last_log = server.log
            if "address already in use" not in last_log:
                break
        pytest.fail(f"Prometheus did not become ready; its log:\n{last_log[-3000:]}",
                    pytrace=False)

    def stop_all(self) -> None:
        for s in self.servers:
            s.stop()


def _wait_ready(server: PrometheusServer, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusLauncher]:
    """Start real Prometheus servers: ``server = prometheus(scrape_configs)``."""
    binary = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(f"{INSTALL_HINT} (looked for {binary or 'prometheus on PATH'})", pytrace=False)
    launcher = PrometheusLauncher(binary, tmp_path_factory.mktemp("prometheus"))
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver with the InferenceRollout and Gateway API HTTPRoute CRDs (see
    :mod:`irsandbox.control_plane`).  Missing binaries fail: `bash sandbox/build.sh`."""
    try:
        cp = start_control_plane(tmp_path_factory.mktemp("control-plane"))
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
