"""Which URLs the operator may send requests to: allow-lists of base URLs, and the default
rule for endpoints a tenant names in a Secret (public addresses only).

Shared by the Prometheus allow-list (``--prometheus-allow``, :mod:`.metrics.tenancy`) and the
notification webhooks (``--notify-allow``, :mod:`.notify`), so both settings read the same way
(docs/security.md).  An allow-list entry is a base URL: scheme, host and port must be equal (the
default port of the scheme when none is written) and the address's path must be the entry's path
or below it, on a ``/`` boundary.  URLs are compared parsed, never as string prefixes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

#: Host names that only mean something inside a cluster (or this machine).
CLUSTER_SUFFIXES = (".svc", ".cluster.local", ".local", ".internal", "localhost")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _parts(url: str) -> tuple[str, str, int | None, str] | None:
    """(scheme, host, port, path ending in '/'), or None for what is not an http(s) URL."""
    try:
        u = urlsplit(url.strip())
        port = u.port or _DEFAULT_PORTS.get(u.scheme.lower())
    except ValueError:
        return None
    if u.scheme.lower() not in _DEFAULT_PORTS or not u.hostname or u.query or u.fragment:
        return None
    path = u.path if u.path.endswith("/") else u.path + "/"
    return u.scheme.lower(), u.hostname.lower(), port, path


def check_allow_list(entries: Sequence[str]) -> list[str]:
    """The entries that are not base URLs (the operator refuses to start with them)."""
    return [e for e in entries if _parts(e) is None]


def address_allowed(address: str, allowed: Sequence[str]) -> bool:
    """Whether ``address`` is one of ``allowed`` or below one of them (see the module doc)."""
    target = _parts(address)
    if target is None:
        return False
    for entry in allowed:
        base = _parts(entry)
        if base is not None and base[:3] == target[:3] and target[3].startswith(base[3]):
            return True
    return False


async def public_host(url: str) -> bool:
    """Whether every address the URL's host resolves to is a public (global) one: not loopback,
    private, link-local (cloud metadata) or reserved, and the name is not a cluster-internal one.
    A name that does not resolve is not public.  (The check is made right before each request;
    a DNS answer that changes in between is the residual risk, documented in docs/security.md.)"""
    parts = _parts(url)
    if parts is None:
        return False
    host = parts[1].strip("[]")
    if host.endswith(CLUSTER_SUFFIXES) or ("." not in host and ":" not in host):
        return False  # a bare name resolves through the cluster's search domains
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, parts[2],
                                                             type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_global
                                   for a in addresses)
