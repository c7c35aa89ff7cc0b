"""Pure functions from a pod (a dict, as the API server returns it) to a simulator process.

Nothing here does I/O: the bridge, the gateway and the unit tests share it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

ANNOTATION_PREFIX = "sim.inference.dev/"
ANN_TTFT_MS = ANNOTATION_PREFIX + "ttft-ms"
ANN_ITL_MS = ANNOTATION_PREFIX + "itl-ms"
ANN_FAILURE_RATE = ANNOTATION_PREFIX + "failure-rate"
ANN_FAILURE_TYPES = ANNOTATION_PREFIX + "failure-types"
ANN_STARTUP_SECONDS = ANNOTATION_PREFIX + "startup-seconds"
ANN_BUSINESS_FAIL_RATE = ANNOTATION_PREFIX + "business-fail-rate"
ANN_MODE = ANNOTATION_PREFIX + "mode"

#: The readiness condition the bridge sets when the simulator reports the model loaded. A pod
#: template may list it in ``spec.readinessGates`` (see docs/sandbox-bridge.md); the bridge sets
#: it either way.
CONDITION_LOADED = ANNOTATION_PREFIX + "loaded"

LABEL_ROLLOUT = "rollouts.inference.dev/rollout"
LABEL_REVISION = "rollouts.inference.dev/revision"

#: Failure types of llm-d-inference-sim's ``--failure-types`` (pkg/common/config.go).
SIM_FAILURE_TYPES = (
    "rate_limit",
    "invalid_api_key",
    "context_length",
    "server_error",
    "invalid_request",
    "model_not_found",
)
#: The default injected failure: HTTP 503 "The server is overloaded or not ready yet.", what an
#: overloaded vLLM replica answers; the other types are client errors (4xx).
DEFAULT_FAILURE_TYPES = ("server_error",)

#: vLLM's own default ``--max-num-seqs`` (the simulator's default, 5, would queue a load test).
DEFAULT_MAX_NUM_SEQS = 256

_LABEL_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(name: str) -> str:
    """A Kubernetes label key as a Prometheus label name, as Prometheus' kubernetes_sd + labelmap
    does (``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``); a leading digit gets a ``_``
    so the name is valid under Prometheus 2's legacy name rules."""
    out = _LABEL_INVALID.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


# --- vLLM container and args -----------------------------------------------------------------


#: vLLM's ``--port`` default: where a pod's server listens when its args do not say.
VLLM_DEFAULT_PORT = 8000


@dataclass(frozen=True)
class VLLMArgs:
    model: str
    served_model_names: tuple[str, ...] = ()
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    port: int | None = None
    #: LoRA: ``--enable-lora``, ``--max-loras``, and the adapters ``--lora-modules`` names at start
    #: (vLLM's ``name=path`` or JSON forms), which the simulator serves the same way.
    enable_lora: bool = False
    max_loras: int | None = None
    lora_modules: tuple[str, ...] = ()

    @property
    def public_name(self) -> str:
        return self.served_model_names[0] if self.served_model_names else self.model


def _container_argv(container: dict[str, Any]) -> list[str]:
    return [str(a) for a in (container.get("command") or [])] + [
        str(a) for a in (container.get("args") or [])
    ]


def is_vllm_container(container: dict[str, Any]) -> bool:
    if container.get("name") == "vllm":
        return True
    return any(a == "--model" or a.startswith("--model=") for a in _container_argv(container))


