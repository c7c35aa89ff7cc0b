#!/usr/bin/env bash
# up.d hook: the external-metrics API for autoscaling (docs/autoscaling.md, docs/sandbox.md).
# prometheus-adapter serves external.metrics.k8s.io/v1beta1 from the sandbox's Prometheus on
# 127.0.0.1:${METRICS_ADAPTER_PORT}; the API server reaches it through the aggregation layer (its
# front-proxy flags are in up.sh) via an ExternalName Service to 127.0.0.1, and the
# kube-controller-manager's HPA controller reads vllm_num_requests_waiting there.
# Idempotent: a running adapter is left alone.  Log: .sandbox/logs/metrics-adapter.log.
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PKI="${IR_STATE}/pki"
KC="${IR_STATE}/kubeconfigs/prometheus-adapter.kubeconfig"
ADAPTER="$(cached_bin prometheus-adapter "${PROMETHEUS_ADAPTER_VERSION}")"
if [[ ! -x "${ADAPTER}" ]]; then  # `make demo` builds only what the demo needs
  log metrics-adapter "not built, not started (autoscaling needs it: bash sandbox/build.sh prometheus_adapter; make test builds it)"
  exit 0
fi
kubectl_() { "$(cached_bin kubectl "${KUBERNETES_VERSION}")" --kubeconfig "${IR_STATE}/kubeconfig" "$@"; }

kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox \
  -f "${IR_SANDBOX_DIR}/metrics-adapter/rbac.yaml" >>"${IR_LOGS}/apply.log"

if pid="$(sandbox_pid "${IR_PIDS}/metrics-adapter.pid")"; then
  log metrics-adapter "already running (pid ${pid})"
else
  port_open "${METRICS_ADAPTER_PORT}" &&
    die "port ${METRICS_ADAPTER_PORT} is taken by another process; free it or set IR_METRICS_ADAPTER_PORT"
  start_process metrics-adapter "${ADAPTER}" \
    --secure-port "${METRICS_ADAPTER_PORT}" \
    --bind-address "${IR_HOST}" \
    --tls-cert-file "${PKI}/metrics-adapter-serving.crt" \
    --tls-private-key-file "${PKI}/metrics-adapter-serving.key" \
    --lister-kubeconfig "${KC}" \
    --authentication-kubeconfig "${KC}" \
    --authorization-kubeconfig "${KC}" \
    --prometheus-url "http://${IR_HOST}:${PROMETHEUS_PORT}" \
    --metrics-relist-interval 5s \
    --config "${IR_REPO}/examples/autoscaling/prometheus-adapter-rules.yaml" \
    --v=1
  log metrics-adapter "started (pid $(head -n1 "${IR_PIDS}/metrics-adapter.pid"))"
fi

# The aggregation layer proxies to a Service; an ExternalName one names the loopback adapter
# (there is no kube-proxy here to route a ClusterIP).
kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox -f - >>"${IR_LOGS}/apply.log" <<YAML
apiVersion: v1
kind: Service
metadata: {name: metrics-adapter, namespace: kube-system}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: ${METRICS_ADAPTER_PORT}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  service: {name: metrics-adapter, namespace: kube-system, port: ${METRICS_ADAPTER_PORT}}
  caBundle: $(base64 -w0 "${PKI}/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
YAML
wait_for "APIService v1beta1.external.metrics.k8s.io Available" 90 "${IR_LOGS}/metrics-adapter.log" \
  kubectl_ wait --for condition=Available --timeout 5s apiservice/v1beta1.external.metrics.k8s.io
