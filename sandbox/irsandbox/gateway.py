"""The sandbox gateway: an nginx whose config follows the cluster's HTTPRoutes.

Watches HTTPRoutes (gateway.networking.k8s.io/v1), Services, EndpointSlices, InferencePools
(inference.networking.k8s.io/v1, when the CRD is installed), Pods, and the bridge's endpoint map
(``<state>/bridge/endpoints.json``); renders ``<state>/nginx/nginx.conf`` (see
:mod:`irsandbox.nginxconf`), checks it with ``nginx -t`` and reloads nginx gracefully (SIGHUP:
new workers take new connections, old ones finish their requests, nothing is dropped). After a
reload it waits until nginx answers with the new config's version and the previous config's
workers are gone (at most 2 s: one may accept a connection until it handles the reload), then
writes ``<state>/gateway/state.json`` and each HTTPRoute's ``status.parents`` (Accepted,
ResolvedRefs, with the route's ``observedGeneration``): a client that sees the route's
generation there knows the weights of that generation are in effect.

nginx runs as a child in its own session with its own prefix under ``<state>/nginx``, listening on
127.0.0.1 only, pid file ``<state>/pids/nginx.pid``. The controller stops it when it exits
(``--keep-nginx-on-exit``: leave it; a restarted controller adopts a running nginx).

    python -m irsandbox.gateway [--listen 127.0.0.1:18080] [--kubeconfig PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import nginxconf
from .common import (
    DEFAULT_GATEWAY_PORT,
    pid_cmdline,
    read_json,
    run_until_signalled,
    sandbox_env,
    setup_logging,
    use_state_dir,
    write_json_atomic,
    write_text_atomic,
)
from .kube import Informer, load_kube_config, wait_synced
from .nginxconf import PodInfo, RouteRes

log = logging.getLogger("gateway")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_listen() -> str:
    url = sandbox_env().get("NGINX_GATEWAY_URL")
    if url:
        u = urlparse(url)
        return f"{u.hostname or '127.0.0.1'}:{u.port or DEFAULT_GATEWAY_PORT}"
    return f"127.0.0.1:{DEFAULT_GATEWAY_PORT}"


def workers_of(master: int) -> set[int]:
    """The nginx master's child processes (its workers) as of now."""
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return set()
    return {int(c) for c in children}


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def load_endpoints(path: Path) -> dict[str, PodInfo]:
    doc = read_json(path, {}) or {}
    out: dict[str, PodInfo] = {}
    for key, pod in (doc.get("pods") or {}).items():
        if isinstance(pod, dict) and pod.get("address"):
            out[key] = PodInfo(address=str(pod["address"]), rollout=str(pod.get("rollout") or ""),
                               revision=str(pod.get("revision") or ""))
    return out


Foreign = frozenset[tuple[str, str]]


def is_foreign(ref: dict[str, Any], route_namespace: str, foreign: Foreign) -> bool:
    """Does this parentRef name a Gateway another implementation serves (``--foreign-gateway``,
    e.g. Traefik's gateway-system/traefik)? Those parents are not this translator's to serve or
    to report on: two controllers writing one parent's status would fight."""
    return (str(ref.get("namespace") or route_namespace), str(ref.get("name", ""))) in foreign


def ours_to_serve(route: dict[str, Any], foreign: Foreign) -> bool:
    """A route with at least one parentRef that is not foreign (or none at all)."""
    ns = str((route.get("metadata") or {}).get("namespace", ""))
    refs = (route.get("spec") or {}).get("parentRefs") or []
    return not refs or any(not is_foreign(r, ns, foreign) for r in refs)


def route_status(route: dict[str, Any], res: RouteRes, rejected: str = "",
                 foreign: Foreign = frozenset()) -> list[dict[str, Any]]:
    """``status.parents`` for an HTTPRoute: every parentRef accepted by this gateway (unless nginx
    rejected the route's config: Accepted False, UnsupportedValue); ResolvedRefs False when a
    backendRef names nothing (BackendNotFound) or an unsupported kind (InvalidKind). Parents of
    another implementation (``foreign``) get nothing from here."""
    gen = int(route["metadata"].get("generation") or 0)
    problems = [b for rule in res.rules for b in rule.backends if b.problem]
    other = [p for rule in res.rules for p in rule.problems]
    resolved = {
        "type": "ResolvedRefs", "observedGeneration": gen,
        "status": "False" if problems else "True",
        "reason": problems[0].problem if problems else "ResolvedRefs",
        "message": "; ".join(f"{b.ref}: {b.problem}" for b in problems) or "all backendRefs "
                   "resolved",
    }
    accepted = {
        "type": "Accepted", "observedGeneration": gen, "status": "True", "reason": "Accepted",
        "message": "; ".join(other) or "programmed into the sandbox nginx",
    }
    if rejected:
        accepted.update(status="False", reason="UnsupportedValue",
                        message=f"nginx rejected this route: {rejected}")
    parents = []
    ns = str(route["metadata"].get("namespace", ""))
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        if is_foreign(ref, ns, foreign):
            continue
        parents.append({
            "parentRef": ref, "controllerName": nginxconf.CONTROLLER_NAME,
            "conditions": [accepted, resolved],
        })
    return parents


