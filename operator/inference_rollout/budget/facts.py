"""What the lints need to know about a release, read from an InferenceRollout manifest.

Reading is lenient (a plain dict, as ``kubectl`` or the API server gives it): schema validation is
the API models' job, and the lints must still say something useful about a manifest the schema
rejects.  Only what the lints cannot do without raises :class:`ManifestError`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference_rollout.api import API_VERSION, KIND
from inference_rollout.api.spec import (
    MAX_GPU_MEMORY_GIB,
    MAX_MODEL_DIMENSION,
    MAX_PARAMETERS_BILLIONS,
    SERVING_CONTAINER,
    serving_argv,
)

from .args import is_shell_script
from .gpu import GPU_PRODUCT_LABELS, UnknownGpuError, gpu_from_label
from .lora import AdapterFact
from .presets import LOCAL_KINDS, ModelArchitecture, UnknownPresetError, get_preset


class ManifestError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class MetricFact:
    name: str
    template: str | None  # a built-in template name, e.g. ttft-p99
    query: str | None  # a user's PromQL (a business metric, typically)


@dataclass(frozen=True)
class ReleaseFacts:
    container_args: tuple[str, ...]  # the vLLM container's command + args, $(VAR) expanded
    container_env: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    unresolved_variables: tuple[str, ...] = ()  # $(VAR) in the args known only at run time
    container_path: str = "spec.template.spec.containers[0]"
    profile: str = "latency"  # the API's default
    model: ModelArchitecture | None = None  # from spec.model; None: not given
    gpu_memory_gib: float | None = None  # spec.model.gpuMemoryGiB, else from the GPU label
    gpu_product: str | None = None  # the GPU product label the pods are pinned to, if any
    stable_container_args: tuple[str, ...] | None = None  # None: the stable release is unknown
    metrics: tuple[MetricFact, ...] = ()
    slo_present: bool = False
    evaluation_present: bool = False
    adapters: tuple[AdapterFact, ...] = ()  # spec.adapters: served at run time (docs/adapters.md)
    name: str | None = None
    namespace: str | None = None


def is_inference_rollout(document: object) -> bool:
    return (isinstance(document, Mapping) and document.get("kind") == KIND
            and document.get("apiVersion") == API_VERSION)


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(field, f"must be an object, got {type(value).__name__}")
    return value


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(field, f"must be a list, got {type(value).__name__}")
    return value


# --- spec.model -----------------------------------------------------------------------------------

_EXPLICIT_FIELDS = {"parametersBillions": "parameters", "layers": "layers",
                    "kvHeads": "kv_heads", "headDim": "head_dim"}
_OPTIONAL_INTEGERS = {"attentionHeads": "attention_heads", "kvLoraRank": "kv_lora_rank",
                      "experts": "experts", "activeExperts": "active_experts"}


def _positive(value: object, field: str, integer: bool, minimum: float = 0,
              maximum: float = MAX_MODEL_DIMENSION) -> float:
    """A finite number above ``minimum`` (at or above it for integers) and at most ``maximum``
    (the API's bounds); ManifestError naming the field otherwise (.inf, .nan, a string, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < minimum or (value == minimum and not integer) \
            or (integer and value != int(value)) or value > maximum:
        kind = ("a positive integer" if minimum == 1 else f"an integer ≥ {minimum:g}") if integer \
            else "a finite positive number"
        raise ManifestError(field, f"must be {kind} up to {maximum:,}, got {value!r}")
    return float(value)


def _local_attention(value: object) -> dict[str, Any]:
    fields = _mapping(value, "spec.model.localAttention")
    if not fields:
        return {}
    kind = fields.get("kind")
    if kind not in LOCAL_KINDS:
        raise ManifestError("spec.model.localAttention.kind",
                            f"must be one of {', '.join(LOCAL_KINDS)}, got {kind!r}")
    return {"local_kind": kind,
            "local_layers": int(_positive(fields.get("layers"), "spec.model.localAttention.layers",
                                          True, 1)),
            "local_window": int(_positive(fields.get("window"), "spec.model.localAttention.window",
                                          True, 1))}


def _explicit_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    explicit: dict[str, Any] = {}
    for key, attribute in _EXPLICIT_FIELDS.items():
        if fields.get(key) is not None:
            is_count = key != "parametersBillions"
            value = _positive(fields[key], f"spec.model.{key}", is_count, 1 if is_count else 0,
                              MAX_MODEL_DIMENSION if is_count else MAX_PARAMETERS_BILLIONS)
            explicit[attribute] = round(value * 1e9) if key == "parametersBillions" else int(value)
    for key, attribute in _OPTIONAL_INTEGERS.items():
        if fields.get(key) is not None:
            explicit[attribute] = int(_positive(fields[key], f"spec.model.{key}", True, 1))
    if fields.get("qkRopeHeadDim") is not None:
        explicit["qk_rope_head_dim"] = int(_positive(fields["qkRopeHeadDim"],
                                                     "spec.model.qkRopeHeadDim", True))
    explicit.update(_local_attention(fields.get("localAttention")))
    if fields.get("dtype") is not None:
        explicit["dtype"] = str(fields["dtype"]).lower()
    return explicit


def model_from_spec(spec_model: object) -> tuple[ModelArchitecture | None, float | None]:
    """(architecture, GPU GiB) from ``spec.model``: a dict, or the API's pydantic ModelSpec.

    A preset with explicit fields beside it takes those as overrides (e.g. ``dtype: int4`` for a
    quantized checkpoint); without a preset, all of parametersBillions, layers, kvHeads and headDim
    are required, and the others (attention heads, MLA, local attention, experts) describe the
    rest of an architecture."""
    if spec_model is None:
        return None, None
    if hasattr(spec_model, "model_dump"):
        spec_model = spec_model.model_dump(by_alias=True, exclude_none=True)
    fields = _mapping(spec_model, "spec.model")
    gpu_gib = fields.get("gpuMemoryGiB")
    gpu_memory = _positive(gpu_gib, "spec.model.gpuMemoryGiB", False, 0, MAX_GPU_MEMORY_GIB) \
        if gpu_gib is not None else None
    explicit = _explicit_fields(fields)

    preset_name = fields.get("preset")
    if preset_name is not None:
        try:
            preset = get_preset(str(preset_name))
        except UnknownPresetError as e:
            raise ManifestError("spec.model.preset", str(e)) from None
        try:
            return preset.with_overrides(**explicit), gpu_memory
        except ValueError as e:
            raise ManifestError("spec.model", str(e)) from None
    missing = [key for key, attribute in _EXPLICIT_FIELDS.items() if attribute not in explicit]
    if len(missing) == len(_EXPLICIT_FIELDS) and len(explicit) == 0:
        return None, gpu_memory
    if missing:
        raise ManifestError(
            "spec.model", f"set a preset or all of {', '.join(_EXPLICIT_FIELDS)} "
            f"(missing {', '.join(missing)})")
    try:
        return ModelArchitecture(name="custom", **explicit), gpu_memory
    except ValueError as e:
        raise ManifestError("spec.model", str(e)) from None


# --- the pod template -----------------------------------------------------------------------------


def serving_container(pod_spec: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
    """(index, container): the one named ``vllm``, else the first."""
    containers = _list(pod_spec.get("containers"), "spec.template.spec.containers")
    if not containers:
        raise ManifestError("spec.template.spec.containers", "the vLLM container is missing")
    for index, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == SERVING_CONTAINER:
            return index, container
    return 0, _mapping(containers[0], "spec.template.spec.containers[0]")


def container_argv(container: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The serving container's command line by the API's rule (``serving_argv``), with
    Kubernetes' ``$(VAR)`` references expanded from the container's env."""
    _list(container.get("command"), f"{path}.command")
    _list(container.get("args"), f"{path}.args")
    env = container_env(container, path)
    words = [expand_references(word, env) for word in serving_argv(dict(container))]
    for i in range(len(words) - 2):
        if is_shell_script(words[i], words[i + 1]):
            words[i + 2] = _SHELL_VARIABLE.sub(
                lambda m: env.get(m.group(1) or m.group(2)) or m.group(0), words[i + 2])
    return tuple(words)


# $VAR and ${VAR} in a sh -c script: the shell expands them from the container's env (and the
# image's, which offline is unknown: such a variable is left as written and reported unresolved).
_SHELL_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _unresolved(words: list[str], env: Mapping[str, str | None]) -> tuple[str, ...]:
    """Variables in the command line whose values exist only at run time."""
    names = [name for word in words for name in unknown_references(word, env)]
    for i in range(len(words) - 2):
        if is_shell_script(words[i], words[i + 1]):
            names += [m.group(1) or m.group(2) for m in _SHELL_VARIABLE.finditer(words[i + 2])
                      if env.get(m.group(1) or m.group(2)) is None]
    return tuple(names)


def container_env(container: Mapping[str, Any], path: str) -> dict[str, str | None]:
    """The container's env: name → literal value, or None when it comes from elsewhere
    (``valueFrom``, or any name at all when ``envFrom`` is set: key ``*``)."""
    env: dict[str, str | None] = {}
    for i, entry in enumerate(_list(container.get("env"), f"{path}.env")):
        item = _mapping(entry, f"{path}.env[{i}]")
        if isinstance(item.get("name"), str):
            value = item.get("value")
            env[item["name"]] = None if "valueFrom" in item else expand_references(
                "" if value is None else str(value), env)
    if _list(container.get("envFrom"), f"{path}.envFrom"):
        env.setdefault(ANY_VARIABLE, None)
    return env


ANY_VARIABLE = "*"
# Kubernetes' dependent environment variables: $(VAR) is replaced by VAR's value when VAR is
# defined (earlier, for env); $$ is an escaped $; an undefined reference stays as written.
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_references(word: str, env: Mapping[str, str | None]) -> str:
    """``$(VAR)`` → its literal value.  A variable whose value is not known offline is left as
    ``$(VAR)`` (see :func:`unknown_references`)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        value = env.get(name)
        return match.group(0) if value is None else value
    return _REFERENCE.sub(replace, word)


def unknown_references(text: str, env: Mapping[str, str | None]) -> list[str]:
    """The ``$(VAR)`` left in ``text`` whose value exists at run time but not offline
    (``valueFrom``, ``envFrom``).  Others are undefined, and Kubernetes passes them as written."""
    return [name for name in _REFERENCE.findall(text) if name and (
        env[name] is None if name in env else ANY_VARIABLE in env)]


def _gpu_labels(pod_spec: Mapping[str, Any]) -> list[str]:
    """GPU product label values the pods are pinned to (nodeSelector or required affinity)."""
    selector = _mapping(pod_spec.get("nodeSelector"), "spec.template.spec.nodeSelector")
    labels = [str(selector[key]) for key in GPU_PRODUCT_LABELS if key in selector]
    path = "spec.template.spec.affinity.nodeAffinity"
    affinity = _mapping(pod_spec.get("affinity"), "spec.template.spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), path)
    path += ".requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), path)
    terms = _list(required.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    for i, term in enumerate(terms):
        term_path = f"{path}.nodeSelectorTerms[{i}]"
        for expression in _list(_mapping(term, term_path).get("matchExpressions"),
                                f"{term_path}.matchExpressions"):
            if isinstance(expression, Mapping) and expression.get("key") in GPU_PRODUCT_LABELS \
                    and expression.get("operator") == "In":
                labels += [str(v) for v in expression.get("values") or []]
    return labels


def _smallest_gpu(labels: list[str]) -> tuple[float | None, str | None]:
    """The GPU with the least memory among those the pods may land on (the budget must hold on
    each), or (None, first label) when none is known."""
    known = []
    for label in labels:
        try:
            known.append(gpu_from_label(label))
        except UnknownGpuError:
            continue
    if not known:
        return None, (labels[0] if labels else None)
    smallest = min(known, key=lambda g: g.memory_gib)
    return smallest.memory_gib, smallest.product


# --- the whole manifest ---------------------------------------------------------------------------


def _metrics(analysis: Mapping[str, Any]) -> tuple[MetricFact, ...]:
    facts = []
    for i, metric in enumerate(_list(analysis.get("metrics"), "spec.analysis.metrics")):
        entry = _mapping(metric, f"spec.analysis.metrics[{i}]")
        template, query = entry.get("template"), entry.get("query")
        facts.append(MetricFact(
            name=str(entry.get("name", f"metrics[{i}]")),
            template=str(template) if template is not None else None,
            query=str(query) if query is not None else None,
        ))
    return tuple(facts)


def _adapters(spec: Mapping[str, Any]) -> tuple[AdapterFact, ...]:
    facts = []
    for i, adapter in enumerate(_list(spec.get("adapters"), "spec.adapters")):
        entry = _mapping(adapter, f"spec.adapters[{i}]")
        base = entry.get("baseModel")
        facts.append(AdapterFact(str(entry.get("name", f"adapters[{i}]")),
                                 str(base) if base is not None else None))
    return tuple(facts)


def facts_from_manifest(
    manifest: Mapping[str, Any], stable_container_args: tuple[str, ...] | None = None
) -> ReleaseFacts:
    """The lint inputs of an InferenceRollout manifest (``stable_container_args``: the vLLM
    command line of the revision serving now, when known, for the quantization gate)."""
    spec = _mapping(manifest.get("spec"), "spec")
    if not spec:
        raise ManifestError("spec", "an InferenceRollout needs a spec")
    template = _mapping(spec.get("template"), "spec.template")
    pod_spec = _mapping(template.get("spec"), "spec.template.spec")
    index, container = serving_container(pod_spec)
    container_path = f"spec.template.spec.containers[{index}]"
    model, explicit_gpu = model_from_spec(spec.get("model"))
    label_gpu, product = _smallest_gpu(_gpu_labels(pod_spec))
    analysis = _mapping(spec.get("analysis"), "spec.analysis")
    slo = _mapping(analysis.get("slo"), "spec.analysis.slo")
    metadata = _mapping(manifest.get("metadata"), "metadata")
    env = container_env(container, container_path)
    return ReleaseFacts(
        container_args=container_argv(container, container_path),
        container_env=env,
        unresolved_variables=_unresolved(serving_argv(dict(container)), env),
        container_path=container_path,
        profile=str(spec.get("profile") or "latency"),
        model=model,
        gpu_memory_gib=explicit_gpu if explicit_gpu is not None else label_gpu,
        gpu_product=product,
        stable_container_args=stable_container_args,
        metrics=_metrics(analysis),
        slo_present=any(slo.get(k) for k in ("ttftP99", "itlP99", "e2eP99")),
        evaluation_present=bool(spec.get("evaluation")),
        adapters=_adapters(spec),
        name=str(metadata["name"]) if metadata.get("name") else None,
        namespace=str(metadata["namespace"]) if metadata.get("namespace") else None,
    )
