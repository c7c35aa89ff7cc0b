#!/usr/bin/env bash
# A kind cluster with InferenceRollout and everything a release needs, for users with Docker:
#   1. the cluster (kind-config.yaml)            5. the operator image, built and loaded
#   2. Gateway API CRDs, standard channel        6. the chart (charts/inference-rollout)
#   3. Envoy Gateway (helm) + a Gateway          7. an example rollout on llm-d-inference-sim
#   4. Prometheus (deploy/kind/prometheus.yaml)  8. steady load through the gateway
# Idempotent: run it again to converge. Needs docker, kind, kubectl, helm and network access.
# Versions: sandbox/versions.env (Gateway API, simulator), ENVOY_GATEWAY_VERSION below.
# See docs/kind.md for what to do next, and for which parts were tested where.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# shellcheck source=sandbox/versions.env disable=SC1091  # followed with `shellcheck -x`
source sandbox/versions.env

CLUSTER="${KIND_CLUSTER:-inference-rollout}"
ENVOY_GATEWAY_VERSION="${ENVOY_GATEWAY_VERSION:-v1.8.2}"
APP_VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/inference-rollout/Chart.yaml)"
IMAGE_REPO="${IMAGE_REPO:-inference-rollout}"
IMAGE_TAG="${IMAGE_TAG:-${APP_VERSION}}"
OPERATOR_NS=inference-rollout-system
KUBECTL=(kubectl --context "kind-${CLUSTER}")
HELM=(helm --kube-context "kind-${CLUSTER}")

step() { printf '\n=== %s\n' "$*" >&2; }
die() {
  printf 'ERROR: %s\n' "$*" >&2
  exit 1
}

for tool in docker kind kubectl helm; do
  command -v "${tool}" >/dev/null || die "${tool} is not installed (see docs/kind.md)"
done
[[ -n "${APP_VERSION}" ]] || die "no appVersion in charts/inference-rollout/Chart.yaml"

step "1. kind cluster ${CLUSTER}"
if kind get clusters 2>/dev/null | grep -qx "${CLUSTER}"; then
  echo "cluster ${CLUSTER} exists; reusing it" >&2
else
  kind create cluster --name "${CLUSTER}" --config kind-config.yaml --wait 120s
fi

step "2. Gateway API ${GATEWAY_API_VERSION} CRDs (standard channel)"
# Server-side: the CRDs are large, and it is what the operator's tests use too.
"${KUBECTL[@]}" apply --server-side --force-conflicts -f \
  "https://github.com/kubernetes-sigs/gateway-api/releases/download/${GATEWAY_API_VERSION}/standard-install.yaml"

step "3. Envoy Gateway ${ENVOY_GATEWAY_VERSION} (honours HTTPRoute backendRef weights)"
# Its own CRDs only (the Gateway API ones are installed above, from the standard channel), then
# the controller without the chart's bundled CRDs.
"${HELM[@]}" template eg-crds oci://docker.io/envoyproxy/gateway-crds-helm \
  --version "${ENVOY_GATEWAY_VERSION}" \
  --set crds.gatewayAPI.enabled=false --set crds.envoyGateway.enabled=true |
  "${KUBECTL[@]}" apply --server-side --force-conflicts -f -
"${HELM[@]}" upgrade --install eg oci://docker.io/envoyproxy/gateway-helm \
  --version "${ENVOY_GATEWAY_VERSION}" --namespace envoy-gateway-system --create-namespace \
  --skip-crds --wait --timeout 5m
"${KUBECTL[@]}" apply --server-side -f deploy/kind/gateway.yaml
"${KUBECTL[@]}" -n serving wait gateway/inference-gateway --for=condition=Programmed --timeout=3m

step "4. Prometheus (monitoring/prometheus:9090)"
"${KUBECTL[@]}" apply --server-side -f deploy/kind/prometheus.yaml
"${KUBECTL[@]}" -n monitoring rollout status deployment/prometheus --timeout=3m

step "5. operator image ${IMAGE_REPO}:${IMAGE_TAG}"
docker build -t "${IMAGE_REPO}:${IMAGE_TAG}" .
kind load docker-image "${IMAGE_REPO}:${IMAGE_TAG}" --name "${CLUSTER}"

step "6. the chart (cluster mode) in ${OPERATOR_NS}"
"${HELM[@]}" upgrade --install inference-rollout charts/inference-rollout \
  --namespace "${OPERATOR_NS}" --create-namespace \
  --set image.repository="${IMAGE_REPO}" --set image.tag="${IMAGE_TAG}" \
  --set image.pullPolicy=Never \
  --set 'tenancy.prometheusAllow={http://prometheus.monitoring:9090}' \
  --set-string 'podAnnotations.prometheus\.io/scrape=true' \
  --set-string 'podAnnotations.prometheus\.io/port=8081' \
  --wait --timeout 3m
# helm installs the CRD only on the first install; apply it on every run so upgrades land too.
"${HELM[@]}" show crds charts/inference-rollout | "${KUBECTL[@]}" apply --server-side --force-conflicts -f -

step "7. example rollout serving/chat (llm-d-inference-sim ${LLM_D_INFERENCE_SIM_VERSION})"
"${KUBECTL[@]}" apply --server-side -f deploy/kind/rollout.yaml
"${KUBECTL[@]}" -n serving wait inferencerollout/chat --for=jsonpath='{.status.phase}'=Healthy \
  --timeout=5m

step "8. load through the gateway"
svc="$("${KUBECTL[@]}" -n envoy-gateway-system get service \
  -l gateway.envoyproxy.io/owning-gateway-name=inference-gateway,gateway.envoyproxy.io/owning-gateway-namespace=serving \
  -o jsonpath='{.items[0].metadata.name}')"
[[ -n "${svc}" ]] || die "no Envoy Service for serving/inference-gateway"
"${KUBECTL[@]}" -n serving create configmap loadgen-target \
  --from-literal=url="http://${svc}.envoy-gateway-system.svc:80" --dry-run=client -o yaml |
  "${KUBECTL[@]}" apply --server-side -f -
"${KUBECTL[@]}" apply --server-side -f deploy/kind/loadgen.yaml

cat >&2 <<DONE

Ready: serving/chat is Healthy on kind-${CLUSTER}. Next (docs/kind.md):
  kubectl --context kind-${CLUSTER} get ir -n serving -w
  kubectl --context kind-${CLUSTER} apply -f deploy/kind/rollout-v2.yaml       # promoted
  kubectl --context kind-${CLUSTER} apply -f deploy/kind/rollout-v3-slow.yaml  # rolled back
  kubectl --context kind-${CLUSTER} -n monitoring port-forward svc/prometheus 9090
Delete it all: kind delete cluster --name ${CLUSTER}
DONE
