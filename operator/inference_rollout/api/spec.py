"""The InferenceRollout spec (``rollouts.inference.dev/v1alpha1``) as pydantic models.

These models are the single source of truth: the CRD's OpenAPI schema is generated from them
(:mod:`inference_rollout.api.crd`), the operator parses every object through them, and the CLI's
offline lint reads manifests with them.  Rules the API server can check (ranges, patterns, CEL)
live in the CRD too, so ``kubectl apply`` rejects a bad manifest before it is stored; the rules
it cannot express (the pod template's shape) are checked here and reported as ``Valid=False``.

Field names are camelCase on the wire (Kubernetes convention) and snake_case in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from . import DNS_1123_LABEL, DNS_1123_SUBDOMAIN
from .duration import DURATION_PATTERN, MAX_DURATION, MAX_LENGTH, cel_rule, parse_duration


def _valid_duration(text: str) -> str:
    parse_duration(text)
    return text


DURATION_MAX_LENGTH = MAX_LENGTH

#: The name of an object the spec refers to in the rollout's namespace (a Secret, a ConfigMap, an
#: HTTPRoute, a Gateway): what Kubernetes accepts as a name, and so never ``..``, ``/`` or ``%``,
#: which would turn it into another path (inference_rollout.paths builds the paths).
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_1123_SUBDOMAIN)]
#: A key of a Secret's or ConfigMap's data (what Kubernetes accepts there).
DataKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
#: A namespace's name (DNS-1123 label).
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_1123_LABEL)]
#: A Service name that may hold ``{{pool}}`` (EndpointPickerRef): a DNS label once it is replaced.
SERVICE_TEMPLATE_PATTERN = (r"^([a-z0-9]|\{\{pool\}\})(([-a-z0-9]|\{\{pool\}\})*"
                            r"([a-z0-9]|\{\{pool\}\}))?$")

#: The JSON schema is given explicitly: pydantic cannot show a pattern that runs after a validator,
#: and the CRD needs it (and a length bound, which keeps the CEL cost estimates small).  The CEL
#: rule is the maximum (:data:`~.duration.MAX_DURATION`), which a pattern cannot express.
Duration = Annotated[
    str,
    AfterValidator(_valid_duration),
    Field(pattern=DURATION_PATTERN, max_length=DURATION_MAX_LENGTH),
    WithJsonSchema(
        {"type": "string", "pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH,
         "x-kubernetes-validations": [{"rule": cel_rule("self", "<=", MAX_DURATION),
                                       "message": f"must be at most {MAX_DURATION}"}]}
    ),
]

#: Per-field maximums of durations (also CEL rules in the CRD, see api/crd.py): each bounds how
#: long one reconcile may wait on a server a tenant chose, or how rarely a release is watched.
MAX_PROMETHEUS_TIMEOUT = "1m"
MAX_EVALUATION_TIMEOUT = "5m"
MAX_PROBE_TIMEOUT = "5m"
MAX_ANALYSIS_INTERVAL = "24h"
MAX_SAMPLE_SIZE = 1000
#: Kubernetes counts (replicas, ports) are int32; a larger value is stored and then every create
#: of the Deployment fails.
INT32_MAX = 2**31 - 1


def at_most(field: str, text: str, maximum: str) -> None:
    """Raise naming ``field`` when the duration ``text`` is longer than ``maximum``."""
    if parse_duration(text) > parse_duration(maximum):
        raise ValueError(f"{field}: {text} is longer than the maximum {maximum}")

#: List bounds (also in the CRD, where they keep the CEL rules within the API server's cost budget).
MAX_STEPS = 20
MAX_METRICS = 32
MAX_PARENT_REFS = 32
MAX_HOSTNAMES = 16
MAX_ADAPTERS = 8
#: The longest adapter source (vLLM's lora_path) the spec accepts.
MAX_ADAPTER_SOURCE = 1024
#: An adapter's name is the model name clients send (vLLM's ``lora_name``): letters, digits and
#: ``._:/-``, starting and ending with a letter or digit (no spaces, quotes or control bytes that
#: would be ambiguous in a JSON request, a PromQL label or a log line).
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._:/-]{0,126}[A-Za-z0-9])?$"


class Model(BaseModel):
    """Base: camelCase aliases, unknown fields rejected (a typo must not be silently ignored).

    Durations are parsed once: each model exposes its durations in seconds as cached properties
    (``interval_seconds``...), computed on first use and kept with the frozen model.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy without cached properties: ``update`` may change the fields they derive from."""
        copy = super().model_copy(update=update, deep=deep)
        for key in [k for k in copy.__dict__ if k not in type(copy).model_fields]:
            del copy.__dict__[key]
        return copy


# --- the serving pods -------------------------------------------------------------------------

SERVING_CONTAINER = "vllm"
SERVING_PORT_NAME = "http"


class PodTemplate(Model):
    """A PodTemplateSpec of the vLLM server.  Any change to it is a new release (revision).

    Kept as free-form ``metadata``/``spec`` objects (the API server validates pod specs when the
    operator creates the Deployment); this model checks only what the operator relies on.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any]

    @model_validator(mode="after")
    def _ports_in_range(self) -> PodTemplate:
        containers = self.spec.get("containers")
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            ports = c.get("ports") if isinstance(c, dict) else None
            for j, port in enumerate(ports if isinstance(ports, list) else []):
                number = port.get("containerPort") if isinstance(port, dict) else None
                if isinstance(number, int) and not isinstance(number, bool) \
                        and not 1 <= number <= 65535:
                    raise ValueError(
                        f"spec.template.spec.containers[{i}].ports[{j}].containerPort: {number} "
                        "is not a port number (1-65535)")
        return self

    @model_validator(mode="after")
    def _has_serving_container(self) -> PodTemplate:
        containers = self.spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError(
                "spec.template.spec.containers: at least one container is required "
                f"(name the vLLM server container {SERVING_CONTAINER!r})"
            )
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name") or not c.get("image"):
                raise ValueError(
                    f"spec.template.spec.containers[{i}]: every container needs a name and an image"
                )
        self.serving_port()  # raises with a clear message when there is none
        return self

    def serving_container(self) -> dict[str, Any]:
        """The container named ``vllm``, else the first one."""
        containers: list[dict[str, Any]] = self.spec["containers"]
        for c in containers:
            if c.get("name") == SERVING_CONTAINER:
                return c
        return containers[0]

    def serving_port(self) -> int:
        """The port named ``http`` on the serving container, else its only port."""
        c = self.serving_container()
        declared = c.get("ports") or []
        if not isinstance(declared, list):  # the schema keeps the template as written
            raise ValueError(
                f"spec.template.spec.containers[name={c.get('name')}].ports: must be a list of "
                f"ports, got {declared!r:.40}")
        for i, port in enumerate(declared):
            number = port.get("containerPort") if isinstance(port, dict) else None
            if isinstance(port, dict) and "containerPort" in port and (
                    isinstance(number, bool) or not isinstance(number, int)):
                raise ValueError(
                    f"spec.template.spec.containers[name={c.get('name')}].ports[{i}]"
                    f".containerPort: must be an integer port number, got {number!r} (an empty "
                    "Helm value renders as null)")
        ports = [p for p in declared if isinstance(p, dict) and "containerPort" in p]
        named = [p for p in ports if p.get("name") == SERVING_PORT_NAME]
        if named:
            return int(named[0]["containerPort"])
        if len(ports) == 1:
            return int(ports[0]["containerPort"])
        raise ValueError(
            f"spec.template.spec.containers[name={c.get('name')}].ports: declare the serving port, "
            f"e.g. ports: [{{name: {SERVING_PORT_NAME}, containerPort: 8000}}]"
        )

    def serving_args(self) -> list[str]:
        return serving_argv(self.serving_container())


