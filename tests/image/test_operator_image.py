"""The operator image, built from the Dockerfile and run the way the chart runs it.

1. ``hack/build-image.sh`` builds the image with buildah (no Docker, no registry; `make test`
   runs it as its own time-bounded step first, so here it only confirms the image is current).
2. helm installs the chart in namespaces mode (its ServiceAccount, Roles and bindings; the pod
   itself is kept Pending by a nodeSelector), and ``helm template`` with the same values gives the
   container spec: args, env, ports, probe, securityContext, volumes, memory limit.
3. The container runs under podman with that spec (``podman_pod``), host networking on loopback,
   in-cluster credentials as a pod has them: a token for the chart's ServiceAccount from the
   TokenRequest API, the API server's CA, ``KUBERNETES_SERVICE_HOST``/``PORT``.
4. Liveness (the probe's path and port) and metrics answer; one release is promoted and one is
   rolled back through it; its log shows no refused request.

The start time (``podman run`` to the first 200 on the liveness path) and the image size are
written to ``.sandbox/logs/operator-image.json`` (docs/install.md quotes them).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from kubernetes import client
from tests.image.podman_pod import PodmanRun, podman_run

from irsandbox.cluster import Cluster
from irsandbox.common import REPO as ROOT
from irsandbox.common import sandbox_env, state_dir, wait_for
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]

IMAGE = "localhost/inference-rollout:test"
CHART = ROOT / "charts" / "inference-rollout"
LIVENESS_PORT, METRICS_PORT = 18510, 18511  # loopback ports of this machine (host networking)
BUILD_TIMEOUT = 900  # as hack/test.sh's step; a cold build took 2.5 min (docs/install.md)
REFUSED = re.compile(r"\b403\b|Forbidden|forbidden|Not enough permissions|"
                     r"Ran out of valid credentials|Failed to post an event")


def storage_flags() -> list[str]:
    out = subprocess.run(["bash", str(ROOT / "hack" / "build-image.sh"), "--storage"],
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split()


def podman(*args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *storage_flags(), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"podman {' '.join(args)}: {proc.stderr[-2000:]}", pytrace=False)
    return proc


def helm(kubeconfig: str, *args: str) -> str:
    from tests.sandbox.test_delivery_chart import helm_binary  # the cached Helm 4

    proc = subprocess.run([str(helm_binary()), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=180, check=False)
    if proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)}: {proc.stderr}", pytrace=False)
    return proc.stdout


@dataclass
class Install:
    release: str
    release_ns: str
    watched: str
    values: list[str]


@pytest.fixture(scope="module")
def image() -> str:
    proc = subprocess.run(["bash", str(ROOT / "hack" / "build-image.sh"), IMAGE],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    if proc.returncode != 0:
        pytest.fail(f"hack/build-image.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return IMAGE


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = Cluster(sandbox_env())
    c.install_crd()
    return c


@pytest.fixture(scope="module")
def install(cluster: Cluster) -> Iterator[Install]:
    run = uuid.uuid4().hex[:5]
    inst = Install(f"ir-image-{run}", f"image-{run}-system", f"image-{run}", [])
    repo, tag = IMAGE.rsplit(":", 1)
    inst.values = ["--namespace", inst.release_ns, "--set", "watch.mode=namespaces",
                   "--set", f"watch.namespaces={{{inst.watched}}}",
                   "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
                   "--set", f"operator.livenessPort={LIVENESS_PORT}",
                   "--set", f"operator.metricsPort={METRICS_PORT}",
                   # secure by default: the one Prometheus its rollouts use, named
                   "--set", f"tenancy.prometheusAllow={{{cluster.env['PROMETHEUS_URL']}}}",
                   # the pod the cluster would run stays Pending: podman runs it here
                   "--set-string", "nodeSelector.inference-rollout\\.dev/never-schedule=true"]
    kubeconfig = cluster.env["KUBECONFIG"]
    cluster.create_namespace(inst.watched)
    try:
        helm(kubeconfig, "install", inst.release, str(CHART), "--create-namespace",
             "--skip-crds", *inst.values)
        yield inst
    finally:
        try:
            helm(kubeconfig, "uninstall", inst.release, "--namespace", inst.release_ns)
        finally:
            cluster.delete_namespace(inst.watched)
            cluster.delete_namespace(inst.release_ns)
            # the operator (podman) stopped first: finish its rollouts' deletions as a user would
            assert not cluster.finish_deletions(inst.watched), "watched namespace Terminating"


def service_account_files(cluster: Cluster, inst: Install, directory: Path) -> Path:
    """What kubelet projects into a pod: a TokenRequest token, the cluster CA, the namespace."""
    sa = f"{inst.release}-inference-rollout"
    req = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = cluster.core.create_namespaced_service_account_token(sa, inst.release_ns, req)
    admin = yaml.safe_load(Path(cluster.env["KUBECONFIG"]).read_text())
    ca = admin["clusters"][0]["cluster"]
    if "certificate-authority-data" in ca:
        ca_pem = base64.b64decode(ca["certificate-authority-data"])
    else:
        path = Path(ca["certificate-authority"])
        ca_pem = (path if path.is_absolute() else
                  Path(cluster.env["KUBECONFIG"]).parent / path).read_bytes()
    directory.mkdir(mode=0o755)
    for name, content in (("token", token.status.token.encode()), ("ca.crt", ca_pem),
                          ("namespace", inst.release_ns.encode())):
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o644)  # kubelet's defaultMode (420)
    return directory


class PodmanOperator:
    """The operator container; ``tail`` serves the scenario helpers' failure messages."""

    def __init__(self, spec: PodmanRun, name: str) -> None:
        self.spec, self.name = spec, name
        self.started = 0.0
        self.start_seconds = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        podman("run", "--detach", "--name", self.name, *self.spec.flags, self.spec.image,
               *self.spec.args)
        probe = self.spec.liveness
        wait_for(lambda: self.live(), 60, f"liveness on :{probe.port}{probe.path}\n{self.tail()}",
                 interval=0.1)
        self.start_seconds = time.monotonic() - self.started

    def get(self, port: int, path: str, timeout: float = 5) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()

    def metrics_with(self, line: str) -> str | None:
        """The /metrics page if it has ``line``, else None (for wait_for)."""
        text = self.get(self.spec.ports["metrics"], "/metrics")[1]
        return text if line in text else None

    def live(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Status}}", self.name).stdout.strip()
        if state not in ("running", "created", "configured"):
            raise AssertionError(f"the operator container is {state}:\n{self.tail()}")
        probe = self.spec.liveness
        try:
            return self.get(probe.port, probe.path, probe.timeout)[0] == 200
        except OSError:
            return False

    def tail(self, lines: int = 40) -> str:
        out = podman("logs", "--tail", str(lines), self.name, check=False)
        return out.stdout + out.stderr

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def stop(self) -> None:
        podman("stop", "--time", str(self.spec.grace_seconds), self.name,
               timeout=self.spec.grace_seconds + 30, check=False)

    def remove(self) -> None:
        podman("rm", "--force", self.name, check=False)


