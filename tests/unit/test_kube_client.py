"""The Kubernetes client (``kube.py``, a thin adapter over ``kubernetes.aio``) against a real
local HTTPS server that records what reached it: which credentials are chosen and sent (a
kubeconfig's token, never the pod's ServiceAccount token beside it; the ServiceAccount only
in-cluster, its rotated token read again; an exec plugin run again once its credential expired
or was refused; a client certificate with and without a CA file), and the requests' shapes
(content types, the metadata-only Accept, paths as built, errors as ``KubeError``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import ssl
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes.aio.config import incluster_config

from inference_rollout import kube as kube_module
from inference_rollout.kube import (
    METADATA_LIST,
    ConfigException,
    Kube,
    KubeError,
    load_configuration,
)
from inference_rollout.paths import ns_path

EXEC_API = "client.authentication.k8s.io/v1beta1"


# --- a CA, a server certificate for 127.0.0.1 and a client certificate (openssl, EC keys) ---


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _leaf(d: Path, name: str, subject: str, ext: str) -> None:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
             "-subj", subject)
    (d / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
             "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-out", str(d / f"{name}.crt"),
             "-days", "1", "-extfile", str(d / f"{name}.ext"))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"), "-days", "1",
             "-subj", "/CN=test-ca")
    _leaf(d, "server", "/CN=127.0.0.1",
          "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _leaf(d, "client", "/CN=tester/O=testers", "extendedKeyUsage=clientAuth\n")
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt",
               d / "client.key")


# --- the server: answers as an API server would, and records every request ---


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    client_cn: str | None


@dataclass
class ApiServer:
    url: str
    seen: list[Seen] = field(default_factory=list)
    #: Authorization headers answered 401 (once each).
    refuse: set[str] = field(default_factory=set)
    delay: float = 0.0

    def auth(self) -> list[str | None]:
        return [s.headers.get("Authorization") for s in self.seen]


@asynccontextmanager
async def api_server(pki: Pki) -> AsyncIterator[ApiServer]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    ctx.load_verify_locations(pki.ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is checked when one is sent
    server = ApiServer(url="")

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        cn = None
        for rdn in (peer or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    cn = value
        seen = Seen(request.method, request.raw_path.split("?")[0], dict(request.query),
                    dict(request.headers), await request.read(), cn)
        server.seen.append(seen)
        if server.delay:
            await asyncio.sleep(server.delay)
        auth = seen.headers.get("Authorization", "")
        if auth in server.refuse:
            server.refuse.discard(auth)
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        if seen.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "message": 'thing "missing" not found',
                                      "code": 404}, status=404)
        return web.json_response({"kind": "Thing", "metadata": {"name": "x"},
                                  "echo": seen.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    server.url = f"https://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


# --- kubeconfigs ---


def kubeconfig(path: Path, server: str, user: dict[str, Any],
               cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


@pytest.fixture()
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pki: Pki) -> Iterator[Path]:
    """This process as if in a pod: a ServiceAccount token file and the in-cluster variables;
    no $KUBECONFIG and no ~/.kube/config unless a test writes one.  Yields the token file."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token-1")
    monkeypatch.setattr(kube_module, "SA_TOKEN", sa / "token")
    monkeypatch.setattr(kube_module, "SA_CA", pki.ca)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    yield sa / "token"