def serving_argv(container: dict[str, Any]) -> list[str]:
    """The serving container's command line: ``command`` + ``args``, the executable included (a
    ``sh -c "vllm serve ..."`` wrapper is read through it), as strings; YAML's ``true`` as vLLM
    spells it.  The one rule for the operator, the evaluation gate and the budget."""
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    return [str(w).lower() if isinstance(w, bool) else str(w) for w in words]


# --- model architecture, for the memory budget (Principle 2) -----------------------------------

DType = Literal["float32", "float16", "bfloat16", "fp8", "int8", "int4", "mxfp4", "nvfp4"]
#: Bounds that keep the budget's arithmetic finite (and reject .inf, which the CRD's number type
#: would otherwise store): no GPU has a TiB, no model 100 T parameters.
MAX_GPU_MEMORY_GIB = 1024
MAX_PARAMETERS_BILLIONS = 100_000
MAX_MODEL_DIMENSION = 1 << 24  # layers, heads, head/latent sizes, experts, windows


def _dimension(description: str | None = None, minimum: int = 1) -> Any:
    return Field(None, ge=minimum, le=MAX_MODEL_DIMENSION, description=description)


class LocalAttentionSpec(Model):
    """Layers that attend to recent tokens only: ``slidingWindow`` (Gemma 2/3, gpt-oss:
    ``sliding_window``) or ``chunked`` (Llama 4: ``attention_chunk_size``).  The other layers
    attend to the whole sequence."""

    kind: Literal["slidingWindow", "chunked"]
    layers: int = Field(ge=1, le=MAX_MODEL_DIMENSION, description="How many layers are local.")
    window: int = Field(ge=1, le=MAX_MODEL_DIMENSION, description="Window or chunk, tokens.")


