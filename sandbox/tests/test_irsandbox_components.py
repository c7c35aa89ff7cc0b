"""irsandbox.components: a sandbox part that died is named with its log; another checkout's
running sandbox is recognised. Real processes, a state dir of the test's own."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from irsandbox import components


def start(state: Path, name: str, script: str) -> subprocess.Popen[bytes]:
    """A process recorded as sandbox part ``name`` of ``state`` (lib.sh's start_process: the
    marker in its environment, its PID file, its log).  ``sleep N`` runs as itself, the rest
    under bash."""
    (state / "pids").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "IR_SANDBOX_STATE": str(state)}
    # Popen returns once its child has exec'd the program.  `bash -c "sleep 60"` would exec a
    # second time (bash replaces itself by sleep) at an instant of its own, and while a process
    # execs, /proc/<pid>/environ reads empty: a live part seen dead by the test, not by the
    # code under test (a loaded machine made that window wide enough: a flaky test, 2026-12-07).
    argv = script.split() if re.fullmatch(r"sleep \d+", script) else ["bash", "-c", script]
    with open(state / "logs" / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    (state / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")
    marker = f"IR_SANDBOX_STATE={state}".encode()
    deadline = time.monotonic() + 5
    while proc.poll() is None and marker not in _environ(proc.pid):  # a short script may end
        assert time.monotonic() < deadline, f"{name}: no marker"  # (a zombie's environ is empty)
        time.sleep(0.01)
    return proc


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


@pytest.fixture()
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_a_dead_part_is_named_with_the_last_lines_of_its_log(tmp_path, procs):
    state = tmp_path / "state"
    procs.append(start(state, "kube-apiserver", "sleep 60"))
    dying = start(state, "traefik", "echo 'panic: invalid concurrent Body.Read call'; exit 2")
    procs.append(dying)
    dying.wait()
    # a pod's simulator the bridge recorded is not a sandbox part: tests kill those on purpose
    procs.append(start(state, "sim-ns-pod", "exit 0"))
    procs[-1].wait()

    dead = components.dead_components(state)
    assert [c.name for c in dead] == ["traefik"]
    report = components.dead_report(dead)
    assert f"traefik (pid {dying.pid}) is not running" in report
    assert "panic: invalid concurrent Body.Read call" in report
    table = components.status_table(state)
    assert "kube-apiserver" in table and "running" in table and "DEAD" in table


def test_a_reused_pid_is_not_the_part(tmp_path, procs):
    state = tmp_path / "state"
    procs.append(start(state, "etcd", "sleep 60"))
    # a live process of someone else under the part's PID file
    other = subprocess.Popen(["sleep", "60"])
    procs.append(other)
    (state / "pids" / "prometheus.pid").write_text(f"{other.pid}\n")
    assert [c.name for c in components.dead_components(state)] == ["prometheus"]


def test_a_sandbox_none_of_whose_parts_runs_reports_nothing(tmp_path, procs):
    state = tmp_path / "state"
    p = start(state, "etcd", "exit 0")
    p.wait()
    assert components.dead_components(state) == []  # not up: up.sh's job, not a death


def test_another_checkouts_running_sandbox_is_recognised(tmp_path, procs, monkeypatch):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    owner = tmp_path / "owner"
    monkeypatch.setenv("IR_MACHINE_OWNER", str(owner))
    assert components.foreign_owner(mine) is None  # nobody claimed the machine
    owner.write_text(f"state={theirs}\nrepo={tmp_path}\n")
    assert components.foreign_owner(mine) is None  # claimed, but nothing of theirs runs
    procs.append(start(theirs, "kube-apiserver", "sleep 60"))
    assert components.foreign_owner(mine) == theirs
    assert "bash " in components.foreign_owner_message(theirs)
    assert components.foreign_owner(theirs) is None  # their own harness is fine


def test_up_sh_refuses_a_machine_whose_sandbox_is_another_checkouts(tmp_path, procs):
    """lib.sh's claim_machine, which up.sh calls before it starts anything."""
    from irsandbox.common import SANDBOX_DIR
    mine, theirs, owner = tmp_path / "mine", tmp_path / "theirs", tmp_path / "run" / "owner"

    def claim() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", f'source "{SANDBOX_DIR}/lib.sh"; claim_machine'],
            env={**os.environ, "IR_STATE": str(mine), "IR_MACHINE_OWNER": str(owner)},
            capture_output=True, text=True, timeout=30, check=False)

    assert claim().returncode == 0
    assert f"state={mine}" in owner.read_text()
    owner.write_text(f"state={theirs}\n")
    assert claim().returncode == 0  # theirs is not running: the machine is free
    owner.write_text(f"state={theirs}\n")
    procs.append(start(theirs, "etcd", "sleep 60"))
    refused = claim()
    assert refused.returncode != 0
    assert f"belongs to another checkout (state {theirs}" in refused.stderr, refused.stderr
    assert owner.read_text() == f"state={theirs}\n"  # their claim stands


def test_a_part_that_clears_its_environment_is_known_by_its_command_line(tmp_path, procs):
    """nginx keeps only TZ of its environment, so the marker is gone; its command line names the
    state dir (nginx -p <state>/nginx). The first sandbox run of this check called it dead."""
    state = tmp_path / "state"
    (state / "pids").mkdir(parents=True)
    (state / "nginx").mkdir()
    ours = subprocess.Popen(["env", "-i", "bash", "-c", f"exec -a 'nginx: master -p {state}/nginx' "
                             "sleep 60"])
    procs.append(ours)
    (state / "pids" / "nginx.pid").write_text(f"{ours.pid}\n")
    other = subprocess.Popen(["env", "-i", "sleep", "60"])  # no marker, not ours
    procs.append(other)
    (state / "pids" / "prometheus.pid").write_text(f"{other.pid}\n")
    procs.append(start(state, "etcd", "sleep 60"))
    deadline = time.monotonic() + 5
    while f"{state}/nginx" not in Path(f"/proc/{ours.pid}/cmdline").read_text().replace("\0", " "):
        assert time.monotonic() < deadline
    assert [c.name for c in components.dead_components(state)] == ["prometheus"]


def test_a_part_in_the_middle_of_an_exec_is_not_dead(tmp_path, monkeypatch):
    """CI called a running etcd dead: the check read /proc/<pid>/environ while bash exec'd
    sleep, and that read is empty for an instant (seen in 220 of 300 tries of reading it in a
    loop). One look sees it dead, the second does not; a part dead at both looks is named."""
    def part(name: str, alive: bool) -> components.Component:
        return components.Component(name, 1, alive, 0.0, tmp_path / f"{name}.log")

    looks = [[part("etcd", True), part("kwok", False)], [part("etcd", True), part("kwok", True)]]
    monkeypatch.setattr(components, "components", lambda state=None: looks.pop(0))
    assert components.dead_components(tmp_path) == []
    assert looks == []  # looked twice

    looks = [[part("etcd", True), part("kwok", False)], [part("etcd", True), part("kwok", False)]]
    assert [c.name for c in components.dead_components(tmp_path)] == ["kwok"]