def find_vllm_container(pod: dict[str, Any]) -> dict[str, Any] | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if is_vllm_container(container):
            return container
    return None


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_vllm_args(argv: list[str]) -> VLLMArgs:
    """Read the model and the flags the simulator also understands from a vLLM command line.

    Handles ``--model X``, ``--model=X``, ``vllm serve X`` (positional model),
    ``--served-model-name a b`` (several names until the next flag) and ``--served-model-name=a``.
    """
    model = ""
    served: list[str] = []
    lora_modules: list[str] = []
    flags: set[str] = set()
    values: dict[str, str] = {}
    many = {"served-model-name": served, "lora-modules": lora_modules}  # nargs='+' in vLLM
    i = 0
    n = len(argv)
    while i < n:
        arg = argv[i]
        if arg == "serve" and i + 1 < n and not argv[i + 1].startswith("-"):
            model = model or argv[i + 1]
            i += 2
            continue
        if arg.startswith("--"):
            key, eq, inline = arg[2:].partition("=")
            if key in many:
                if eq:
                    many[key].append(inline)
                    i += 1
                    continue
                i += 1
                while i < n and not argv[i].startswith("--"):
                    many[key].append(argv[i])
                    i += 1
                continue
            if eq:
                value: str | None = inline
                i += 1
            elif i + 1 < n and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 2
            else:
                value = None
                flags.add(key)
                i += 1
            if key == "model" and value:
                model = value
            elif value is not None:
                values[key] = value
            continue
        i += 1
    return VLLMArgs(
        model=model,
        served_model_names=tuple(s for s in served if s),
        max_num_seqs=_int_or_none(values.get("max-num-seqs")),
        max_model_len=_int_or_none(values.get("max-model-len")),
        port=_int_or_none(values.get("port")),
        enable_lora="enable-lora" in flags or values.get("enable-lora", "").lower() == "true",
        max_loras=_int_or_none(values.get("max-loras")),
        lora_modules=tuple(m for m in lora_modules if m),
    )


def vllm_args_of(pod: dict[str, Any]) -> VLLMArgs | None:
    container = find_vllm_container(pod)
    if container is None:
        return None
    args = parse_vllm_args(_container_argv(container))
    if not args.model:
        args = VLLMArgs(model="vllm-model", served_model_names=args.served_model_names,
                        max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                        port=args.port)
    return args


# --- behaviour from annotations -----------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    failure_rate: int = 0
    failure_types: tuple[str, ...] = DEFAULT_FAILURE_TYPES
    startup_seconds: float = 0.0
    #: None: the annotation is absent (the shim in front of the simulator corrupts nothing).
    business_fail_rate: float | None = None
    mode: str = "echo"
    problems: tuple[str, ...] = field(default=(), compare=False)


def _number(annotations: dict[str, str], key: str, lo: float, hi: float,
            problems: list[str]) -> float | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        problems.append(f"{key}={raw!r} is not a number; ignored")
        return None
    if not math.isfinite(value) or not lo <= value <= hi:
        problems.append(f"{key}={raw!r} is outside [{lo:g}, {hi:g}]; ignored")
        return None
    return value


def behaviour_of(annotations: dict[str, str] | None) -> Behaviour:
    """The simulator's behaviour from the pod's ``sim.inference.dev/*`` annotations. A malformed
    value is ignored (and reported in ``problems``), never fatal: a typo must not stop a pod."""
    ann = annotations or {}
    problems: list[str] = []
    ttft = _number(ann, ANN_TTFT_MS, 0, 3_600_000, problems)
    itl = _number(ann, ANN_ITL_MS, 0, 600_000, problems)
    rate = _number(ann, ANN_FAILURE_RATE, 0, 100, problems)
    startup = _number(ann, ANN_STARTUP_SECONDS, 0, 86_400, problems)
    business = _number(ann, ANN_BUSINESS_FAIL_RATE, 0, 100, problems)
    types = DEFAULT_FAILURE_TYPES
    raw_types = ann.get(ANN_FAILURE_TYPES)
    if raw_types is not None:
        parsed = tuple(t for t in re.split(r"[\s,]+", raw_types.strip()) if t)
        bad = [t for t in parsed if t not in SIM_FAILURE_TYPES]
        if bad or not parsed:
            problems.append(f"{ANN_FAILURE_TYPES}={raw_types!r}: unknown types {bad}; ignored")
        else:
            types = parsed
    mode = ann.get(ANN_MODE, "echo").strip() or "echo"
    if mode not in ("echo", "random"):
        problems.append(f"{ANN_MODE}={mode!r} is not echo|random; using echo")
        mode = "echo"
    return Behaviour(
        ttft_ms=ttft or 0.0,
        itl_ms=itl or 0.0,
        # the simulator takes an integer percentage (rounding 0.4 % down would hide it: round up)
        failure_rate=math.ceil(rate) if rate else 0,
        failure_types=types,
        startup_seconds=startup or 0.0,
        business_fail_rate=business,
        mode=mode,
        problems=tuple(problems),
    )