class ModelSpec(Model):
    """Architecture of the served model: a known preset or explicit numbers."""

    preset: str | None = Field(None, description="A preset name, e.g. llama-3.1-8b.")
    parameters_billions: float | None = Field(
        None, gt=0, le=MAX_PARAMETERS_BILLIONS, allow_inf_nan=False,
        description="Parameter count, billions (MoE: every expert).")
    layers: int | None = _dimension()
    kv_heads: int | None = _dimension("Key/value heads (GQA-aware).")
    head_dim: int | None = _dimension()
    dtype: DType | None = Field(None, description="Weight dtype before quantization.")
    gpu_memory_gi_b: float | None = Field(
        None, alias="gpuMemoryGiB", gt=0, le=MAX_GPU_MEMORY_GIB, allow_inf_nan=False,
        description="Memory of one GPU, GiB (else node label)."
    )
    attention_heads: int | None = _dimension("Query heads: tensor parallelism must divide them.")
    kv_lora_rank: int | None = _dimension("MLA (DeepSeek): the cached latent's size.")
    qk_rope_head_dim: int | None = _dimension("MLA: the RoPE part cached beside it.", 0)
    local_attention: LocalAttentionSpec | None = None
    experts: int | None = _dimension("MoE: routed experts per layer (all in GPU memory).")
    active_experts: int | None = _dimension("MoE: experts each token runs through.")


# --- traffic ------------------------------------------------------------------------------------


class RouteRef(Model):
    name: ObjectName


class ParentRef(Model):
    name: ObjectName
    namespace: NamespaceName | None = None
    section_name: str | None = None
    group: str | None = None
    kind: str | None = None


class EndpointPickerRef(Model):
    """The endpoint picker (EPP) named by each revision's InferencePool.

    The Inference Extension's EPP serves one pool (its ``--pool-name``), so with one pool per
    revision ``name`` may contain ``{{pool}}``, replaced by the pool's name (``<name>-<hash>``).
    """

    name: str = Field(min_length=1, max_length=63, pattern=SERVICE_TEMPLATE_PATTERN,
                      description="The EPP Service; `{{pool}}` = the pool's name.")
    port: int = Field(9002, ge=1, le=65535, description="The EPP Service's port (ext-proc).")
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        "FailClose", description="What the gateway does when the EPP does not answer.")

    def for_pool(self, pool: str) -> dict[str, object]:
        """The pool's ``spec.endpointPickerRef`` (inference.networking.k8s.io/v1)."""
        return {"kind": "Service", "name": self.name.replace("{{pool}}", pool),
                "port": {"number": self.port}, "failureMode": self.failure_mode}


class GatewayAPITraffic(Model):
    """Weighted traffic through a Gateway API HTTPRoute.

    Either ``httpRouteRef`` (an existing route: the operator writes only its backend weights) or
    ``parentRefs`` (the operator creates and owns the route, so nothing in git drifts).
    """

    http_route_ref: RouteRef | None = Field(None, alias="httpRouteRef")
    parent_refs: list[ParentRef] | None = Field(None, max_length=MAX_PARENT_REFS)
    hostnames: list[str] = Field(default_factory=list, max_length=MAX_HOSTNAMES)
    backend_kind: Literal["Service", "InferencePool"] = "Service"
    endpoint_picker_ref: EndpointPickerRef | None = Field(
        None, alias="endpointPickerRef",
        description="With backendKind InferencePool: the EPP each revision's pool names.")
    route_status: Literal["IfReported", "Required", "Ignored"] = Field(
        "IfReported", alias="routeStatus",
        description="When a written weight counts as applied (docs/operator.md, route status): "
        "IfReported waits for the gateway's Accepted/ResolvedRefs of the route's current "
        "generation once the gateway writes route status at all; Required always waits (the "
        "progress deadline rolls back a route never accepted); Ignored never reads it.")

    @model_validator(mode="after")
    def _one_mode(self) -> GatewayAPITraffic:
        if (self.http_route_ref is None) == (not self.parent_refs):
            raise ValueError(
                "spec.traffic.gatewayAPI: set exactly one of httpRouteRef (existing route) "
                "or parentRefs (operator-owned route)"
            )
        if self.endpoint_picker_ref is not None and self.backend_kind != "InferencePool":
            raise ValueError(
                "spec.traffic.gatewayAPI.endpointPickerRef: only InferencePool backends have an "
                "endpoint picker; set backendKind: InferencePool or remove endpointPickerRef"
            )
        return self


