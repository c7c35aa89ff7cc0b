"""Sockets in the sandbox's pod network namespace.

``up.sh`` makes a network namespace for the pods (``IR_POD_NETNS``, docs/sandbox.md "Pods with
addresses"): the pod range is local there and nowhere else, and the host reaches it through a veth
pair, as a node reaches pods through a CNI. A pod's shim must listen on the pod's own address, so
that socket has to be made *inside* that namespace, while the shim's other ends (its loopback port
for the nginx translator, the simulator it forwards to on 127.0.0.1) stay in the host's.

Linux ties a socket to the namespace of the thread that created it, for the socket's whole life.
So :func:`listen_in` switches the calling thread into the pod namespace (``setns(2)``), creates and
binds the socket, and switches back before returning: one process, one socket per namespace, no
helper process and no fd passing. Needs CAP_SYS_ADMIN (the sandbox runs as root; without it
``up.sh`` could not have made the namespace either).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

#: Where ``ip netns add NAME`` mounts a namespace (iproute2's NETNS_RUN_DIR).
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000

T = TypeVar("T")


def netns_path(name: str) -> Path:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a network namespace name: {name!r}")
    return NETNS_DIR / name


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """The calling thread is in network namespace ``name`` inside the block, and back in the one
    it came from after it (also when the block raises)."""
    with open("/proc/thread-self/ns/net", "rb") as home, open(netns_path(name), "rb") as target:
        _setns(target.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())


def run_in(name: str, make: Callable[[], T]) -> T:
    """``make()`` called inside network namespace ``name``: sockets it creates live there."""
    with entered(name):
        return make()