def in_cluster_at(monkeypatch: pytest.MonkeyPatch, server: ApiServer) -> None:
    host, port = server.url.removeprefix("https://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)


THING = ns_path("example.dev", "v1", "team-a", "things", "x")


async def get_with(cfg_source: str | None, path: Any = THING) -> dict[str, Any]:
    kube = Kube(await load_configuration(cfg_source))
    try:
        return await kube.get(path)
    finally:
        await kube.close()


# --- which credentials are sent ---


def test_a_kubeconfigs_token_is_sent_never_the_pods_service_account_token(
        pod: Path, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def story() -> ApiServer:
        async with api_server(pki) as server:
            in_cluster_at(monkeypatch, server)  # in a pod, with the SA token file present
            cfg = kubeconfig(tmp_path / "kc", server.url, {"token": "from-kubeconfig"},
                             {"certificate-authority": str(pki.ca)})
            await get_with(str(cfg))  # --kubeconfig
            monkeypatch.setenv("KUBECONFIG", str(cfg))
            await get_with(None)  # $KUBECONFIG
            monkeypatch.delenv("KUBECONFIG")
            (tmp_path / "home" / ".kube").mkdir(parents=True)
            (tmp_path / "home" / ".kube" / "config").write_text(cfg.read_text())
            await get_with(None)  # ~/.kube/config
            return server

    server = asyncio.run(story())
    assert server.auth() == ["Bearer from-kubeconfig"] * 3
    assert not any("sa-token" in str(a) for a in server.auth())


def test_the_service_account_only_without_any_kubeconfig_and_its_rotated_token_is_read_again(
        pod: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    now = dt.datetime.now
    later = dt.timedelta()

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Clock:
            # a plain datetime, as the loader needs only its arithmetic and comparisons
            return now(tz) + later  # type: ignore[return-value]

    # the in-cluster loader re-reads its token file once a minute: its minute, made to pass
    monkeypatch.setattr(incluster_config, "datetime",
                        types.SimpleNamespace(datetime=Clock, timedelta=dt.timedelta))

    async def story() -> ApiServer:
        nonlocal later
        async with api_server(pki) as server:
            in_cluster_at(monkeypatch, server)
            empty = pod.parent / "empty-kubeconfig"  # no cluster, context or user: as none
            empty.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
            monkeypatch.setenv("KUBECONFIG", f"{pod.parent / 'no-such-kubeconfig'}:{empty}")
            kube = Kube(await load_configuration(None))
            try:
                await kube.get(THING)
                pod.write_text("sa-token-2")  # the kubelet rotates the projected token
                await kube.get(THING)  # within the minute: the token read before
                later = dt.timedelta(seconds=61)
                await kube.get(THING)
            finally:
                await kube.close()
            return server

    server = asyncio.run(story())
    assert [a.lower() for a in server.auth() if a] == [
        "bearer sa-token-1", "bearer sa-token-1", "bearer sa-token-2"]


def test_no_kubeconfig_and_not_in_a_pod_is_an_error_naming_both(
        pod: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigException, match=r"no kubeconfig .*\.kube/config.* not in a cluster"):
        asyncio.run(load_configuration(None))


def test_an_explicit_kubeconfig_is_that_file_alone(
        pod: Path, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "env", "https://127.0.0.1:1",
                                                    {"token": "env"})))
    with pytest.raises(ConfigException, match=f"kubeconfig {missing}: no such file"):
        asyncio.run(load_configuration(str(missing)))  # no fall back to $KUBECONFIG

    async def story() -> ApiServer:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, {"token": "flag"},
                             {"certificate-authority": str(pki.ca)})
            await get_with(str(cfg))
            return server

    assert asyncio.run(story()).auth() == ["Bearer flag"]


def test_a_token_file_is_read_again_each_minute(
        pod: Path, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("file-1\n")  # a newline, as `echo` writes it: not sent

    async def story() -> ApiServer:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, {"tokenFile": str(token)},
                             {"certificate-authority": str(pki.ca)})
            kube = Kube(await load_configuration(str(cfg)))
            try:
                await kube.get(THING)
                token.write_text("file-2")
                await kube.get(THING)
                monkeypatch.setattr(kube_module, "TOKEN_FILE_PERIOD_SECONDS", 0.0)
                await kube.get(THING)
            finally:
                await kube.close()
            return server

    assert asyncio.run(story()).auth() == ["Bearer file-1", "Bearer file-1", "Bearer file-2"]


