"""Paths, environment and file helpers shared by the bridge, the gateway, the load generator and
every harness that drives the sandbox (tests, benchmarks, the demo).

The sandbox keeps its state in ``$IR_STATE`` (default: ``<repo>/.sandbox``), next to the
kubeconfig and ``env`` file that ``sandbox/up.sh`` writes; :func:`sandbox_env` is the one reader
of that file. Every file another process reads is written atomically (temporary name that no
reader's glob matches, then ``rename``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]


def operator_pythonpath() -> str:
    """PYTHONPATH for a process that runs this checkout's operator package (``python -m
    inference_rollout ...``), keeping the caller's own entries."""
    return f"{REPO / 'operator'}:{os.environ.get('PYTHONPATH', '')}"
SANDBOX_DIR = REPO / "sandbox"

DEFAULT_GATEWAY_PORT = 18080


def state_dir() -> Path:
    """The sandbox's state directory: ``$IR_STATE`` or ``<repo>/.sandbox``."""
    return Path(os.environ.get("IR_STATE") or REPO / ".sandbox").resolve()


def use_state_dir(explicit: str | None) -> Path:
    """A daemon's ``--state-dir``: ``explicit`` (exported as ``$IR_STATE`` for what it starts),
    else :func:`state_dir`."""
    if not explicit:
        return state_dir()
    state = Path(explicit).resolve()
    os.environ["IR_STATE"] = str(state)
    return state


def run_until_signalled(service: Any, log: logging.Logger) -> None:
    """``service.run()`` until SIGTERM or SIGINT sets its ``stop`` and ``wake`` events."""
    def _stop(signum: int, _frame: Any) -> None:
        log.info("signal %s: exiting", signum)
        service.stop.set()
        service.wake.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    service.run()


def cache_dir() -> Path:
    return Path(os.environ.get("IR_CACHE") or Path.home() / ".cache" / "inference-rollout")


def read_env_file(path: Path) -> dict[str, str]:
    """Parse a shell ``KEY=value`` / ``export KEY=value`` file (quotes stripped; ``${VAR}`` of
    the process environment expanded, as ``PATH=<sandbox bin>:${PATH}`` needs)."""
    env: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return env
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key] = os.path.expandvars(value)
    return env


def sandbox_env() -> dict[str, str]:
    """``.sandbox/env`` overlaid with the process environment (the environment wins)."""
    env = read_env_file(state_dir() / "env")
    for key in ("KUBECONFIG", "PROMETHEUS_URL", "GATEWAY_URL", "NGINX_GATEWAY_URL", "IR_CACHE"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


def versions() -> dict[str, str]:
    """The pinned component versions (``sandbox/versions.env``)."""
    return read_env_file(SANDBOX_DIR / "versions.env")


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks; a caller that can lose the
    race retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


T = TypeVar("T")

#: What a poll may raise while the thing it waits for is not there yet: the object does not
#: exist, a server is restarting, a file or key is not written yet.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    ApiException, httpx.HTTPError, OSError, KeyError, ValueError)


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1,
             tolerate: tuple[type[Exception], ...] = TRANSIENT_ERRORS) -> T:
    """Poll ``check`` until it returns something truthy and return that.  An exception in
    ``tolerate`` counts as "not yet"; on timeout, fail naming ``what`` and the last value or
    exception."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = repr(value)
        except tolerate as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} (last: {last})")
        time.sleep(interval)


#: llm-d-inference-sim as sandbox/build.sh builds it, patched to listen on 127.0.0.1 only
#: (sandbox/lib.sh has the same name).
SIM_BIN_NAME = "llm-d-inference-sim-loopback"


def find_sim_binary() -> str:
    """The llm-d-inference-sim binary: ``$IR_SIM_BIN``, the versioned one in the cache, or PATH."""
    explicit = os.environ.get("IR_SIM_BIN")
    if explicit:
        return explicit
    version = versions().get("LLM_D_INFERENCE_SIM_VERSION", "")
    cached = cache_dir() / "bin" / f"{SIM_BIN_NAME}-{version}"
    if version and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which("llm-d-inference-sim")
    if found:
        return found
    raise FileNotFoundError(
        f"llm-d-inference-sim not found: build it with `bash sandbox/build.sh sim` ({cached}) "
        "or set IR_SIM_BIN"
    )


@contextlib.contextmanager
def simulator(*args: str, timeout: float = 30) -> Any:
    """A bare llm-d-inference-sim on a free loopback port (no pod, no shim), started with
    ``--model=m --mode=echo --force-dummy-tokenizer`` and ``args``; yields its base URL once
    ``/v1/models`` answers, and stops it on exit."""
    port = free_port()
    proc = subprocess.Popen(
        [find_sim_binary(), f"--port={port}", "--model=m", "--mode=echo",
         "--force-dummy-tokenizer", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/v1/models", timeout=1).is_success, timeout,
                 f"the simulator on port {port}", interval=0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a reader never sees a partial file."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` so a reader never sees a partial file (the temp name ends in ``.tmp``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path, default: Any = None) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def pid_cmdline(pid: int) -> str:
    """The process's command line joined by spaces, or "" if it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # field 3 is the state; a zombie (Z) or dead (X) process does not count as running
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return ""
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError):
        return ""


def pid_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def setup_logging(name: str, verbose: bool = False) -> logging.Logger:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("kubernetes", "urllib3", "httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return logging.getLogger(name)


def terminate(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM a process this harness started, SIGKILL after ``grace`` seconds; wait for it."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