def _same_conditions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> bool:
    def strip(parents: list[dict[str, Any]]) -> list[Any]:
        return [(p.get("parentRef"), p.get("controllerName"),
                 [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                  for c in p.get("conditions") or []]) for p in parents]
    return strip(old) == strip(new)


class Gateway:
    def __init__(self, api: client.ApiClient, state: Path, listen: str,
                 nginx_bin: str = "nginx", foreign: Foreign = frozenset()) -> None:
        self.api = api
        self.foreign = foreign
        self.state = state
        self.listen = listen
        self.nginx_bin = nginx_bin
        self.dir = state / "gateway"
        self.nginx_dir = state / "nginx"
        self.conf = self.nginx_dir / "nginx.conf"
        self.pidfile = state / "pids" / "nginx.pid"
        self.endpoints_file = state / "bridge" / "endpoints.json"
        for d in (self.dir, self.nginx_dir / "tmp", state / "pids", state / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        self.custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        disc = client.DiscoveryV1Api(api)
        self.wake = threading.Event()
        self.stop = threading.Event()
        h = self._on_event
        self.routes = Informer("httproutes", self.custom.list_cluster_custom_object,
                               "gateway.networking.k8s.io", "v1", "httproutes", handler=h)
        self.services = Informer("services", core.list_service_for_all_namespaces, handler=h)
        self.slices = Informer("endpointslices", disc.list_endpoint_slice_for_all_namespaces,
                               handler=h)
        self.pools = Informer("inferencepools", self.custom.list_cluster_custom_object,
                              "inference.networking.k8s.io", "v1", "inferencepools", handler=h)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, handler=h)
        self.informers = [self.routes, self.services, self.slices, self.pools, self.pods]
        self.nginx: subprocess.Popen[bytes] | None = None
        self.version = ""
        self._endpoints_mtime = 0.0
        self._status_written: dict[str, Any] = {}
        self._rejected: dict[str, dict[str, str]] = {}
        self.http = httpx.Client(timeout=1.0, trust_env=False)

    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        self.wake.set()

    # --- nginx process ----------------------------------------------------------------------

    def _nginx_cmd(self, *extra: str) -> list[str]:
        return [self.nginx_bin, "-p", str(self.nginx_dir), "-c", str(self.conf),
                "-e", str(self.state / "logs" / "nginx-error.log"), *extra]

    def nginx_pid(self) -> int:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return 0
        cmd = pid_cmdline(pid)
        return pid if "nginx" in cmd and str(self.conf) in cmd else 0

    def test_config(self, text: str) -> str:
        """Returns "" if nginx accepts ``text``, else nginx's error."""
        candidate = self.nginx_dir / "nginx.conf.next"
        write_text_atomic(candidate, text)
        r = subprocess.run(
            [self.nginx_bin, "-t", "-q", "-p", str(self.nginx_dir), "-c", str(candidate),
             "-e", str(self.state / "logs" / "nginx-error.log")],
            capture_output=True, text=True, check=False)
        return "" if r.returncode == 0 else (r.stderr or r.stdout).strip()

    def apply(self, text: str, tested: bool = False) -> bool:
        err = "" if tested else self.test_config(text)
        if err:
            log.error("nginx rejected the rendered config (kept the previous one): %s", err)
            return False
        write_text_atomic(self.conf, text)
        pid = self.nginx_pid()
        old_workers = workers_of(pid) if pid else set()
        if pid:
            os.kill(pid, signal.SIGHUP)
        else:
            log.info("starting nginx on %s", self.listen)
            # A sandbox stopped with kill -9 or a reboot leaves the sink's socket file behind, and
            # nginx cannot bind over it ("Address already in use"); no nginx of ours runs now.
            (self.nginx_dir / nginxconf.SINK_SOCKET).unlink(missing_ok=True)
            self.nginx = subprocess.Popen(
                self._nginx_cmd(), stdin=subprocess.DEVNULL,
                stdout=open(self.state / "logs" / "nginx.out", "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT, start_new_session=True, cwd=str(self.nginx_dir))
        version = nginxconf.config_version(text)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.healthz() == version:
                self.version = version
                self.wait_retired(old_workers)
                return True
            if self.nginx is not None and self.nginx.poll() is not None:
                log.error("nginx exited with %s; see %s", self.nginx.returncode,
                          self.state / "logs" / "nginx-error.log")
                self.nginx = None
                return False
            time.sleep(0.02)
        log.error("nginx did not answer with config %s within 10s", version)
        return False

    def wait_retired(self, old_workers: set[int], timeout: float = 2.0) -> None:
        """The workers of the previous config gone (or ``timeout`` passed): until an old worker
        has handled the reload it may still accept a connection and answer with the old routes
        (seen as a 500 from a backend with no pods, just after the new config answered the
        health check).  Old workers exit once their in-flight requests end; a long stream is
        not waited for beyond ``timeout``."""
        deadline = time.monotonic() + timeout
        while old_workers and time.monotonic() < deadline:
            old_workers = {w for w in old_workers if pid_alive(w)}
            time.sleep(0.01)

    def healthz(self) -> str:
        try:
            r = self.http.get(f"http://{self.listen}/-/gateway/healthz",
                              headers={"Connection": "close"})
        except httpx.HTTPError:
            return ""
        text = r.text.strip()
        return text.split()[-1] if r.status_code == 200 and text else ""

    # --- render -------------------------------------------------------------------------------

    def resolve(self) -> tuple[list[RouteRes], dict[str, PodInfo]]:
        endpoints = load_endpoints(self.endpoints_file)
        routes = nginxconf.resolve(
            [r for r in self.routes.items() if ours_to_serve(r, self.foreign)],
            self.services.items(), self.slices.items(),
            self.pools.items() if self.pools.available else [], self.pods.items(), endpoints)
        return routes, endpoints

    def build(self, routes: list[RouteRes], endpoints: dict[str, PodInfo]) -> str:
        opts = nginxconf.Options(listen=self.listen, state_dir=str(self.state),
                                 run_as_root=os.geteuid() == 0)
        services = nginxconf.resolve_services(self.services.items(), self.slices.items(),
                                              endpoints)
        return nginxconf.render(routes, endpoints, opts, services)

    def reject_bad_routes(self, routes: list[RouteRes], endpoints: dict[str, PodInfo],
                          version: str) -> dict[str, str]:
        """When nginx rejects the whole config, find the routes it rejects on their own (so one
        bad route does not freeze all the others). Cached per rendered version."""
        if version in self._rejected:
            return self._rejected[version]
        bad: dict[str, str] = {}
        for r in routes:
            err = self.test_config(self.build([r], endpoints))
            if err:
                bad[r.key] = err.splitlines()[0][:300]
                log.error("%s: nginx rejects this route, left out: %s", r.key, bad[r.key])
        self._rejected = {version: bad}
        return bad

    def write_state(self, routes: list[RouteRes], endpoints: dict[str, PodInfo],
                    rejected: dict[str, str]) -> None:
        doc: dict[str, Any] = {"version": self.version, "time": now_rfc3339(),
                               "listen": self.listen, "pid": os.getpid(),
                               "nginx_pid": self.nginx_pid(), "routes": {}}
        for r in routes:
            if r.key in rejected:
                doc.setdefault("rejected", {})[r.key] = rejected[r.key]
                continue
            doc["routes"][r.key] = {
                "generation": r.generation, "hostnames": r.hostnames,
                "rules": [{
                    "index": rule.index, "locations": rule.locations, "upstream": rule.upstream,
                    "backends": [{"ref": b.ref, "weight": b.weight, "pods": b.pods,
                                  "problem": b.problem} for b in rule.backends],
                    "servers": [{"address": s.address, "weight": s.weight, "pod": s.pod,
                                 "revision": endpoints[s.pod].revision if s.pod in endpoints
                                 else ""} for s in rule.servers],
                    "problems": rule.problems,
                } for rule in r.rules],
            }
        write_json_atomic(self.dir / "state.json", doc)

    def write_route_status(self, routes: list[RouteRes], rejected: dict[str, str]) -> None:
        by_key = {Informer.key_of(r): r for r in self.routes.items()}
        for res in routes:
            route = by_key.get(res.key)
            if route is None:
                continue
            ours = route_status(route, res, rejected.get(res.key, ""), self.foreign)
            current = [p for p in (route.get("status") or {}).get("parents") or []
                       if p.get("controllerName") == nginxconf.CONTROLLER_NAME]
            if _same_conditions(current, ours) or self._status_written.get(res.key) == (
                res.generation, repr(ours)
            ):
                continue
            others = [p for p in (route.get("status") or {}).get("parents") or []
                      if p.get("controllerName") != nginxconf.CONTROLLER_NAME]
            now = now_rfc3339()
            for p in ours:
                for c in p["conditions"]:
                    c["lastTransitionTime"] = now
            try:
                self.custom.patch_namespaced_custom_object_status(
                    "gateway.networking.k8s.io", "v1", res.namespace, "httproutes", res.name,
                    {"status": {"parents": others + ours}},
                    _content_type="application/merge-patch+json")
                self._status_written[res.key] = (res.generation, repr(ours))
            except ApiException as e:
                if e.status != 404:
                    log.warning("%s: route status patch failed: %s %s", res.key, e.status,
                                e.reason)

    # --- loop -------------------------------------------------------------------------------

    def sync(self) -> None:
        routes, endpoints = self.resolve()
        text = self.build(routes, endpoints)
        full_version = nginxconf.config_version(text)
        rejected: dict[str, str] = {}
        if full_version != self.version or not self.nginx_pid():
            tested = not self.test_config(text)
            if not tested:
                rejected = self.reject_bad_routes(routes, endpoints, full_version)
                text = self.build([r for r in routes if r.key not in rejected], endpoints)
            version = nginxconf.config_version(text)
            if version != self.version or not self.nginx_pid():
                t0 = time.monotonic()
                if not self.apply(text, tested=tested):
                    return
                log.info("nginx config %s active in %.0f ms: %s", version,
                         (time.monotonic() - t0) * 1000, summary(routes) or "no routes")
        else:
            rejected = self._rejected.get(full_version, {})
        self.write_state(routes, endpoints, rejected)
        self.write_route_status(routes, rejected)

    def _endpoints_changed(self) -> bool:
        try:
            mtime = self.endpoints_file.stat().st_mtime
        except OSError:
            mtime = 0.0
        if mtime != self._endpoints_mtime:
            self._endpoints_mtime = mtime
            return True
        return False

    def run(self) -> None:
        pid = self.nginx_pid()
        if pid:
            log.info("adopting running nginx pid %s", pid)
            with contextlib.suppress(OSError):
                self.version = nginxconf.config_version(self.conf.read_text())
        for inf in self.informers:
            inf.start()
        if not wait_synced(self.informers, timeout=120):
            raise SystemExit("gateway: could not list routes/services/endpointslices")
        self._endpoints_changed()
        self.version = "" if not pid else self.version
        self.sync()
        while not self.stop.is_set():
            woke = self.wake.wait(0.1)
            if self._endpoints_changed():
                woke = True
            if not woke:
                continue
            time.sleep(0.02)  # coalesce bursts (a rollout step touches several objects)
            self.wake.clear()
            try:
                self.sync()
            except Exception:
                log.exception("sync failed")

    def shutdown(self, stop_nginx: bool) -> None:
        """Stop nginx gracefully (SIGQUIT: finish in-flight requests; SIGTERM after 10 s).

        The controller stops its nginx because nothing else can tell it is the sandbox's: nginx
        overwrites its environment (setproctitle), so sandbox/down.sh's marker check cannot
        see it."""
        if not stop_nginx:
            return
        pid = self.nginx_pid()
        if not pid:
            return
        log.info("stopping nginx pid %s", pid)
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while self.nginx_pid() and time.monotonic() < deadline:
            if self.nginx is not None:
                self.nginx.poll()
            time.sleep(0.05)
        if self.nginx_pid():
            os.kill(pid, signal.SIGTERM)


def summary(routes: list[RouteRes]) -> str:
    parts = []
    for r in routes:
        for rule in r.rules:
            backends = ", ".join(f"{b.name}={b.weight}({len(b.pods)})" for b in rule.backends)
            parts.append(f"{r.key}#{rule.index}[{backends}]")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m irsandbox.gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", default=None,
                        help="host:port (default: from GATEWAY_URL, else 127.0.0.1:18080)")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    parser.add_argument("--keep-nginx-on-exit", action="store_true",
                        help="leave nginx running when the controller exits (a restarted "
                             "controller adopts it)")
    parser.add_argument("--foreign-gateway", action="append", default=[], metavar="NS/NAME",
                        help="a Gateway another implementation serves (Traefik's "
                             "gateway-system/traefik): routes only under it are left alone, "
                             "and no status is written for it")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging("gateway", args.verbose)
    foreign: set[tuple[str, str]] = set()
    for item in args.foreign_gateway:
        ns, sep, name = item.partition("/")
        if not (sep and ns and name):
            parser.error(f"--foreign-gateway {item!r}: write it as NAMESPACE/NAME")
        foreign.add((ns, name))
    state = use_state_dir(args.state_dir)
    listen = args.listen or default_listen()
    host = listen.rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        parser.error("the sandbox gateway listens on loopback only")
    gw = Gateway(load_kube_config(args.kubeconfig), state, listen, args.nginx,
                 frozenset(foreign))
    try:
        run_until_signalled(gw, log)
    finally:
        gw.shutdown(not args.keep_nginx_on_exit)


if __name__ == "__main__":
    main()
