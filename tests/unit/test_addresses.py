"""Allow-lists compare the URL that will be requested, and "public" means public for every IPv4
address an IPv6 address reaches (issue 29: both were bypassed in the review of a8e0bb8)."""

from __future__ import annotations

import asyncio
import ipaddress

import httpx
import pytest

from inference_rollout.addresses import address_allowed, embedded_ipv4, is_global, public_host

ALLOW = ["http://prometheus.monitoring:9090/tenant-a"]


@pytest.mark.parametrize("address", [
    "http://prometheus.monitoring:9090/tenant-a/../tenant-b",
    "http://prometheus.monitoring:9090/tenant-a/%2e%2e/tenant-b",
    "http://prometheus.monitoring:9090/tenant-a/%2E%2E/tenant-b",
    "http://prometheus.monitoring:9090/tenant-a/./../tenant-b/",
    "http://prometheus.monitoring:9090/tenant-a%2f..%2ftenant-b",
    "http://prometheus.monitoring:9090/tenant-a/..%5ctenant-b",
    "http://prometheus.monitoring:9090/tenant-a\\..\\tenant-b",
    "http://prometheus.monitoring:9090/tenant-ab",
])
def test_an_address_that_leaves_the_allowed_path_is_refused(address):
    assert not address_allowed(address, ALLOW)


@pytest.mark.parametrize("address", [
    "http://prometheus.monitoring:9090/tenant-a",
    "http://prometheus.monitoring:9090/tenant-a/",
    "http://prometheus.monitoring:9090/tenant-a/x/../y",
    "http://prometheus.monitoring:9090/tenant-a/./shard-1",
])
def test_an_address_inside_the_allowed_path_is_allowed(address):
    assert address_allowed(address, ALLOW)


def test_what_is_compared_is_what_the_client_sends():
    """The operator appends /api/v1/query and httpx sends the path with dot segments resolved:
    the path it sends is outside the allowed one, as the comparison said. (``%2e%2e`` is sent
    as written, and a server that decodes it resolves it: compared decoded, it is refused too.)"""
    address = "http://prometheus.monitoring:9090/tenant-a/../tenant-b"
    sent = httpx.URL(address + "/api/v1/query").raw_path.decode()
    assert sent == "/tenant-b/api/v1/query"
    assert not address_allowed(address, ALLOW)


@pytest.mark.parametrize("address,inner", [
    ("64:ff9b::a00:1", "10.0.0.1"),           # NAT64 well-known prefix
    ("64:ff9b:1::c0a8:101", "192.168.1.1"),   # NAT64 local-use prefix
    ("2002:a9fe:a9fe::1", "169.254.169.254"),  # 6to4 of the cloud metadata address
    ("::ffff:127.0.0.1", "127.0.0.1"),        # IPv4-mapped
    ("::10.0.0.1", "10.0.0.1"),               # IPv4-compatible
])
def test_an_ipv6_address_embedding_a_private_ipv4_is_not_public(address, inner):
    ip = ipaddress.ip_address(address)
    assert ipaddress.ip_address(inner) in embedded_ipv4(ip)
    assert not is_global(ip)


def test_public_addresses_stay_public():
    assert is_global(ipaddress.ip_address("2606:4700:4700::1111"))
    assert is_global(ipaddress.ip_address("64:ff9b::808:808"))  # NAT64 of 8.8.8.8
    assert is_global(ipaddress.ip_address("1.1.1.1"))


def test_a_webhook_at_a_nat64_private_address_is_not_public():
    assert not asyncio.run(public_host("https://[64:ff9b::a00:1]/hook"))
    assert not asyncio.run(public_host("https://[2002:a00:1::1]/hook"))
