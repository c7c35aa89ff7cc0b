"""HTTPRoutes + Services/EndpointSlices/InferencePools + the bridge's endpoint map -> nginx.conf.

Pure functions (no I/O), shared by ``irsandbox.gateway`` and the unit tests.

Traffic split: one nginx ``upstream`` per HTTPRoute rule, one ``server`` per ready pod with
``weight`` = the backendRef's weight divided evenly among that backend's pods (scaled to integers).
nginx's smooth weighted round-robin is deterministic: over any window of sum(weights) requests
each server gets exactly its weight, so a 5/95 split is 5/95 per request, not on average. A
backendRef of weight 0 gets no server at all. A backendRef with weight > 0 that resolves to no
ready pod (or to nothing: a missing Service) keeps its share, answered with HTTP 500 by a local
"sink" server, as the Gateway API specifies for invalid backends.

Services by name: the gateway also answers as an HTTP forward proxy for every Service, so a
process outside the (DNS-less) sandbox cluster can call ``http://<svc>.<ns>.svc[:port]/…``
through it (the operator's ``--service-proxy``: the business evaluation calls each revision's
Service). A request whose host is ``<svc>.<ns>.svc`` (or ``….svc.cluster.local``), in
absolute form (``POST http://chat-1.ns.svc:8000/v1/… HTTP/1.1``, what a client sends to a proxy)
or with that Host header, goes to the Service's ready endpoints (EndpointSlices → pods → bridge
addresses, as for backendRefs), evenly; the port is ignored (a revision Service has one port).
A Service without ready endpoints answers 503.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from . import podspec

GATEWAY_GROUP = "gateway.networking.k8s.io"
INFERENCE_GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
CONTROLLER_NAME = "inference-rollout.dev/sandbox-gateway"


@dataclass
class BackendRes:
    """One backendRef, resolved."""

    kind: str
    namespace: str
    name: str
    weight: int
    pods: list[str] = field(default_factory=list)  # pod keys with a bridge address, sorted
    problem: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class Server:
    address: str
    weight: int
    pod: str = ""  # "" for the sink


@dataclass
class RuleRes:
    route: str  # namespace/name
    index: int
    locations: list[str]  # nginx location specs, e.g. "/", "= /v1", "~ ^/a"
    backends: list[BackendRes]
    servers: list[Server] = field(default_factory=list)
    upstream: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class RouteRes:
    namespace: str
    name: str
    generation: int
    hostnames: list[str]
    rules: list[RuleRes]
    created: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class PodInfo:
    address: str
    rollout: str = ""
    revision: str = ""


# --- resolution ----------------------------------------------------------------------------------


def _ready_endpoint(ep: dict[str, Any]) -> bool:
    cond = ep.get("conditions") or {}
    # EndpointSlice semantics: a nil "ready" means ready; terminating endpoints are not ready
    return cond.get("ready") is not False and not cond.get("terminating")


def service_pods(namespace: str, name: str, slices: list[dict[str, Any]]) -> list[str]:
    pods: set[str] = set()
    for sl in slices:
        meta = sl.get("metadata") or {}
        if meta.get("namespace") != namespace:
            continue
        if (meta.get("labels") or {}).get(SERVICE_NAME_LABEL) != name:
            continue
        for ep in sl.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if ref.get("kind") == "Pod" and ref.get("name") and _ready_endpoint(ep):
                pods.add(f"{ref.get('namespace') or namespace}/{ref['name']}")
    return sorted(pods)


def pool_selector(pool: dict[str, Any]) -> dict[str, str]:
    """InferencePool v1 (``spec.selector.matchLabels``) or v1alpha2 (``spec.selector``, a map)."""
    sel = (pool.get("spec") or {}).get("selector") or {}
    if isinstance(sel.get("matchLabels"), dict):
        return {str(k): str(v) for k, v in sel["matchLabels"].items()}
    return {str(k): str(v) for k, v in sel.items() if isinstance(v, str)}


def pool_pods(pool: dict[str, Any], pods: list[dict[str, Any]]) -> list[str]:
    ns = (pool.get("metadata") or {}).get("namespace")
    sel = pool_selector(pool)
    if not sel:
        return []
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != ns or meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        if all(labels.get(k) == v for k, v in sel.items()) and podspec.is_pod_ready(pod):
            out.append(f"{ns}/{meta['name']}")
    return sorted(out)


def path_locations(match: dict[str, Any]) -> tuple[list[str], str]:
    """nginx location specs for one HTTPRouteMatch, and a problem ("" if none)."""
    problem = ""
    unsupported = [k for k in ("headers", "queryParams", "method") if match.get(k)]
    if unsupported:
        return [], f"matches on {', '.join(unsupported)} are not supported by the sandbox gateway"
    path = match.get("path") or {"type": "PathPrefix", "value": "/"}
    ptype = path.get("type") or "PathPrefix"
    value = path.get("value") or "/"
    if ptype == "RegularExpression":
        if re.search(r'[\s"]', value):
            return [], f"unsupported regular expression {value!r}"
        return [f'~ "{value}"'], problem
    if not value.startswith("/") or re.search(r"[\s;{}\"'$]", value):
        return [], f"unsupported path {value!r}"
    if ptype == "Exact":
        return [f"= {value}"], problem
    # PathPrefix matches whole path elements: "/v1" matches "/v1" and "/v1/x", not "/v1x"
    if value == "/" or value.endswith("/"):
        return [value], problem
    return [f"= {value}", f"{value}/"], problem


def resolve(
    routes: list[dict[str, Any]],
    services: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    pools: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    endpoints: dict[str, PodInfo],
) -> list[RouteRes]:
    """Resolve every HTTPRoute's backendRefs to pods that the bridge serves."""
    svc_keys = {f"{s['metadata']['namespace']}/{s['metadata']['name']}" for s in services}
    pool_by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pools}
    out: list[RouteRes] = []
    ordered = sorted(routes, key=lambda r: (r["metadata"].get("creationTimestamp") or "",
                                            r["metadata"]["namespace"], r["metadata"]["name"]))
    for route in ordered:
        meta, spec = route["metadata"], route.get("spec") or {}
        ns = meta["namespace"]
        rules: list[RuleRes] = []
        for i, rule in enumerate(spec.get("rules") or [{}]):
            locations: list[str] = []
            problems: list[str] = []
            for match in rule.get("matches") or [{}]:
                locs, problem = path_locations(match)
                if problem:
                    problems.append(f"rule {i}: {problem}")
                locations += [loc for loc in locs if loc not in locations]
            backends: list[BackendRes] = []
            for ref in rule.get("backendRefs") or []:
                group = ref.get("group") or ""
                kind = ref.get("kind") or "Service"
                bns = ref.get("namespace") or ns
                name = ref.get("name") or ""
                weight = int(ref.get("weight", 1) if ref.get("weight") is not None else 1)
                b = BackendRes(kind=kind, namespace=bns, name=name, weight=max(0, weight))
                if group == "" and kind == "Service":
                    if f"{bns}/{name}" not in svc_keys:
                        b.problem = "BackendNotFound"
                    else:
                        b.pods = service_pods(bns, name, slices)
                elif group in INFERENCE_GROUPS and kind == "InferencePool":
                    pool = pool_by_key.get(f"{bns}/{name}")
                    if pool is None:
                        b.problem = "BackendNotFound"
                    else:
                        b.pods = pool_pods(pool, pods)
                else:
                    b.problem = "InvalidKind"
                b.pods = [p for p in b.pods if p in endpoints]
                backends.append(b)
            rr = RuleRes(route=f"{ns}/{meta['name']}", index=i, locations=locations,
                         backends=backends, problems=problems)
            rr.servers = weighted_servers(backends, endpoints)
            rules.append(rr)
        out.append(RouteRes(namespace=ns, name=meta["name"],
                            generation=int(meta.get("generation") or 0),
                            hostnames=list(spec.get("hostnames") or []), rules=rules,
                            created=meta.get("creationTimestamp") or ""))
    return out


