"""Which URLs the operator may send requests to: allow-lists of base URLs, and the default
rule for endpoints a tenant names in a Secret (public addresses only).

Shared by the Prometheus allow-list (``--prometheus-allow``, :mod:`.metrics.tenancy`) and the
notification webhooks (``--notify-allow``, :mod:`.notify`), so both settings read the same way
(docs/security.md).  An allow-list entry is a base URL: scheme, host and port must be equal (the
default port of the scheme when none is written) and the address's path must be the entry's path
or below it, on a ``/`` boundary.  URLs are compared parsed, never as string prefixes, and paths as
they will be requested: ``%2e`` decoded and dot segments resolved first, so
``…/tenant-a/../tenant-b`` is compared as ``…/tenant-b`` (an encoded ``/`` is refused outright).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

#: Host names that only mean something inside a cluster (or this machine).
CLUSTER_SUFFIXES = (".svc", ".cluster.local", ".local", ".internal", "localhost")


_DEFAULT_PORTS = {"http": 80, "https": 443}


#: Percent-encoded characters that would change how a path splits or resolves once decoded
#: (a separator, a dot segment): an address holding one is not compared, it is refused.
_ENCODED_STRUCTURE = re.compile(r"%(2f|5c|00)", re.IGNORECASE)


def _resolved_path(path: str) -> str | None:
    """The path as it will be requested: ``%2e`` decoded and dot segments resolved (RFC 3986
    5.2.4, what HTTP clients do before sending), ending in '/'; None for a path that cannot be
    compared safely (an encoded separator, a backslash, a NUL)."""
    if _ENCODED_STRUCTURE.search(path) or "\\" in path or "\x00" in path:
        return None
    path = re.sub(r"%2e", ".", path, flags=re.IGNORECASE)
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    resolved = "/" + "/".join(out)
    return resolved if resolved.endswith("/") else resolved + "/"


def _parts(url: str) -> tuple[str, str, int | None, str] | None:
    """(scheme, host, port, resolved path ending in '/'), or None for what is not an http(s) URL
    (or whose path cannot be compared safely)."""
    try:
        u = urlsplit(url.strip())
        port = u.port or _DEFAULT_PORTS.get(u.scheme.lower())
    except ValueError:
        return None
    if u.scheme.lower() not in _DEFAULT_PORTS or not u.hostname or u.query or u.fragment:
        return None
    path = _resolved_path(u.path or "/")
    if path is None:
        return None
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
    return bool(addresses) and all(is_global(ipaddress.ip_address(str(a).split("%")[0]))
                                   for a in addresses)


#: IPv6 prefixes whose addresses carry an IPv4 address in their last 32 bits and reach it through
#: a translator: NAT64's well-known and local-use prefixes (RFC 6052, 8215), IPv4-compatible.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"),
          ipaddress.ip_network("::/96"))


def embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address
                  ) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches: mapped (``::ffff:a.b.c.d``), 6to4
    (``2002:AABB:CCDD::``), Teredo (server and client), NAT64."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    out = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        out.extend(address.teredo)
    if any(address in net for net in _NAT64):
        out.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return out


def is_global(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Public, and so is every IPv4 address it embeds: ``64:ff9b::a00:1`` is 10.0.0.1 through a
    NAT64 gateway, though Python calls the IPv6 address global."""
    return address.is_global and all(v4.is_global for v4 in embedded_ipv4(address))
