"""The v1alpha1 API: spec and status models, the CRD generated from them, reasons and messages."""

GROUP = "rollouts.inference.dev"
VERSION = "v1alpha1"
KIND = "InferenceRollout"
PLURAL = "inferencerollouts"
SINGULAR = "inferencerollout"
SHORT_NAMES = ("ir",)
API_VERSION = f"{GROUP}/{VERSION}"

#: Labels put on every object the operator creates, so PromQL and kubectl can select a revision.
LABEL_ROLLOUT = f"{GROUP}/rollout"
LABEL_REVISION = f"{GROUP}/revision"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "inference-rollout"

#: The Gateway API Inference Extension's InferencePool (one per revision with backendKind
#: InferencePool).
POOL_GROUP = "inference.networking.k8s.io"
POOL_VERSION = "v1"
POOL_PLURAL = "inferencepools"
