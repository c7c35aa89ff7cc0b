"""The sandbox's own processes: which run, which died, and whose sandbox this machine runs.

``up.sh`` and its hooks record every long-running part (etcd, the API server, KWOK, Prometheus,
the pod bridge, Traefik, the nginx translator, ...) as ``<state>/pids/<name>.pid`` and start it
with ``IR_SANDBOX_STATE=<state>`` in its environment (sandbox/lib.sh ``start_process``). A part
that exits leaves its PID file behind. Nothing restarts it, and every later test that needs it
would fail with a timeout of something else ("timed out after 30s waiting for Traefik to run ...").
So the test fixtures ask :func:`dead_components` before each test and name the dead part with the
last lines of its log instead, and ``make sandbox-status`` prints :func:`status_table`.

One sandbox runs per machine (its ports, its pod network namespace): ``up.sh`` names the checkout
that owns it in ``IR_MACHINE_OWNER``, and :func:`foreign_owner` tells a harness of another
checkout to stop instead of driving (and force-applying its CRD onto) that sandbox.

    python -m irsandbox.components            # what runs, what died (make sandbox-status)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .common import pid_cmdline, pid_environ, state_dir

#: PID files the pod bridge writes for each pod's simulator and shim: pods, not sandbox parts
#: (tests stop and kill them on purpose).
POD_PROCESS_PREFIXES = ("sim-", "shim-")
DEFAULT_OWNER_FILE = "/run/inference-rollout/sandbox-owner"
LOG_LINES = 25
RECHECK_S = 0.1


@dataclass(frozen=True)
class Component:
    name: str
    pid: int
    alive: bool
    started: float  # seconds since the epoch; 0 if unknown
    log: Path

    def tail(self, lines: int = LOG_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {self.log})"
        return "\n".join(text[-lines:])


def _pid_alive(pid: int, state: Path) -> bool:
    """Alive and ours: a reused PID never counts. Ours is marked in its environment
    (``IR_SANDBOX_STATE``), or, for a process that clears its environment at start (nginx keeps
    only TZ), named by its command line, which holds the state dir (``nginx -p <state>/nginx``)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            if any(line.startswith("State:") and "Z" in line.split()[1:2] for line in f):
                return False
    except OSError:
        return False
    env = pid_environ(pid)
    if "IR_SANDBOX_STATE" in env:
        return env["IR_SANDBOX_STATE"] == str(state)
    return str(state) + "/" in pid_cmdline(pid)


def _started(pid: int) -> float:
    try:
        return Path(f"/proc/{pid}").stat().st_mtime
    except OSError:
        return 0.0


def components(state: Path | None = None) -> list[Component]:
    """Every part recorded under ``<state>/pids`` (pods' processes excepted), by name."""
    state = (state or state_dir()).resolve()
    out: list[Component] = []
    for pidfile in sorted((state / "pids").glob("*.pid")):
        name = pidfile.stem
        if name.startswith(POD_PROCESS_PREFIXES):
            continue
        try:
            pid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = 0
        alive = pid > 0 and _pid_alive(pid, state)
        out.append(Component(name, pid, alive, _started(pid) if alive else 0.0,
                             state / "logs" / f"{name}.log"))
    return out


def dead_components(state: Path | None = None) -> list[Component]:
    """The recorded parts that no longer run, while others do. A sandbox none of whose parts
    runs is not up at all (stopped, or PID files from before a reboot): starting it is up.sh's
    job, not a death to report."""
    found = components(state)
    if not any(c.alive for c in found):
        return []
    if all(c.alive for c in found):
        return []
    # A process in the middle of an exec (nohup or bash -c exec'ing the part) shows an empty
    # environ and command line for an instant: look again before calling it dead.
    time.sleep(RECHECK_S)
    again = {c.name: c for c in components(state)}
    return [c for c in found if not c.alive and not again.get(c.name, c).alive]


def dead_report(dead: list[Component]) -> str:
    """What a failing test shows: each dead part, its PID, and the last lines of its log."""
    parts = []
    for c in dead:
        body = "\n".join(f"    {line}" for line in c.tail().splitlines())
        parts.append(f"sandbox component {c.name} (pid {c.pid}) is not running; nothing restarts "
                     f"it. Last lines of {c.log}:\n{body}")
    parts.append("Restart what is missing with `bash sandbox/up.sh` (idempotent); "
                 "`make sandbox-status` lists what runs.")
    return "\n".join(parts)


def owner_file() -> Path:
    return Path(os.environ.get("IR_MACHINE_OWNER") or DEFAULT_OWNER_FILE)


def foreign_owner(state: Path | None = None) -> Path | None:
    """The state dir of another checkout whose sandbox runs on this machine, or None."""
    state = (state or state_dir()).resolve()
    try:
        lines = owner_file().read_text().splitlines()
    except OSError:
        return None
    owner = next((Path(line[6:]) for line in lines if line.startswith("state=")), None)
    if owner is None or owner.resolve() == state:
        return None
    return owner if any(c.alive for c in components(owner)) else None


def foreign_owner_message(owner: Path) -> str:
    return (f"this machine's sandbox belongs to another checkout (state {owner}, named in "
            f"{owner_file()}); one sandbox runs per machine, and its CRD and objects are that "
            f"checkout's. Run from that checkout, or stop its sandbox first: "
            f"bash {owner.parent}/sandbox/down.sh")


def status_table(state: Path | None = None) -> str:
    state = (state or state_dir()).resolve()
    rows = [f"sandbox state {state}"]
    owner = foreign_owner(state)
    if owner is not None:
        rows.append(f"NOTE: {foreign_owner_message(owner)}")
    found = components(state)
    if not found:
        rows.append("no components recorded (not started: make sandbox-up)")
    now = time.time()
    for c in found:
        if c.alive:
            rows.append(f"  {c.name:<24} running  pid {c.pid:<8} up {now - c.started:8.0f} s")
        else:
            rows.append(f"  {c.name:<24} DEAD     pid {c.pid:<8} log {c.log}")
    for c in (c for c in found if not c.alive):
        rows.append(f"\n--- last lines of {c.log} ({c.name})\n{c.tail()}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irsandbox.components", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=None)
    args = parser.parse_args(argv)
    state = Path(args.state_dir).resolve() if args.state_dir else None
    print(status_table(state))
    return 1 if dead_components(state) else 0


if __name__ == "__main__":
    sys.exit(main())
