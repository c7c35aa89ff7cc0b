"""The chart's operator container as ``podman run`` flags: what a kubelet would do with the
Deployment's pod spec, on this machine, with host networking on loopback.

Only what the chart renders is mapped, and anything else is refused by name: a new field in the
chart (a volume, a capability, an env ``valueFrom``) fails the image tier until it is mapped
here, instead of being silently left out of the container that is tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Flags every run needs on this kind of machine: crun (podman's default where installed)
#: refuses its hybrid cgroups, and podman's default rlimits exceed the machine's own.
MACHINE_FLAGS = ("--runtime", "runc", "--ulimit", "nofile=4096:4096",
                 "--ulimit", "nproc=4096:4096")
POD_KEYS = {"serviceAccountName", "automountServiceAccountToken", "securityContext",
            "terminationGracePeriodSeconds", "containers", "volumes", "nodeSelector",
            "affinity"}  # scheduling only, like nodeSelector
#: The downward API fields an env var may name, and where a pod's value comes from.
FIELD_REFS = {"metadata.namespace"}
CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "args", "env", "ports", "livenessProbe",
                  "resources", "securityContext", "volumeMounts"}


@dataclass
class Probe:
    path: str
    port: int
    initial_delay: float
    period: float
    timeout: float
    failure_threshold: int


@dataclass
class PodmanRun:
    flags: list[str]        # between `podman run` and the image
    image: str
    args: list[str]         # the container's args (the image's entrypoint stays)
    ports: dict[str, int]   # port name -> port (host networking: the host's own)
    liveness: Probe
    grace_seconds: int


def _refuse_unknown(what: str, obj: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ValueError(f"{what}: {unknown} not mapped to podman (tests/image/podman_pod.py)")


def _memory(quantity: str) -> str:
    units = {"Ki": "k", "Mi": "m", "Gi": "g"}
    for suffix, flag in units.items():
        if quantity.endswith(suffix):
            return quantity.removesuffix(suffix) + flag
    raise ValueError(f"memory limit {quantity!r}: only Ki/Mi/Gi are mapped")


def podman_run(deployment: dict[str, Any], *, service_account_dir: Path, api_host: str,
               api_port: int) -> PodmanRun:
    """The flags for the Deployment's single container, with in-cluster credentials as a pod
    has them: the ServiceAccount files mounted read-only, the API server's address in the env."""
    pod = deployment["spec"]["template"]["spec"]
    _refuse_unknown("pod spec", pod, POD_KEYS)
    (container,) = pod["containers"]
    _refuse_unknown("container", container, CONTAINER_KEYS)
    flags: list[str] = ["--network", "host", *MACHINE_FLAGS]
    if container.get("imagePullPolicy") in ("IfNotPresent", "Never"):
        flags += ["--pull", "never"]  # the image is local; no registry is reachable anyway

    psc = dict(pod.get("securityContext") or {})
    user, group = psc.pop("runAsUser", None), psc.pop("runAsGroup", None)
    if psc.pop("runAsNonRoot", False) and not user:
        raise ValueError("runAsNonRoot without a non-zero runAsUser: kubelet would refuse it")
    if user is not None:
        flags += ["--user", f"{user}:{group if group is not None else user}"]
    if "fsGroup" in psc:
        flags += ["--group-add", str(psc.pop("fsGroup"))]
    seccomp = psc.pop("seccompProfile", {"type": "RuntimeDefault"})
    if seccomp != {"type": "RuntimeDefault"}:  # podman's default profile is the runtime's
        raise ValueError(f"seccompProfile {seccomp}: only RuntimeDefault is mapped")
    _refuse_unknown("pod securityContext", psc, set())

    sc = dict(container.get("securityContext") or {})
    if sc.pop("allowPrivilegeEscalation", True) is False:
        flags += ["--security-opt", "no-new-privileges"]
    if sc.pop("readOnlyRootFilesystem", False):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # writable: the volumes only
    if sc.pop("privileged", False):
        raise ValueError("privileged containers are not run here")
    caps = sc.pop("capabilities", {})
    flags += [f for c in caps.get("drop", []) for f in ("--cap-drop", c)]
    flags += [f for c in caps.get("add", []) for f in ("--cap-add", c)]
    _refuse_unknown("container securityContext", sc, set())

    for env in container.get("env", []):
        _refuse_unknown(f"env {env.get('name')}", env, {"name", "value", "valueFrom"})
        value = env.get("value")
        if "valueFrom" in env:  # the downward API: the pod's own namespace only
            ref = env["valueFrom"].get("fieldRef", {}).get("fieldPath")
            if ref not in FIELD_REFS:
                raise ValueError(f"env {env['name']}: valueFrom {env['valueFrom']} is not mapped")
            value = deployment["metadata"]["namespace"]
        flags += ["--env", f"{env['name']}={value}"]
    flags += ["--env", f"KUBERNETES_SERVICE_HOST={api_host}",
              "--env", f"KUBERNETES_SERVICE_PORT={api_port}"]
    if pod.get("automountServiceAccountToken", True):
        flags += ["--volume", f"{service_account_dir}:{SA_DIR}:ro"]

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        _refuse_unknown(f"volumeMount {mount.get('name')}", mount, {"name", "mountPath"})
        volume = volumes[mount["name"]]
        _refuse_unknown(f"volume {volume['name']}", volume, {"name", "emptyDir"})
        size = (volume["emptyDir"] or {}).get("sizeLimit")
        opts = "rw,mode=1777" + (f",size={_memory(size)}" if size else "")
        flags += ["--tmpfs", f"{mount['mountPath']}:{opts}"]

    resources = container.get("resources", {})
    limits = dict(resources.get("limits") or {})
    if "memory" in limits:
        flags += ["--memory", _memory(limits.pop("memory"))]
    _refuse_unknown("resources.limits", limits, set())  # requests are for the scheduler

    ports = {p["name"]: int(p["containerPort"]) for p in container.get("ports", [])}
    probe = container["livenessProbe"]
    http = probe["httpGet"]
    port = http["port"]
    liveness = Probe(path=http["path"], port=ports[port] if isinstance(port, str) else int(port),
                     initial_delay=probe.get("initialDelaySeconds", 0),
                     period=probe.get("periodSeconds", 10),
                     timeout=probe.get("timeoutSeconds", 1),
                     failure_threshold=probe.get("failureThreshold", 3))
    return PodmanRun(flags=flags, image=container["image"], args=list(container.get("args", [])),
                     ports=ports, liveness=liveness,
                     grace_seconds=int(pod.get("terminationGracePeriodSeconds", 30)))