@pytest.fixture(scope="module")
def operator(image: str, cluster: Cluster, install: Install,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanOperator]:
    rendered = helm(cluster.env["KUBECONFIG"], "template", install.release, str(CHART),
                    *install.values)
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    api = urlparse(cluster.env.get("KUBE_APISERVER") or yaml.safe_load(
        Path(cluster.env["KUBECONFIG"]).read_text())["clusters"][0]["cluster"]["server"])
    sa_dir = service_account_files(cluster, install,
                                   tmp_path_factory.mktemp("pod") / "serviceaccount")
    spec = podman_run(deployment, service_account_dir=sa_dir, api_host=api.hostname or "",
                      api_port=api.port or 443)
    assert spec.image == image
    op = PodmanOperator(spec, f"operator-{install.release}")
    op.remove()
    op.start()
    yield op
    op.stop()
    (state_dir() / "logs").mkdir(parents=True, exist_ok=True)
    (state_dir() / "logs" / f"{op.name}.log").write_text(op.logs())
    op.remove()


def test_the_image_runs_as_the_chart_says(image: str, operator: PodmanOperator) -> None:
    config = json.loads(podman("image", "inspect", image).stdout)[0]
    assert config["Config"]["User"] == "65532:65532"
    assert config["Config"]["Entrypoint"] == ["inference-rollout", "operator"]
    inspect = json.loads(podman("inspect", operator.name).stdout)[0]
    assert inspect["Config"]["User"] == "65532:65532"
    assert inspect["HostConfig"]["ReadonlyRootfs"] is True
    assert inspect["HostConfig"]["CapDrop"] and not inspect["HostConfig"]["CapAdd"]
    # the process really is uid 65532 with no capabilities, and / is not writable
    exec_ = podman("exec", operator.name, "python", "-c",
                   "import os; print(os.getuid(), os.getgid());"
                   "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0]);"
                   "open('/etc/probe', 'w')", check=False)
    assert exec_.stdout.splitlines()[:2] == ["65532 65532", "0000000000000000"], exec_
    assert "Read-only file system" in exec_.stderr, exec_.stderr
    size = int(config["Size"])
    (state_dir() / "logs").mkdir(parents=True, exist_ok=True)
    (state_dir() / "logs" / "operator-image.json").write_text(json.dumps({
        "image": image, "size_bytes": size, "start_seconds": round(operator.start_seconds, 2),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2))
    print(f"image {image}: {size / 1e6:.0f} MB; liveness after {operator.start_seconds:.1f} s")


def test_liveness_and_metrics_answer_on_the_charts_ports(operator: PodmanOperator) -> None:
    probe = operator.spec.liveness
    assert probe.port == LIVENESS_PORT and probe.path == "/healthz"
    assert operator.get(probe.port, probe.path, probe.timeout)[0] == 200
    # answers before any rollout exists (empty until the first reconcile: series are per rollout)
    assert operator.get(operator.spec.ports["metrics"], "/metrics")[0] == 200


def test_a_release_is_promoted_and_one_rolled_back(cluster: Cluster, install: Install,
                                                   operator: PodmanOperator) -> None:
    # Two steps, half the traffic at the first: enough canary requests for a verdict within
    # seconds (tests/e2e walks every step; this tier proves the image, not the steps).
    rel = Release(cluster, operator, install.watched,  # type: ignore[arg-type]
                  sandbox_rollout("img", prometheus=cluster.env["PROMETHEUS_URL"],
                          steps=[{"weight": 50, "pause": "10s"}, {"weight": 100}]))
    v1, load = rel.healthy_under_load()
    try:
        # promoted: v2 through both steps to 100%
        rel.apply(with_template(rel.manifest, version="v2"))
        v2 = rel.wait_canary()
        assert v2 != v1
        done = rel.wait_healthy(revision=v2, timeout=180)
        assert done["analysis"]["errors"]["verdict"] == "Pass"
        assert rel.route() == {v2: 100}
        # rolled back: v3 fails 30% of its requests
        rel.apply(with_template(rel.manifest, version="v3", failure_rate=30))
        st = rel.wait(lambda s: s.get("phase") == "Degraded", 180, "rolled back (Degraded)")
        assert st.get("abortReason") == "AnalysisFailed", st
        assert st["analysis"]["errors"]["verdict"] == "Fail"
        assert st["stableRevision"] == v2 and st["canaryWeight"] == 0
        # the rollback is written to status before the route is (so no crash can undo it)
        back = {v2: 100, st["canaryRevision"]: 0}
        wait_for(lambda: rel.route() == back, 15, f"the route back on {v2}: {back}")
        reasons = [e.split(":")[0] for e in rel.events()]
        assert "Promoted" in reasons  # posted by the operator's client, authenticated in-cluster
    finally:
        load.stop()
    # the release's series, from the chart's metrics port (exported after the reconcile's writes)
    series = f'name="img",namespace="{install.watched}"'
    degraded = f'inference_rollout_info{{{series},phase="Degraded"}} 1'
    metrics = wait_for(lambda: operator.metrics_with(degraded), 15, degraded)
    assert re.search(rf'inference_rollout_rollbacks_total{{{series},reason="\w+"}} 1',
                     metrics), metrics
    refused = [line for line in operator.logs().splitlines() if REFUSED.search(line)]
    assert not refused, "\n".join(refused[:20])
