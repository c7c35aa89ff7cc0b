"""The pod network namespace (sandbox/podnet.sh, irsandbox.netns) and the shim's pod listener,
on the real kernel: a namespace, veth and route made and removed by the same functions up.sh and
down.sh call, under names and addresses of the test's own so a running sandbox is untouched.

Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), as the sandbox itself does; without it these fail."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from irsandbox import netns
from irsandbox.bridge import listen_addresses
from irsandbox.common import SANDBOX_DIR, free_port

CIDR = "10.251.0.0/16"  # not the sandbox's 10.244.0.0/16
POD_IP = "10.251.3.7"


def podnet(fn: str, env: dict[str, str], *, pre: str = "",
           wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    script = (f'source "{SANDBOX_DIR}/lib.sh"; source "{SANDBOX_DIR}/podnet.sh"; '
              f'IR_LOGS="$(mktemp -d)"; {pre} {fn}')
    return subprocess.run([*wrap, "bash", "-c", script], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)


def host(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def names() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.fail("the pod network namespace needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), as "
                    "sandbox/up.sh does: run the sandbox's tests as root")
    tag = uuid.uuid4().hex[:6]
    env = {"IR_POD_NETNS": f"irtest-{tag}", "IR_POD_VETH": f"irt{tag}", "IR_POD_CIDR": CIDR,
           "IR_POD_VETH_HOST_ADDR": "169.254.251.1", "IR_POD_VETH_NS_ADDR": "169.254.251.2"}
    yield env
    podnet("podnet_down", env)  # whatever a failed assertion left


def test_pods_live_in_a_namespace_the_host_reaches_through_a_veth(names):
    # an earlier sandbox's route on the host's lo is removed on the way
    subprocess.run(["ip", "route", "add", "local", CIDR, "dev", "lo", "table", "local"],
                   check=True)
    up = podnet("podnet_up", names)
    assert up.returncode == 0, up.stderr
    assert names["IR_POD_NETNS"] in host("netns", "list")
    # the host holds no address of the pod range, and no local route for any private range
    local = host("route", "show", "table", "local")
    assert "10.251." not in local and "10.244." not in local, local
    for line in host("-o", "-4", "addr").splitlines():
        assert ipaddress.ip_interface(line.split()[3]).ip not in ipaddress.ip_network(CIDR), line
    assert f"{CIDR} via 169.254.251.2 dev {names['IR_POD_VETH']}" in host("route", "show")

    # a pod's listener made inside the namespace answers from the host, through the veth
    port = free_port()
    server = netns.run_in(names["IR_POD_NETNS"],
                          lambda: socket.create_server((POD_IP, port)))
    try:
        assert POD_IP in listen_addresses(port, names["IR_POD_NETNS"])
        assert POD_IP not in listen_addresses(port)  # not in the host's namespace
        with socket.create_connection((POD_IP, port), timeout=3):
            conn, (peer, _) = server.accept()
            conn.close()
        assert peer == "169.254.251.1"  # the host's veth end, not a pod-range address
    finally:
        server.close()

    # up again is a no-op that keeps the namespace (running shims hold sockets in it)
    inode = os.stat(f"/run/netns/{names['IR_POD_NETNS']}").st_ino
    again = podnet("podnet_up", names)
    assert again.returncode == 0, again.stderr
    assert os.stat(f"/run/netns/{names['IR_POD_NETNS']}").st_ino == inode

    down = podnet("podnet_down", names)
    assert down.returncode == 0, down.stderr
    assert names["IR_POD_NETNS"] not in host("netns", "list")
    assert names["IR_POD_VETH"] not in host("link", "show")
    assert "10.251." not in host("route", "show", "table", "all")


def test_without_the_privilege_to_make_a_namespace_up_stops_and_says_why(names):
    if subprocess.run(["which", "setpriv"], capture_output=True).returncode != 0:
        pytest.fail("setpriv (util-linux) is needed to drop capabilities for this test")
    drop = ("setpriv", "--bounding-set=-sys_admin,-net_admin", "--inh-caps=-sys_admin,-net_admin")
    up = podnet("podnet_up", names, wrap=drop)
    assert up.returncode != 0
    assert f"cannot create network namespace {names['IR_POD_NETNS']}" in up.stderr, up.stderr
    assert "root" in up.stderr and "pods-with-addresses" in up.stderr, up.stderr
    assert names["IR_POD_NETNS"] not in host("netns", "list")  # no half pod network


CONFIG_REQUEST = b"GET /-/shim/config HTTP/1.1\r\nHost: pod\r\nConnection: keep-alive\r\n\r\n"


def kept_alive(host: str, port: int) -> socket.socket:
    """A connection that has had one answer and is kept alive for the next request."""
    sock = socket.create_connection((host, port), timeout=5)
    sock.sendall(CONFIG_REQUEST)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    return sock


def test_the_shim_releases_a_deleted_pods_address_at_once_and_keeps_serving(tmp_path: Path):
    """KWOK hands a deleted pod's IP to the next pod at once: SIGUSR1 (the bridge's 'pod object
    gone') closes the shim's listener on the pod address, and the connections made to it, while
    the loopback one drains on."""
    upstream = socket.create_server(("127.0.0.1", 0))  # never answers: not needed here
    loop_port, pod_port = free_port(), free_port()
    pod_ip = "127.0.0.7"  # a loopback address stands in for the pod's (no namespace needed)
    env = {**os.environ, "PYTHONPATH": str(SANDBOX_DIR)}
    with open(tmp_path / "shim.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "irsandbox.faultproxy", f"--listen-port={loop_port}",
             f"--upstream-port={upstream.getsockname()[1]}", f"--pod-address={pod_ip}:{pod_port}"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while pod_ip not in listen_addresses(pod_port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pod_ip in listen_addresses(pod_port), (tmp_path / "shim.log").read_text()
        # kept-alive connections, as Traefik and Prometheus pool them by address
        via_pod = kept_alive(pod_ip, pod_port)
        via_loopback = kept_alive("127.0.0.1", loop_port)
        proc.send_signal(signal.SIGUSR1)
        via_pod.settimeout(5)
        assert via_pod.recv(1) == b"", "the pooled connection to the pod address stayed open"
        via_loopback.sendall(CONFIG_REQUEST)  # the loopback one still serves
        assert via_loopback.recv(65536).startswith(b"HTTP/1.1 200")
        via_pod.close()
        via_loopback.close()
        deadline = time.monotonic() + 5
        while pod_ip in listen_addresses(pod_port) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pod_ip not in listen_addresses(pod_port)
        # the next pod's shim can take the address now
        socket.create_server((pod_ip, pod_port)).close()
        # and this shim still answers on its loopback port
        r = httpx.get(f"http://127.0.0.1:{loop_port}/-/shim/config", timeout=3)
        assert r.status_code == 200
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        upstream.close()