PLUGIN = """#!{python}
import datetime, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
status = {{"token": f"exec-{{n}}"}}
if float(sys.argv[2]) > 0:
    expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        seconds=float(sys.argv[2]))
    status["expirationTimestamp"] = expiry.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
print(json.dumps({{"apiVersion": "{api}", "kind": "ExecCredential", "status": status}}))
"""


def exec_user(tmp_path: Path, lifetime: float) -> tuple[dict[str, Any], Path]:
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable, api=EXEC_API))
    plugin.chmod(0o755)
    counter = tmp_path / "runs"
    return {"exec": {"apiVersion": EXEC_API, "command": str(plugin),
                     "args": [str(counter), str(lifetime)]}}, counter


def test_an_exec_plugins_credential_is_renewed_once_it_expired(
        pod: Path, pki: Pki, tmp_path: Path) -> None:
    user, runs = exec_user(tmp_path, lifetime=1.5)

    async def story() -> ApiServer:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, user,
                             {"certificate-authority": str(pki.ca)})
            kube = Kube(await load_configuration(str(cfg)))
            try:
                await kube.get(THING)
                await kube.get(THING)  # still valid: the plugin is not run again
                await asyncio.sleep(1.7)
                await asyncio.gather(kube.get(THING), kube.get(THING))  # expired: one new run
                await kube.get(THING)
            finally:
                await kube.close()
            return server

    server = asyncio.run(story())
    assert server.auth() == ["Bearer exec-1"] * 2 + ["Bearer exec-2"] * 3
    assert runs.read_text() == "2"


def test_an_exec_credential_without_expiry_is_kept_until_the_api_server_refuses_it(
        pod: Path, pki: Pki, tmp_path: Path) -> None:
    user, runs = exec_user(tmp_path, lifetime=0)

    async def story() -> tuple[ApiServer, KubeError]:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, user,
                             {"certificate-authority": str(pki.ca)})
            kube = Kube(await load_configuration(str(cfg)))
            try:
                await kube.get(THING)
                await kube.get(THING)
                server.refuse.add("Bearer exec-1")
                with pytest.raises(KubeError) as refused:
                    await kube.get(THING)
                await kube.get(THING)  # as client-go: a new credential after a 401
            finally:
                await kube.close()
            return server, refused.value

    server, refused = asyncio.run(story())
    assert refused.status == 401
    assert server.auth() == ["Bearer exec-1"] * 3 + ["Bearer exec-2"]
    assert runs.read_text() == "2"


@pytest.mark.parametrize("with_ca", [True, False], ids=["with-ca", "without-ca"])
def test_a_client_certificate_is_presented_with_or_without_a_ca_file(
        pod: Path, pki: Pki, tmp_path: Path, with_ca: bool) -> None:
    cluster = {"certificate-authority": str(pki.ca)} if with_ca else {
        "insecure-skip-tls-verify": True}

    async def story() -> ApiServer:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url,
                             {"client-certificate": str(pki.client_cert),
                              "client-key": str(pki.client_key)}, cluster)
            await get_with(str(cfg))
            return server

    server = asyncio.run(story())
    assert [s.client_cn for s in server.seen] == ["tester"]
    assert server.auth() == [None]  # no token of any kind


def test_the_server_certificate_is_verified_against_the_kubeconfigs_ca(
        pod: Path, pki: Pki, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    _openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(tmp_path / "other.key"), "-out", str(other), "-days", "1",
             "-subj", "/CN=other-ca")

    async def story() -> tuple[ApiServer, KubeError]:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, {"token": "t"},
                             {"certificate-authority": str(other)})
            with pytest.raises(KubeError) as refused:
                await get_with(str(cfg))
            return server, refused.value

    server, refused = asyncio.run(story())
    assert refused.status == 0 and "certificate" in refused.message.lower()
    assert server.seen == []  # the token never left the client


# --- the requests' shapes ---


