"""The v1alpha1 API: spec and status models, the CRD generated from them, reasons and messages."""

GROUP = "rollouts.inference.dev"
VERSION = "v1alpha1"
KIND = "InferenceRollout"
PLURAL = "inferencerollouts"
SINGULAR = "inferencerollout"
SHORT_NAMES = ("ir",)
API_VERSION = f"{GROUP}/{VERSION}"

#: Revisions are named ``<rollout>-<hash>`` (Deployment, Service, InferencePool): ten hex
#: characters of the pod template's hash (core/revision.py).
HASH_LENGTH = 10
#: A Service name is a DNS label (63); Deployment pods append ``-<rs-hash>-<suffix>`` (17).
MAX_ROLLOUT_NAME = 63 - HASH_LENGTH - 1 - 17
#: A Service name must be a DNS-1035 label (a letter first), so the rollout's name must start one.
DNS_1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: Names of objects the spec refers to (Secrets, ConfigMaps, HTTPRoutes): what Kubernetes accepts
#: as an object name, so nothing else (``..``, ``/``, ``%``) can reach an API path (paths.py).
DNS_1123_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A revision as the status records it: the template hash's hex characters, nothing else.
REVISION_PATTERN = f"^[0-9a-f]{{{HASH_LENGTH}}}$"
#: A moment as the status records it (RFC 3339, UTC as the operator writes it: ``…T12:00:00.000Z``,
#: or with an offset): a status field that holds anything else cannot parse (Valid=False).
TIMESTAMP_PATTERN = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
                     r"(Z|[+-][0-9]{2}:[0-9]{2})$")

#: Labels put on every object the operator creates, so PromQL and kubectl can select a revision.
LABEL_ROLLOUT = f"{GROUP}/rollout"
LABEL_REVISION = f"{GROUP}/revision"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: An adapter release's pods (docs/adapters.md): the set of adapter versions a pod serves (a set
#: id, which a serving version's Service selects), or ``moving`` / ``pending`` (no Service
#: selects it: it is changing, or new and not yet loaded).  Set ids are hex, so never these words.
LABEL_ADAPTER_SET = f"{GROUP}/adapter-set"
ADAPTER_SET_MOVING, ADAPTER_SET_PENDING = "moving", "pending"
#: When the pod's adapter-set label last changed, and the container start its set was read on.
ANN_ADAPTER_SET_MOVED_AT = f"{GROUP}/adapter-set-moved-at"
ANN_ADAPTER_SET_VERIFIED_START = f"{GROUP}/adapter-set-verified-start"
#: On a serving version's Service (a rollout with adapters): the template hash of the Deployment
#: whose pods it selects, and the pods the decision last asked it to have (docs/adapters.md).
ANN_SERVING_TEMPLATE = f"{GROUP}/template"
ANN_SERVING_PODS = f"{GROUP}/adapter-pods"
#: ... and its adapters (JSON: name -> source), whose hash is its set id: the spec holds only
#: the newest set, so a rollback reads the stable's from here.
ANN_SERVING_ADAPTERS = f"{GROUP}/adapters"
#: The last drill's result, written on the rollout by ``kubectl inference-rollout drill`` when it
#: ends (JSON: id, kind, verdict, summary); the operator records it as an Event and notifies
#: (the CLI sends nothing itself: it is a client of the API, not a notifier).
ANN_LAST_DRILL = f"{GROUP}/last-drill"
DRILL_ID_PATTERN = r"^[0-9a-f]{32}$"
MANAGED_BY = "inference-rollout"

#: The Gateway API Inference Extension's InferencePool (one per revision with backendKind
#: InferencePool).
POOL_GROUP = "inference.networking.k8s.io"
POOL_VERSION = "v1"
POOL_PLURAL = "inferencepools"