def _sim_lora_module(module: str) -> str:
    """vLLM's ``name=path`` (or its JSON form) as the simulator's JSON form."""
    if module.lstrip().startswith("{"):
        return module
    name, _, path = module.partition("=")
    return json.dumps({"name": name, "path": path or name})


def _ms(value: float) -> str:
    """A Go duration string for milliseconds (``time.ParseDuration`` accepts fractions)."""
    return f"{value:g}ms"


def sim_command(binary: str, port: int, args: VLLMArgs, behaviour: Behaviour) -> list[str]:
    """The llm-d-inference-sim command line (flags checked against its v0.10 source,
    pkg/common/parser.go). ``--force-dummy-tokenizer`` keeps it offline: without it the
    simulator asks huggingface.co whether the model exists."""
    cmd = [
        binary,
        f"--port={port}",
        f"--model={args.model}",
    ]
    if args.served_model_names:
        cmd += ["--served-model-name", *args.served_model_names]
    cmd += [
        f"--mode={behaviour.mode}",
        f"--time-to-first-token={_ms(behaviour.ttft_ms)}",
        f"--inter-token-latency={_ms(behaviour.itl_ms)}",
        f"--failure-injection-rate={behaviour.failure_rate}",
        f"--max-num-seqs={args.max_num_seqs or DEFAULT_MAX_NUM_SEQS}",
        "--force-dummy-tokenizer",
        # always explicit: an empty list means "all types" (4xx included), also for a rate set
        # later through /admin/config
        "--failure-types",
        *behaviour.failure_types,
    ]
    if args.max_model_len:
        cmd.append(f"--max-model-len={args.max_model_len}")
    if args.enable_lora:
        # vLLM's default is 1 adapter on the GPU at once; the simulator's too
        cmd.append(f"--max-loras={args.max_loras or 1}")
        if args.lora_modules:
            cmd += ["--lora-modules", *(_sim_lora_module(m) for m in args.lora_modules)]
    if behaviour.startup_seconds:
        cmd.append(f"--startup-duration={behaviour.startup_seconds:g}s")
    return cmd


def admin_config_delta(old: Behaviour, new: Behaviour) -> dict[str, Any]:
    """The body for the simulator's ``POST /admin/config`` that moves a running process from
    ``old`` to ``new`` (only admin-configurable fields: latencies and failure injection)."""
    body: dict[str, Any] = {}
    if old.ttft_ms != new.ttft_ms:
        body["time-to-first-token"] = _ms(new.ttft_ms)
    if old.itl_ms != new.itl_ms:
        body["inter-token-latency"] = _ms(new.itl_ms)
    if old.failure_rate != new.failure_rate:
        body["failure-injection-rate"] = new.failure_rate
    if old.failure_types != new.failure_types:
        body["failure-types"] = list(new.failure_types)
    return body


def needs_restart(old: Behaviour, new: Behaviour) -> bool:
    """Changes a running simulator cannot take through /admin/config (or its shim through
    ``/-/shim/config``: the business-fail rate, absent = 0). The bridge does not restart for them
    (a container keeps running when annotations change); it logs that they apply to new pods
    only."""
    return old.mode != new.mode


# --- pod state ---------------------------------------------------------------------------------


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_pod_ready(pod: dict[str, Any]) -> bool:
    cond = condition(pod, "Ready")
    return bool(cond and cond.get("status") == "True")


def revision_of(labels: dict[str, str] | None, pod_name: str) -> tuple[str, str]:
    """(rollout, revision) of a pod: from its ``rollouts.inference.dev/*`` labels, else from its
    name ``<rollout>-<revision>-<replicaset hash>-<suffix>`` (Deployment ``<rollout>-<revision>``).
    """
    labels = labels or {}
    rollout = labels.get(LABEL_ROLLOUT, "")
    revision = labels.get(LABEL_REVISION, "")
    if rollout and revision:
        return rollout, revision
    parts = pod_name.split("-")
    if len(parts) >= 4:
        deployment = parts[:-2]
        guess_rollout = "-".join(deployment[:-1])
        guess_revision = deployment[-1]
        return rollout or guess_rollout, revision or guess_revision
    return rollout, revision