def test_requests_carry_their_content_types_bodies_and_paths_as_built(
        pod: Path, pki: Pki, tmp_path: Path) -> None:
    coll = ns_path("example.dev", "v1", "team-a", "things")

    async def story() -> tuple[ApiServer, Kube]:
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, {"token": "t"},
                             {"certificate-authority": str(pki.ca)})
            kube = Kube(await load_configuration(str(cfg)))
            try:
                assert (await kube.get(THING))["echo"] == THING
                await kube.list_metadata(coll)
                await kube.create(coll, {"metadata": {"name": "x"}})
                await kube.merge_patch(THING.sub("status"), {"status": {"a": 1}})
                await kube.apply(THING, {"apiVersion": "example.dev/v1", "kind": "Thing"})
                await kube.request("PATCH", THING, [{"op": "test", "path": "/a", "value": 1}],
                                   "application/json-patch+json")
                await kube.delete(THING)
                await kube.delete(ns_path("example.dev", "v1", "team-a", "things", "missing"))
                assert await kube.get_or_none(
                    ns_path("example.dev", "v1", "team-a", "things", "missing")) is None
                with pytest.raises(TypeError):  # would go out as a strategic merge patch
                    await kube.request("PATCH", THING, {"op": "x"}, "application/json-patch+json")
                assert kube.api.rest_client.pool_manager is not None
                assert kube.api.rest_client.pool_manager.connector is not None
                assert kube.api.rest_client.pool_manager.connector.limit == 32
            finally:
                await kube.close()
            return server, kube

    server, _ = asyncio.run(story())
    got = [(s.method, s.path, s.headers.get("Content-Type") if s.body else None,
            json.loads(s.body) if s.body else None, s.query) for s in server.seen]
    fm = {"fieldManager": "inference-rollout"}
    assert got == [
        ("GET", THING, None, None, {}),
        ("GET", coll, None, None, {}),
        ("POST", coll, "application/json", {"metadata": {"name": "x"}}, fm),
        ("PATCH", f"{THING}/status", "application/merge-patch+json", {"status": {"a": 1}}, fm),
        ("PATCH", THING, "application/apply-patch+yaml",
         {"apiVersion": "example.dev/v1", "kind": "Thing"}, {**fm, "force": "true"}),
        ("PATCH", THING, "application/json-patch+json",
         [{"op": "test", "path": "/a", "value": 1}], {}),
        ("DELETE", THING, "application/json", {"propagationPolicy": "Background"}, {}),
        ("DELETE", f"{coll}/missing", "application/json", {"propagationPolicy": "Background"},
         {}),
        ("GET", f"{coll}/missing", None, None, {}),
    ]
    assert server.seen[1].headers["Accept"] == METADATA_LIST
    assert server.seen[0].headers["Accept"] == "application/json"
    assert server.seen[0].headers["User-Agent"].startswith("inference-rollout/")


def test_refusals_and_silence_are_kube_errors(pod: Path, pki: Pki, tmp_path: Path) -> None:
    missing = ns_path("example.dev", "v1", "team-a", "things", "missing")

    async def story() -> list[KubeError]:
        errors = []
        async with api_server(pki) as server:
            cfg = kubeconfig(tmp_path / "kc", server.url, {"token": "t"},
                             {"certificate-authority": str(pki.ca)})
            config = await load_configuration(str(cfg))
            kube = Kube(config, timeout=0.3)
            try:
                with pytest.raises(KubeError) as e404:
                    await kube.get(missing)
                errors.append(e404.value)
                server.delay = 2.0
                with pytest.raises(KubeError) as slow:
                    await kube.get(THING)
                errors.append(slow.value)
            finally:
                await kube.close()
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config.host = f"https://127.0.0.1:{port}"
        kube = Kube(config)
        try:
            with pytest.raises(KubeError) as gone:
                await kube.get(THING)
            errors.append(gone.value)
        finally:
            await kube.close()
        return errors

    e404, slow, gone = asyncio.run(story())
    assert (e404.status, e404.method, e404.path, e404.message) == (
        404, "GET", missing, 'thing "missing" not found')
    assert slow.status == 0 and "Timeout" in slow.message
    assert gone.status == 0 and gone.path == THING