#: An HTTP header or cookie name (RFC 9110 token; the Gateway API's HTTPHeaderName pattern).
HTTP_TOKEN = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"
MAX_TESTER_HEADERS = 8


class CookieAffinity(Model):
    """The gateway sets a cookie on the answers of the weighted split naming the revision that
    answered; requests carrying it go to that revision while the release is open."""

    name: str | None = Field(
        None, min_length=1, max_length=64, pattern=HTTP_TOKEN,
        description="The cookie's name; default `ir-<rollout name>`.")
    max_age: Duration = Field(
        "1h", description="How long a client stays on its revision (the cookie's Max-Age): "
        "as long as a conversation lasts, since a step's new weight reaches returning "
        "clients only once their cookie expires.")

    @cached_property
    def max_age_seconds(self) -> float:
        return parse_duration(self.max_age)

    def cookie_name(self, rollout: str) -> str:
        return self.name or f"ir-{rollout}"


class SessionAffinitySpec(Model):
    """Keep a client on the revision that served its first request during a release
    (docs/traffic.md, "A conversation stays on one revision")."""

    cookie: CookieAffinity


class HeaderMatch(Model):
    """One header a tester's request carries (a Gateway API HTTPHeaderMatch)."""

    name: str = Field(min_length=1, max_length=256, pattern=HTTP_TOKEN)
    value: str = Field(min_length=1, max_length=4096)
    type: Literal["Exact", "RegularExpression"] = "Exact"

    @model_validator(mode="after")
    def _regex_compiles(self) -> HeaderMatch:
        if self.type == "RegularExpression":
            import re2  # the gateways' dialect: RE2 (Gateway API, Traefik's Go regexp)
            try:
                re2.compile(self.value)
            except re2.error as e:
                raise ValueError(
                    f"spec.traffic.testers.headers: {self.value!r} is not an RE2 regular "
                    f"expression ({e}); fix it or use type: Exact") from e
        return self


class TesterRoutes(Model):
    """Requests carrying every one of ``headers`` go to the canary, from its first Ready pod
    until the release is promoted or rolled back, whatever the step's weight."""

    headers: list[HeaderMatch] = Field(min_length=1, max_length=MAX_TESTER_HEADERS)


class TrafficSpec(Model):
    gateway_api: GatewayAPITraffic = Field(alias="gatewayAPI")
    session_affinity: SessionAffinitySpec | None = None
    testers: TesterRoutes | None = None

    @property
    def matches_canary(self) -> bool:
        """Some requests are routed by header (a tester's, or a sticky session's)."""
        return self.session_affinity is not None or self.testers is not None


# --- capacity and strategy -----------------------------------------------------------------------


class CapacitySpec(Model):
    """``surge`` adds canary pods on top of stable (needs spare GPUs); ``swap`` keeps the GPU
    count at ``replicas + maxSurge`` and shrinks stable only once canary pods are Ready."""

    mode: Literal["surge", "swap"] = "surge"
    max_surge: int = Field(1, ge=0, le=INT32_MAX)

    @model_validator(mode="after")
    def _swap_needs_room(self) -> CapacitySpec:
        if self.mode == "swap" and self.max_surge < 1:
            raise ValueError(
                "spec.capacity.maxSurge: swap mode needs maxSurge >= 1 (room for the first "
                "canary pod before the stable may shrink)"
            )
        return self


class Step(Model):
    """One stage: route ``weight`` percent to the canary, then hold it for ``pause`` while the
    analysis watches.  ``manual: true`` waits for ``promote`` after the hold.  ``replicas`` sets
    the canary's pod count apart from its weight (overdrive: few pods carrying a larger share).
    ``weight: 0`` (first step only, with ``spec.traffic.testers``) is a testers' step: only the
    testers' requests reach the canary, and the analysis judges that traffic."""

    weight: int = Field(ge=0, le=100)
    pause: Duration | None = None
    manual: bool = False
    replicas: int | None = Field(None, ge=1, le=INT32_MAX)

    @cached_property
    def hold_seconds(self) -> float:
        return parse_duration(self.pause) if self.pause else 0.0


def _default_steps() -> list[Step]:
    return [Step(weight=5, pause="24h"), Step(weight=20, pause="24h"),
            Step(weight=50, pause="24h"), Step(weight=100)]


