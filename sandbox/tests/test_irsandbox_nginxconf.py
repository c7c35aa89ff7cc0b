"""irsandbox.nginxconf: HTTPRoutes + EndpointSlices + the bridge's map -> weighted nginx config."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from irsandbox import nginxconf as nc
from irsandbox.nginxconf import PodInfo


def route(name="chat", ns="serving", hostnames=None, rules=None, generation=1,
          created="2026-01-01T00:00:00Z"):
    return {"metadata": {"name": name, "namespace": ns, "generation": generation,
                         "creationTimestamp": created},
            "spec": {"parentRefs": [{"name": "sandbox"}], "hostnames": hostnames or [],
                     "rules": rules if rules is not None else []}}


def ref(name, weight=None, **kw):
    r = {"name": name, "port": 8000, **kw}
    if weight is not None:
        r["weight"] = weight
    return r


def svc(name, ns="serving"):
    return {"metadata": {"name": name, "namespace": ns}}


def eslice(service, pods, ns="serving", ready=True, name=None):
    return {"metadata": {"name": name or f"{service}-x", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service}},
            "endpoints": [{"conditions": {"ready": ready},
                           "targetRef": {"kind": "Pod", "name": p, "namespace": ns}}
                          for p in pods]}


def eps(*pods, ns="serving", base=21000):
    return {f"{ns}/{p}": PodInfo(f"127.0.0.1:{base + i}", "chat", p.split("-")[1])
            for i, p in enumerate(pods)}


def shares(rule):
    total = sum(s.weight for s in rule.servers)
    return {s.pod or "sink": s.weight / total for s in rule.servers}


def test_weights_split_backend_share_evenly_over_its_pods():
    endpoints = eps("chat-a-1", "chat-a-2", "chat-b-1")
    routes = nc.resolve(
        [route(rules=[{"backendRefs": [ref("stable", 95), ref("canary", 5)]}])],
        [svc("stable"), svc("canary")],
        [eslice("stable", ["chat-a-1", "chat-a-2"]), eslice("canary", ["chat-b-1"])],
        [], [], endpoints)
    rule = routes[0].rules[0]
    assert {s.pod: s.weight for s in rule.servers} == {
        "serving/chat-a-1": 19, "serving/chat-a-2": 19, "serving/chat-b-1": 2}
    assert shares(rule)["serving/chat-b-1"] == pytest.approx(0.05)


@pytest.mark.parametrize(("w1", "w2", "n1", "n2"), [(1, 1, 1, 1), (50, 50, 3, 2), (5, 95, 1, 4),
                                                    (1, 99, 7, 3), (33, 67, 2, 5)])
def test_weight_shares_are_exact(w1, w2, n1, n2):
    a = [f"chat-a-{i}" for i in range(n1)]
    b = [f"chat-b-{i}" for i in range(n2)]
    endpoints = eps(*a, *b)
    rule = nc.resolve([route(rules=[{"backendRefs": [ref("s1", w1), ref("s2", w2)]}])],
                      [svc("s1"), svc("s2")], [eslice("s1", a), eslice("s2", b)], [], [],
                      endpoints)[0].rules[0]
    sh = shares(rule)
    assert sum(sh[f"serving/{p}"] for p in a) == pytest.approx(w1 / (w1 + w2))
    assert sum(sh[f"serving/{p}"] for p in b) == pytest.approx(w2 / (w1 + w2))


def test_zero_weight_gets_no_server_and_default_weight_is_one():
    endpoints = eps("chat-a-1", "chat-b-1")
    rule = nc.resolve([route(rules=[{"backendRefs": [ref("s1"), ref("s2", 0)]}])],
                      [svc("s1"), svc("s2")],
                      [eslice("s1", ["chat-a-1"]), eslice("s2", ["chat-b-1"])], [], [],
                      endpoints)[0].rules[0]
    assert [s.pod for s in rule.servers] == ["serving/chat-a-1"]


def test_unready_unknown_and_missing_backends_keep_their_share_as_http_500():
    endpoints = eps("chat-a-1", "chat-b-1")
    rule = nc.resolve(
        [route(rules=[{"backendRefs": [ref("s1", 80), ref("s2", 10), ref("gone", 10)]}])],
        [svc("s1"), svc("s2")],
        # s2's only pod is not ready; "chat-x-1" is ready but has no simulator (not in the map)
        [eslice("s1", ["chat-a-1", "chat-x-1"]), eslice("s2", ["chat-b-1"], ready=False)],
        [], [], endpoints)[0].rules[0]
    sh = shares(rule)
    assert sh == {"serving/chat-a-1": pytest.approx(0.8), "sink": pytest.approx(0.2)}
    problems = {b.name: b.problem for b in rule.backends}
    assert problems == {"s1": "", "s2": "", "gone": "BackendNotFound"}


def test_inference_pool_backend_resolves_selector_to_ready_pods():
    pool = {"metadata": {"name": "pool", "namespace": "serving"},
            "spec": {"selector": {"matchLabels": {"app": "chat"}},
                     "targetPorts": [{"number": 8000}]}}

    def p(name, ready=True, app="chat"):
        return {"metadata": {"name": name, "namespace": "serving", "labels": {"app": app}},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}

    pods = [p("chat-a-1"), p("chat-a-2", ready=False), p("other-z-1", app="other")]
    endpoints = eps("chat-a-1", "chat-a-2", "other-z-1")
    rule = nc.resolve(
        [route(rules=[{"backendRefs": [ref("pool", 1, group="inference.networking.k8s.io",
                                           kind="InferencePool")]}])],
        [], [], [pool], pods, endpoints)[0].rules[0]
    assert [s.pod for s in rule.servers] == ["serving/chat-a-1"]
    # v1alpha2 shape: selector is a plain map
    assert nc.pool_selector({"spec": {"selector": {"app": "x"}}}) == {"app": "x"}


def test_unsupported_kind_is_reported():
    rule = nc.resolve([route(rules=[{"backendRefs": [ref("b", 1, kind="Bucket", group="x.io")]}])],
                      [], [], [], [], {})[0].rules[0]
    assert rule.backends[0].problem == "InvalidKind"


@pytest.mark.parametrize(
    ("match", "locations"),
    [({}, ["/"]),
     ({"path": {"type": "PathPrefix", "value": "/v1"}}, ["= /v1", "/v1/"]),
     ({"path": {"type": "PathPrefix", "value": "/v1/"}}, ["/v1/"]),
     ({"path": {"type": "Exact", "value": "/v1/models"}}, ["= /v1/models"]),
     ({"path": {"type": "RegularExpression", "value": "^/v[12]/"}}, ['~ "^/v[12]/"'])],
)
def test_path_locations(match, locations):
    assert nc.path_locations(match) == (locations, "")


def test_header_matches_are_refused():
    locs, problem = nc.path_locations({"headers": [{"name": "x", "value": "y"}]})
    assert locs == [] and "not supported" in problem


def test_default_server_takes_hostless_routes_or_the_only_route():
    r1 = nc.RouteRes("ns", "a", 1, ["a.example"], [nc.RuleRes("ns/a", 0, ["/"], [])])
    r2 = nc.RouteRes("ns", "b", 1, ["b.example"], [nc.RuleRes("ns/b", 0, ["/"], [])])
    r3 = nc.RouteRes("ns", "c", 1, [], [nc.RuleRes("ns/c", 0, ["/"], [])])
    assert nc.server_blocks([r1])[0] == r1.rules
    assert nc.server_blocks([r1, r2])[0] == []
    default, hosts = nc.server_blocks([r1, r2, r3])
    assert default == r3.rules and set(hosts) == {"a.example", "b.example"}


def render_sample(tmp_path):
    endpoints = eps("chat-a-1", "chat-b-1")
    routes = nc.resolve(
        [route(hostnames=["chat.example"],
               rules=[{"backendRefs": [ref("stable", 90), ref("canary", 10)]},
                      {"matches": [{"path": {"type": "PathPrefix", "value": "/admin"}}],
                       "backendRefs": [ref("stable", 0)]}]),
         route(name="other", hostnames=["other.example"], created="2026-01-02T00:00:00Z",
               rules=[{"backendRefs": [ref("nothing", 1)]}])],
        [svc("stable"), svc("canary")],
        [eslice("stable", ["chat-a-1"]), eslice("canary", ["chat-b-1"])], [], [], endpoints)
    for d in ("pids", "logs", "nginx/tmp"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    text = nc.render(routes, endpoints, nc.Options(listen="127.0.0.1:18999",
                                                    state_dir=str(tmp_path)))
    return text, routes


def test_render_contents(tmp_path):
    text, routes = render_sample(tmp_path)
    assert "listen 127.0.0.1:18999 default_server;" in text
    assert "server_name chat.example;" in text and "server_name other.example;" in text
    assert re.search(r"server 127\.0\.0\.1:21000 weight=9 .*# serving/chat-a-1", text)
    assert re.search(r"server 127\.0\.0\.1:21001 weight=1 .*# serving/chat-b-1", text)
    assert "proxy_buffering off;" in text
    assert '"127.0.0.1:21001" "serving/chat-b-1";' in text  # X-Backend-Pod map
    assert '"127.0.0.1:21001" "b";' in text  # X-Backend-Revision map
    assert f"unix:{tmp_path}/nginx/sink.sock" in text  # "other" has no endpoints: HTTP 500
    assert "no backend with weight > 0" in text  # /admin: all weights 0
    assert "0.0.0.0" not in text and "listen 18999" not in text
    version = nc.config_version(text)
    assert re.fullmatch(r"[0-9a-f]{12}", version)
    # deterministic: same inputs, same config and version
    assert render_sample(tmp_path)[0] == text
    assert [r.upstream for r in routes[0].rules] == ["ir_0", ""]


@pytest.fixture()
def nginx_installed() -> None:
    """nginx checks the rendered configs; `make test` installs it before the unit step
    (sandbox/build.sh apt). Missing, the test fails saying so: it never skips into green."""
    if shutil.which("nginx") is None:
        pytest.fail("nginx is not installed: bash sandbox/build.sh apt (make test does it)",
                    pytrace=False)


def nginx_accepts(text: str, tmp_path) -> None:
    """``nginx -t`` accepts the rendered configuration (run as this user)."""
    conf = tmp_path / "nginx" / "nginx.conf"
    conf.write_text(text.replace("user root;\n", ""))
    r = subprocess.run(["nginx", "-t", "-p", str(tmp_path / "nginx"), "-c", str(conf),
                        "-e", str(tmp_path / "logs" / "err.log")],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.usefixtures("nginx_installed")
def test_render_is_accepted_by_nginx(tmp_path):
    nginx_accepts(render_sample(tmp_path)[0], tmp_path)


# --- Services by name (the forward proxy the operator's --service-proxy uses) -------------------


def service_sample(tmp_path):
    endpoints = eps("chat-a-1", "chat-a-2", "chat-b-1")
    services = nc.resolve_services(
        [svc("chat-b"), svc("chat-a"), svc("empty"), svc("gone", ns="other")],
        [eslice("chat-a", ["chat-a-1", "chat-a-2"]), eslice("chat-b", ["chat-b-1"]),
         eslice("chat-b", ["chat-b-9"], name="chat-b-y"),  # a pod the bridge does not serve
         eslice("empty", ["chat-a-1"], ready=False)], endpoints)
    for d in ("pids", "logs", "nginx/tmp"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    routes = nc.resolve([route(hostnames=["chat-a.serving.svc"],
                               rules=[{"backendRefs": [ref("chat-b", 1)]}])],
                        [svc("chat-b")], [eslice("chat-b", ["chat-b-1"])], [], [], endpoints)
    text = nc.render(routes, endpoints, nc.Options(listen="127.0.0.1:18999",
                                                    state_dir=str(tmp_path)), services)
    return text, services


def test_services_resolve_to_their_ready_bridge_pods(tmp_path):
    _, services = service_sample(tmp_path)
    by = {f"{s.namespace}/{s.name}": [x.pod for x in s.servers] for s in services}
    assert by == {"other/gone": [], "serving/chat-a": ["serving/chat-a-1", "serving/chat-a-2"],
                  "serving/chat-b": ["serving/chat-b-1"], "serving/empty": []}
    assert services[0].hosts == ["gone.other.svc", "gone.other.svc.cluster.local"]


def test_each_service_gets_a_server_name_on_the_listener(tmp_path):
    text, services = service_sample(tmp_path)
    chat_b = next(s for s in services if s.name == "chat-b")
    assert chat_b.upstream
    assert re.search(rf"upstream {chat_b.upstream} {{\n\s+server 127\.0\.0\.1:21002 ", text)
    assert "server_name chat-b.serving.svc chat-b.serving.svc.cluster.local;" in text
    assert f"location / {{ proxy_pass http://{chat_b.upstream}; }}" in text
    # an HTTPRoute hostname wins over the Service's name
    assert "server_name chat-a.serving.svc.cluster.local;" in text
    assert "server_name chat-a.serving.svc chat-a" not in text
    # no ready endpoints: 503, not another Service's pods
    assert "server_name empty.serving.svc empty.serving.svc.cluster.local;" in text
    assert "Service serving/empty has no ready endpoints" in text
    assert '"127.0.0.1:21000" "serving/chat-a-1";' in text  # X-Backend-Pod map


@pytest.mark.usefixtures("nginx_installed")
def test_service_servers_are_accepted_by_nginx(tmp_path):
    nginx_accepts(service_sample(tmp_path)[0], tmp_path)
