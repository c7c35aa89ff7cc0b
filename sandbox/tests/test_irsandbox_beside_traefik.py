"""The sandbox's own parts beside Traefik: parents of a Gateway that Traefik serves
(``--foreign-gateway``) are neither served nor reported on by the nginx translator, and the
bridge gives a pod's shim the pod's own address only inside the pod network."""

from __future__ import annotations

import ipaddress

from irsandbox import gateway
from irsandbox import nginxconf as nc
from irsandbox.bridge import pod_address

TRAEFIK = frozenset({("gateway-system", "traefik")})


def route(*parents):
    return {"metadata": {"name": "chat", "namespace": "serving", "generation": 3},
            "spec": {"parentRefs": list(parents), "rules": []}}


def test_a_route_only_under_a_foreign_gateway_is_not_the_translators():
    assert not gateway.ours_to_serve(
        route({"name": "traefik", "namespace": "gateway-system"}), TRAEFIK)
    assert gateway.ours_to_serve(route({"name": "sandbox"}), TRAEFIK)
    # the same name in the route's own namespace is another Gateway
    assert gateway.ours_to_serve(route({"name": "traefik"}), TRAEFIK)
    assert gateway.ours_to_serve(
        route({"name": "traefik", "namespace": "gateway-system"}, {"name": "sandbox"}), TRAEFIK)
    assert gateway.ours_to_serve(route(), TRAEFIK)


def test_status_is_written_for_the_translators_parents_only():
    r = route({"name": "traefik", "namespace": "gateway-system"}, {"name": "sandbox"})
    res = nc.RouteRes("serving", "chat", 3, [], [])
    parents = gateway.route_status(r, res, foreign=TRAEFIK)
    assert [p["parentRef"] for p in parents] == [{"name": "sandbox"}]
    assert {c["type"]: c["status"] for c in parents[0]["conditions"]} == {
        "Accepted": "True", "ResolvedRefs": "True"}
    # without the option every parent is reported, as before
    assert len(gateway.route_status(r, res)) == 2


def test_a_pod_listens_on_its_address_only_inside_the_pod_network():
    net = ipaddress.ip_network("10.244.0.0/16")

    def pod(ip, args=("--model", "m")):
        return {"spec": {"containers": [{"name": "vllm", "args": list(args)}]},
                "status": {"podIP": ip} if ip else {}}

    assert pod_address(pod("10.244.3.9"), net) == ("10.244.3.9", 8000)  # vLLM's default port
    assert pod_address(pod("10.244.3.9", ("--model", "m", "--port", "9000")), net) == (
        "10.244.3.9", 9000)
    assert pod_address(pod(""), net) is None            # KWOK has not written it yet
    assert pod_address(pod("127.0.0.1"), net) is None   # hostNetwork: the node's address
    assert pod_address(pod("10.244.3.9"), None) is None  # no pod network: loopback ports only