class StrategySpec(Model):
    steps: list[Step] = Field(default_factory=_default_steps, min_length=1, max_length=MAX_STEPS)
    progress_deadline: Duration = "30m"
    abort_scale_down_delay: Duration = "30s"
    scale_down_delay: Duration = Field(
        "30s", description="After promotion, how long the old stable keeps its pods."
    )

    @cached_property
    def progress_deadline_seconds(self) -> float:
        return parse_duration(self.progress_deadline)

    @cached_property
    def abort_scale_down_delay_seconds(self) -> float:
        return parse_duration(self.abort_scale_down_delay)

    @cached_property
    def scale_down_delay_seconds(self) -> float:
        return parse_duration(self.scale_down_delay)

    @model_validator(mode="after")
    def _steps_rise_to_100(self) -> StrategySpec:
        weights = [s.weight for s in self.steps]
        for i in range(1, len(weights)):
            if weights[i] <= weights[i - 1]:
                raise ValueError(
                    f"spec.strategy.steps[{i}].weight: {weights[i]} must be greater than the "
                    f"previous step's {weights[i - 1]} (weights rise strictly)"
                )
        if weights[-1] != 100:
            raise ValueError(
                f"spec.strategy.steps[{len(weights) - 1}].weight: the last step must be 100 "
                f"(it is {weights[-1]}); add a final step {{weight: 100}}"
            )
        return self


# --- analysis ---------------------------------------------------------------------------------

BUILTIN_TEMPLATES = (
    "ttft-p99", "itl-p99", "e2e-p99", "error-rate",
    "kv-cache-hit-rate", "preemptions", "kv-cache-usage", "gpu-temperature",
    "gateway-error-rate", "gateway-traffic-share", "probe-ttft-p99", "probe-error-rate",
)
TemplateName = Literal[
    "ttft-p99", "itl-p99", "e2e-p99", "error-rate",
    "kv-cache-hit-rate", "preemptions", "kv-cache-usage", "gpu-temperature",
    "gateway-error-rate", "gateway-traffic-share", "probe-ttft-p99", "probe-error-rate",
]
#: Templates measured from the operator's own probe requests (``spec.analysis.probes``), not
#: from Prometheus (docs/metrics.md, "Evidence on demand").
PROBE_TEMPLATES = frozenset({"probe-ttft-p99", "probe-error-rate"})
#: Templates read from the gateway's request counters (docs/metrics.md, "The gateway's view").
GATEWAY_TEMPLATES = frozenset({"gateway-error-rate", "gateway-traffic-share"})
#: Templates whose counts are failed/all requests (the sequential tests of an error rate).
ERROR_RATE_TEMPLATES = frozenset({"error-rate", "gateway-error-rate", "probe-error-rate"})
GatewayName = Literal["traefik", "istio", "kgateway"]


class SecretKeyRef(Model):
    name: ObjectName
    key: DataKey


#: A Prometheus base URL: http(s), then only the characters a URL may hold unescaped (RFC 3986),
#: without a query or fragment (the operator appends /api/v1/query).  No whitespace or control
#: character: an address ending in a newline crashed every reconcile in the HTTP client.
PROMETHEUS_ADDRESS_PATTERN = r"^https?://[A-Za-z0-9._~:/@!$&'()*+,;=%\[\]-]+$"


class PrometheusSpec(Model):
    address: str = Field(pattern=PROMETHEUS_ADDRESS_PATTERN, max_length=2048)
    timeout: Duration = "5s"
    scrape_interval: Duration = Field(
        "30s", description="How often Prometheus scrapes the pods; rate windows span ≥ 4 scrapes."
    )
    bearer_token_secret_ref: SecretKeyRef | None = Field(
        None, description="A Secret key holding a bearer token for Prometheus."
    )

    @cached_property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)

    @cached_property
    def scrape_interval_seconds(self) -> float:
        return parse_duration(self.scrape_interval)

    @model_validator(mode="after")
    def _clean_address_and_timeout(self) -> PrometheusSpec:
        where = "spec.analysis.prometheus.address"
        try:
            url = urlsplit(self.address)
            url.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as e:
            raise ValueError(f"{where}: {self.address!r} is not a URL: {e}") from None
        if not url.hostname:
            raise ValueError(f"{where}: {self.address!r} names no host")
        if url.username is not None or url.password is not None:
            raise ValueError(f"{where}: no credentials in the address; use bearerTokenSecretRef")
        at_most("spec.analysis.prometheus.timeout", self.timeout, MAX_PROMETHEUS_TIMEOUT)
        return self


class SloSpec(Model):
    """Service-level targets; a revision breaches when its p99 exceeds ``factor`` × target."""

    ttft_p99: Duration | None = None
    itl_p99: Duration | None = None
    # Explicit alias: the generated one would be "e2EP99" (a capital after the digit).
    e2e_p99: Duration | None = Field(None, alias="e2eP99")
    factor: float = Field(1.5, ge=1.0, description="Breach when p99 > factor × SLA.")