@dataclass
class ServiceRes:
    """A Service reachable by its cluster DNS name through the gateway."""

    namespace: str
    name: str
    servers: list[Server] = field(default_factory=list)
    upstream: str = ""

    @property
    def hosts(self) -> list[str]:
        base = f"{self.name}.{self.namespace}.svc"
        return [base, f"{base}.cluster.local"]


def resolve_services(services: list[dict[str, Any]], slices: list[dict[str, Any]],
                     endpoints: dict[str, PodInfo]) -> list[ServiceRes]:
    """Every Service with its ready pods that the bridge serves (one equal-weight server each)."""
    out: list[ServiceRes] = []
    for svc in sorted(services, key=lambda s: (s["metadata"]["namespace"],
                                               s["metadata"]["name"])):
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        pods = [p for p in service_pods(ns, name, slices) if p in endpoints]
        out.append(ServiceRes(ns, name, [Server(endpoints[p].address, 1, p) for p in pods]))
    return out


SINK = "sink"
#: The sink server's socket, in the nginx directory of the sandbox's state.
SINK_SOCKET = "sink.sock"


def weighted_servers(backends: list[BackendRes], endpoints: dict[str, PodInfo]) -> list[Server]:
    """Integer nginx weights: backend weight w over its n pods gives each pod w/n of the total.
    Scaled by the lcm of the pod counts, then divided by the gcd. A backend with weight > 0 but
    no pods sends its share to the sink (HTTP 500)."""
    live = [b for b in backends if b.weight > 0]
    if not live:
        return []
    lcm = 1
    for b in live:
        if b.pods:
            lcm = math.lcm(lcm, len(b.pods))
    weights: dict[str, int] = {}
    owners: dict[str, str] = {}
    for b in live:
        if not b.pods:
            weights[SINK] = weights.get(SINK, 0) + b.weight * lcm
            owners[SINK] = ""
            continue
        share = b.weight * lcm // len(b.pods)
        for pod in b.pods:
            addr = endpoints[pod].address
            weights[addr] = weights.get(addr, 0) + share
            owners[addr] = pod
    g = 0
    for w in weights.values():
        g = math.gcd(g, w)
    g = g or 1
    return [Server(address=a, weight=w // g, pod=owners[a]) for a, w in weights.items()]


# --- rendering ---------------------------------------------------------------------------------


@dataclass
class Options:
    listen: str = "127.0.0.1:18080"
    state_dir: str = "/tmp/irsandbox"
    run_as_root: bool = False
    worker_connections: int = 4096


def _q(value: str) -> str:
    """An nginx quoted string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "") + '"'


def _json_return(status: int, message: str, etype: str) -> str:
    body = json.dumps({"error": {"message": message, "type": etype, "code": status}})
    return f"return {status} {_q(body)};"


def server_blocks(routes: list[RouteRes]) -> tuple[list[RuleRes], dict[str, list[RuleRes]]]:
    """(rules of the default server, rules per hostname). Routes without hostnames serve any
    host; if there are none and exactly one route exists, the default server serves it too."""
    default: list[RuleRes] = []
    by_host: dict[str, list[RuleRes]] = {}
    for route in routes:
        if not route.hostnames:
            default += route.rules
        for host in route.hostnames:
            by_host.setdefault(host.lower(), []).extend(route.rules)
    if not default and len(routes) == 1:
        default = list(routes[0].rules)
    return default, by_host


def render(routes: list[RouteRes], endpoints: dict[str, PodInfo], opts: Options,
           services: list[ServiceRes] | None = None) -> str:
    """The whole nginx.conf. Assigns each rule's and service's ``upstream`` name as a side
    effect."""
    services = services or []
    st = opts.state_dir.rstrip("/")
    lines: list[str] = [
        "# Generated by irsandbox.gateway from HTTPRoutes; rewritten on every change.",
        "daemon off;",
        "master_process on;",
        "worker_processes 1;",
        f"pid {st}/pids/nginx.pid;",
        f"error_log {st}/logs/nginx-error.log warn;",
    ]
    if opts.run_as_root:
        lines.append("user root;")
    lines += [
        f"events {{ worker_connections {opts.worker_connections}; }}",
        "http {",
        "    default_type application/json;",
        "    server_tokens off;",
        # hostnames of test namespaces are long: the default bucket (64) rejects them
        "    server_names_hash_bucket_size 256;",
        "    server_names_hash_max_size 8192;",
        "    map_hash_bucket_size 256;",
        "    map_hash_max_size 8192;",
        "    log_format gateway '$time_iso8601 $host \"$request\" $status $request_time '",
        "                       'up=$upstream_addr upstatus=$upstream_status pod=$ir_backend_pod';",
        f"    access_log {st}/logs/nginx-access.log gateway;",
    ]
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        lines.append(f"    {kind}_temp_path {st}/nginx/tmp/{kind};")
    lines += [
        "    proxy_http_version 1.1;",
        '    proxy_set_header Connection "";',
        "    proxy_set_header Host $host;",
        "    proxy_set_header X-Request-Id $request_id;",
        "    proxy_set_header X-Forwarded-For $remote_addr;",
        "    proxy_buffering off;",
        "    proxy_request_buffering on;",
        "    proxy_read_timeout 3600s;",
        "    proxy_send_timeout 3600s;",
        "    proxy_connect_timeout 2s;",
        # a refused connection (the simulator just stopped) is retried on another pod; a request
        # already sent is never resent (POST is not idempotent)
        "    proxy_next_upstream error timeout;",
        "    proxy_next_upstream_tries 3;",
        "    client_max_body_size 64m;",
        "    add_header X-Upstream-Addr $upstream_addr always;",
        "    add_header X-Backend-Pod $ir_backend_pod always;",
        "    add_header X-Backend-Rollout $ir_backend_rollout always;",
        "    add_header X-Backend-Revision $ir_backend_revision always;",
        "    add_header X-Route $ir_route always;",
    ]
    used = {s.address for r in routes for rule in r.rules for s in rule.servers}
    used |= {s.address for svc in services for s in svc.servers}
    for var, attr in (("ir_backend_pod", None), ("ir_backend_rollout", "rollout"),
                      ("ir_backend_revision", "revision")):
        lines.append(f"    map $upstream_addr ${var} {{")
        lines.append('        default "";')
        for pod, info in sorted(endpoints.items()):
            if info.address not in used:
                continue
            value = pod if attr is None else getattr(info, attr)
            lines.append(f"        {_q(info.address)} {_q(value)};")
        lines.append("    }")
    sink = f"unix:{st}/nginx/{SINK_SOCKET}"
    n = 0
    for route in routes:
        for rule in route.rules:
            if not rule.servers:
                continue
            rule.upstream = f"ir_{n}"
            n += 1
            lines.append(f"    # {route.key} rule {rule.index}: "
                         + ", ".join(f"{b.ref} weight {b.weight} -> {len(b.pods)} pod(s)"
                                     for b in rule.backends))
            lines.append(f"    upstream {rule.upstream} {{")
            for s in rule.servers:
                addr = sink if s.address == SINK else s.address
                lines.append(f"        server {addr} weight={s.weight} max_fails=1 "
                             f"fail_timeout=2s;  # {s.pod or 'no ready endpoints: HTTP 500'}")
            lines.append("        keepalive 64;")
            lines.append("    }")

    for i, svc in enumerate(services):
        if not svc.servers:
            continue
        svc.upstream = f"svc_{i}"
        lines.append(f"    # Service {svc.namespace}/{svc.name} -> {len(svc.servers)} pod(s)")
        lines.append(f"    upstream {svc.upstream} {{")
        for s in svc.servers:
            lines.append(f"        server {s.address} max_fails=1 fail_timeout=2s;  # {s.pod}")
        lines.append("        keepalive 16;")
        lines.append("    }")

    default, by_host = server_blocks(routes)
    lines += _server(opts.listen, "_", default, default_server=True, health=True)
    for host, rules in sorted(by_host.items()):
        lines += _server(opts.listen, host, rules)
    for svc in services:
        hosts = [h for h in svc.hosts if h not in by_host]  # an HTTPRoute hostname wins
        if hosts:
            lines += _service_server(opts.listen, svc, hosts)
    lines += [
        "    server {",
        f"        listen {sink};",
        '        set $ir_route "";',
        "        location / { "
        + _json_return(500, "no ready endpoints for this backend", "BackendUnavailable") + " }",
        "    }",
        "}",
    ]
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return text.replace("@@VERSION@@", digest)


def config_version(text: str) -> str:
    """The version the health endpoint of this config answers."""
    m = re.search(r"irsandbox-gateway ([0-9a-f]{12})", text)
    return m.group(1) if m else ""


def _service_server(listen: str, svc: ServiceRes, hosts: list[str]) -> list[str]:
    out = ["    server {", f"        listen {listen};", f"        server_name {' '.join(hosts)};",
           f"        set $ir_route {_q(f'service {svc.namespace}/{svc.name}')};"]
    if svc.upstream:
        out.append(f"        location / {{ proxy_pass http://{svc.upstream}; }}")
    else:
        out.append("        location / { " + _json_return(
            503, f"Service {svc.namespace}/{svc.name} has no ready endpoints",
            "ServiceUnavailable") + " }")
    out.append("    }")
    return out


def _server(listen: str, name: str, rules: list[RuleRes], default_server: bool = False,
            health: bool = False) -> list[str]:
    out = [
        "    server {",
        f"        listen {listen}{' default_server' if default_server else ''};",
        f"        server_name {name};",
        '        set $ir_route "";',
    ]
    if health:
        out.append('        location = /-/gateway/healthz { return 200 '
                   '"irsandbox-gateway @@VERSION@@\\n"; }')
    seen: set[str] = set()
    for rule in rules:
        for loc in rule.locations:
            if loc in seen:
                continue  # an earlier route / rule owns this path (Gateway API precedence)
            seen.add(loc)
            out.append(f"        location {loc} {{")
            out.append(f"            set $ir_route {_q(f'{rule.route}#{rule.index}')};")
            if rule.upstream:
                out.append(f"            proxy_pass http://{rule.upstream};")
            else:
                out.append("            "
                           + _json_return(500, f"HTTPRoute {rule.route} rule {rule.index} has "
                                          "no backend with weight > 0", "NoBackend"))
            out.append("        }")
    if "/" not in seen:
        out.append("        location / { "
                   + _json_return(404, f"no HTTPRoute for host {name}", "NotFound") + " }")
    out.append("    }")
    return out