class MetricSpec(Model):
    """One analysis metric: a built-in ``template`` or a PromQL ``query`` with ``{{namespace}}``,
    ``{{name}}`` and ``{{revision}}`` placeholders, plus at least one threshold."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    template: TemplateName | None = None
    query: str | None = Field(None, min_length=1)
    max: float | None = None
    min: float | None = None
    max_ratio_to_stable: float | None = Field(None, gt=0)
    min_ratio_to_stable: float | None = Field(None, gt=0)
    min_samples: int | None = Field(
        None, ge=0, description="Requests the window must hold; fewer is inconclusive."
    )
    window: Duration | None = Field(
        None, description="Rate window of the Window rule; default: the interval.")
    warmup: Duration | None = Field(
        None, description="Sequential rule: ignore this long after the step's weight is reached "
        "(cold caches); evidence counts from then on.")
    gateway: GatewayName | None = Field(
        None, description="gateway-* templates: whose request counters to read "
        "(traefik by default; docs/metrics.md lists each one's metric).")

    @model_validator(mode="after")
    def _source_and_threshold(self) -> MetricSpec:
        if (self.template is None) == (self.query is None):
            raise ValueError(
                f"spec.analysis.metrics[name={self.name}]: set exactly one of template or query"
            )
        if not self.has_threshold():
            raise ValueError(
                f"spec.analysis.metrics[name={self.name}]: set a threshold "
                "(max, min, maxRatioToStable or minRatioToStable)"
            )
        if self.gateway is not None and self.template not in GATEWAY_TEMPLATES:
            raise ValueError(
                f"spec.analysis.metrics[name={self.name}].gateway: only the gateway-error-rate "
                "and gateway-traffic-share templates read a gateway; remove gateway"
            )
        if self.template == "gateway-traffic-share" and (self.is_relative() or self.max is None):
            raise ValueError(
                f"spec.analysis.metrics[name={self.name}]: gateway-traffic-share measures "
                "percentage points away from the written weight; set max (e.g. max: 2), "
                "not a ratio to stable"
            )
        return self

    def has_threshold(self) -> bool:
        return any(
            t is not None
            for t in (self.max, self.min, self.max_ratio_to_stable, self.min_ratio_to_stable)
        )

    def is_relative(self) -> bool:
        return self.max_ratio_to_stable is not None or self.min_ratio_to_stable is not None

    @cached_property
    def window_seconds(self) -> float | None:
        return parse_duration(self.window) if self.window else None

    @cached_property
    def warmup_seconds(self) -> float:
        return parse_duration(self.warmup) if self.warmup else 0.0


class ProbesSpec(Model):
    """Evidence on demand: the operator sends its own requests to the canary's Service and to
    the stable's, at the same rate, from the canary's first Ready pod until the release ends,
    and measures what a client sees (time to the first token of a streamed answer, errors,
    streams cut after their 200).  They reach no user and are bounded in rate and number."""

    rate_per_second: float = Field(
        0.5, ge=0.05, le=5, description="Probe requests per second to each of canary and stable.")
    prompt: str = Field(
        "Reply with the word OK.", min_length=1, max_length=4000,
        description="The user message every probe sends (a chat completion, streamed).")
    max_tokens: int = Field(8, ge=1, le=256, description="max_tokens of each probe.")
    max_requests: int = Field(
        2000, ge=10, le=100_000, description="Probe requests per release, both sides together; "
        "no more are sent after that.")
    timeout: Duration = Field("30s", description="A probe with no complete answer by then failed.")
    max_error_rate: float = Field(
        0.01, gt=0, lt=1, description="The implied probe-error-rate metric's max.")
    warmup_requests: int = Field(
        0, ge=0, le=1000, description="Canary probes that must have answered before the first "
        "weight is raised (warms its prefix cache and kernels; the progress deadline bounds it).")

    @cached_property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)

    @model_validator(mode="after")
    def _timeout(self) -> ProbesSpec:
        at_most("spec.analysis.probes.timeout", self.timeout, MAX_PROBE_TIMEOUT)
        return self


INCONCLUSIVE_NEEDS_LIMIT = (
    "spec.analysis.onInconclusive: Rollback acts only after inconclusiveLimit; set one, "
    "e.g. inconclusiveLimit: 2h"
)


#: The analysis measures at most this often (each look is a query per metric).
MIN_LOOK_SECONDS = 5.0


class AnalysisSpec(Model):
    interval: Duration = "1m"
    prometheus: PrometheusSpec | None = None
    slo: SloSpec | None = None
    metrics: list[MetricSpec] = Field(default_factory=list, max_length=MAX_METRICS)
    min_samples: int = Field(
        20, ge=0, description="Default request count a window must hold to be conclusive."
    )
    failure_limit: int = Field(
        0, ge=0, description="Failed measurements tolerated in a row; one more rolls back."
    )
    consecutive_error_limit: int = Field(4, ge=1)
    on_error_limit: Literal["Pause", "Abort"] = "Pause"
    verdicts: Literal["Sequential", "Window"] = Field(
        "Sequential", description="Sequential: each verdict uses all evidence since the step's "
        "weight was reached, decided by sequential tests; Window: the last window only.")
    false_rollback_rate: float = Field(
        0.01, gt=0, le=0.2, description="Sequential rule: the chance that a release whose "
        "metrics all hold is rolled back (per release, all metrics and steps together).")
    inconclusive_limit: Duration | None = Field(
        None, description="A step whose metrics are still undecided this long after its weight "
        "was reached follows onInconclusive.")
    on_inconclusive: Literal["Pause", "Rollback"] = "Pause"
    probes: ProbesSpec | None = Field(
        None, description="The operator's own requests to canary and stable, measured "
        "client-side (docs/metrics.md, \"Evidence on demand\").")

    @cached_property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @cached_property
    def look_every_seconds(self) -> float:
        """How often the analysis measures.  Under ``Window``: every ``interval``.  Under
        ``Sequential`` also after every scrape when scrapes are more frequent (new evidence can
        exist then, and looking more often costs the sequential tests no error: Ville's bound
        holds at any look; issue 30), but not more often than every 5 s."""
        if self.verdicts != "Sequential":
            return self.interval_seconds
        sources = []
        if self.prometheus is not None:
            sources.append(self.prometheus.scrape_interval_seconds)
        if self.probes is not None:  # a probe's answer is evidence the moment it is complete
            sources.append(1.0 / self.probes.rate_per_second)
        if not sources:
            return self.interval_seconds
        return min(self.interval_seconds, max(MIN_LOOK_SECONDS, min(sources)))

    @cached_property
    def inconclusive_limit_seconds(self) -> float | None:
        return parse_duration(self.inconclusive_limit) if self.inconclusive_limit else None

    @cached_property
    def effective_metrics(self) -> tuple[MetricSpec, ...]:
        """The metrics this analysis measures (see :func:`.effective.effective_metrics`)."""
        from .effective import effective_metrics  # effective builds on this module

        return tuple(effective_metrics(self))

    @model_validator(mode="after")
    def _rules(self) -> AnalysisSpec:
        if self.interval_seconds < MIN_LOOK_SECONDS:
            raise ValueError("spec.analysis.interval: must be at least 5s")
        at_most("spec.analysis.interval", self.interval, MAX_ANALYSIS_INTERVAL)
        names = [m.name for m in self.metrics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"spec.analysis.metrics: duplicate metric names {dupes}")
        if self.on_inconclusive == "Rollback" and self.inconclusive_limit is None:
            raise ValueError(INCONCLUSIVE_NEEDS_LIMIT)
        for m in self.metrics:
            if m.template in PROBE_TEMPLATES and self.probes is None:
                raise ValueError(
                    f"spec.analysis.metrics[name={m.name}]: the {m.template} template measures "
                    "the operator's probes; add spec.analysis.probes (e.g. probes: "
                    "{ratePerSecond: 0.5}) or use another template")
        from_prometheus = [m for m in self.effective_metrics if m.template not in PROBE_TEMPLATES]
        if from_prometheus and self.prometheus is None:
            raise ValueError(
                "spec.analysis.prometheus: metrics or slo need a Prometheus address, e.g. "
                "prometheus: {address: http://prometheus.monitoring:9090}"
            )
        return self


# --- business evaluation gate (Principle 11) --------------------------------------------------


class ConfigMapKeyRef(Model):
    name: ObjectName
    key: DataKey = "cases.jsonl"


class EvaluationSpec(Model):
    """Run a business evaluation set against canary and stable before the first traffic shift."""

    config_map_ref: ConfigMapKeyRef
    sample_size: int = Field(50, ge=1, le=MAX_SAMPLE_SIZE)
    concurrency: int = Field(4, ge=1, le=64)
    timeout: Duration = "30s"
    max_drop_points: float = Field(1.0, ge=0, le=100)

    @cached_property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)

    @model_validator(mode="after")
    def _bounded_timeout(self) -> EvaluationSpec:
        at_most("spec.evaluation.timeout", self.timeout, MAX_EVALUATION_TIMEOUT)
        return self


# --- notifications (docs/notifications.md) -----------------------------------------------------

NotificationEvent = Literal["Rollback", "Promotion", "Pause", "InconclusiveLimit",
                            "ProgressDeadline", "Drill"]


class SecretRef(Model):
    name: ObjectName


class NotificationsSpec(Model):
    """Where to tell people about this rollout's releases.  The endpoints live in a Secret (a
    Slack webhook URL is a credential), never in the spec."""

    secret_ref: SecretRef | None = Field(
        None, description="A Secret in the rollout's namespace with keys webhookURL and/or "
                          "slackURL; default: the namespace's notification Secret.")
    events: list[NotificationEvent] | None = Field(
        None, max_length=6, description="Only these kinds of notice (default: all).")


# --- LoRA adapters (docs/adapters.md) ------------------------------------------------------------


class AdapterSpec(Model):
    """A LoRA adapter the pods serve at run time.  Changing only adapters is an adapter release:
    no new pods, no model load (docs/adapters.md)."""

    name: str = Field(min_length=1, max_length=128, pattern=ADAPTER_NAME_PATTERN,
                      description="The model name clients ask for (vLLM's lora_name).")
    source: str = Field(min_length=1, max_length=MAX_ADAPTER_SOURCE, pattern=r"^\S+$",
                        description="What vLLM loads it from (lora_path): a path or URI.")
    base_model: str | None = Field(
        None, min_length=1, max_length=256,
        description="The base model it was trained on; a pod serving another --model is refused.")


#: Unless the operator runs with ``--adapter-releases`` (docs/adapters.md), a spec naming adapters
#: is refused whole (``Valid=False``, never half-applied): the message says what to do.
ADAPTERS_NOT_BUILT = (
    "spec.adapters: adapter releases are designed (docs/adapters.md) but not yet carried out by "
    "this operator version unless it runs with --adapter-releases (a preview); remove "
    "spec.adapters, and meanwhile release an adapter with a new template (vLLM's --lora-modules "
    "name=path)")


# --- the whole spec -------------------------------------------------------------------------------


class InferenceRolloutSpec(Model):
    profile: Literal["latency", "throughput"] = "latency"
    replicas: int = Field(1, ge=1, le=INT32_MAX)
    template: PodTemplate
    model: ModelSpec | None = None
    traffic: TrafficSpec
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)
    evaluation: EvaluationSpec | None = None
    notifications: NotificationsSpec | None = None
    # No default in the CRD: a defaulted ``adapters: []`` would be written into every stored
    # rollout, and an older operator (unknown fields refused) would then find them all invalid
    # in the minutes of an upgrade between the new CRD and the new operator.
    adapters: list[AdapterSpec] | None = Field(None, max_length=MAX_ADAPTERS)

    @model_validator(mode="after")
    def _adapters_are_releasable(self) -> InferenceRolloutSpec:
        names = [a.name for a in self.adapters or ()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"spec.adapters: the name {twice[0]} is given twice; each adapter "
                             "is one model name clients ask for")
        if self.adapters and self.replicas < 2:
            raise ValueError(
                "spec.replicas: an adapter release splits the running pods between two adapter "
                f"versions, which needs at least 2 (it is {self.replicas}); raise "
                "spec.replicas or remove spec.adapters")
        if self.adapters and self.traffic.gateway_api.backend_kind == "InferencePool":
            raise ValueError(
                "spec.adapters: an adapter release splits one revision's pods between two "
                "Services, which an InferencePool (it selects a whole revision) cannot carry; set "
                "spec.traffic.gatewayAPI.backendKind: Service or remove spec.adapters")
        return self

    @model_validator(mode="after")
    def _pod_counts_fit_int32(self) -> InferenceRolloutSpec:
        if self.replicas + self.capacity.max_surge > INT32_MAX:
            raise ValueError(
                f"spec.replicas: replicas + capacity.maxSurge must be at most {INT32_MAX} "
                "(a Deployment's replica count is an int32)")
        return self

    @model_validator(mode="after")
    def _testers_step_has_testers(self) -> InferenceRolloutSpec:
        if self.strategy.steps[0].weight == 0 and self.traffic.testers is None:
            raise ValueError(
                "spec.strategy.steps[0].weight: 0 is a testers' step, which needs "
                "spec.traffic.testers (the headers that reach the canary); add them or give the "
                "step a weight")
        return self

    @model_validator(mode="after")
    def _traffic_share_without_header_routes(self) -> InferenceRolloutSpec:
        share = [m.name for m in self.analysis.metrics if m.template == "gateway-traffic-share"]
        if share and self.traffic.matches_canary:
            raise ValueError(
                f"spec.analysis.metrics[name={share[0]}]: gateway-traffic-share compares the "
                "canary's share of requests with the weight, and spec.traffic.testers or "
                "sessionAffinity send requests past the weight (docs/traffic.md); remove one "
                "of them")
        return self

    @classmethod
    def parse(cls, body: dict[str, Any]) -> InferenceRolloutSpec:
        """Validate a ``spec`` object as it comes from the API server."""
        return cls.model_validate(body)
