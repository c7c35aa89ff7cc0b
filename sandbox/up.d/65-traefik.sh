#!/usr/bin/env bash
# up.d hook: start Traefik, a conformant Gateway API implementation, with its Kubernetes Gateway
# provider against the sandbox API server (client certificate CN=traefik, sandbox/traefik/rbac.yaml),
# its HTTP entry point on GATEWAY_URL = TRAEFIK_URL (127.0.0.1:18081) and its metrics and ping on
# 127.0.0.1:18082; then the GatewayClass `traefik` and the Gateway gateway-system/traefik, and wait
# until Traefik has accepted and programmed it. Routes through it reach pods on their own IPs
# (docs/sandbox.md, "Traefik" and "Pods with addresses").
# Idempotent: a running Traefik is left alone. Log: .sandbox/logs/traefik.log; PID: pids/traefik.pid.
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

kubectl_() { "$(cached_bin kubectl "${KUBERNETES_VERSION}")" --kubeconfig "${IR_STATE}/kubeconfig" "$@"; }
traefik="$(cached_bin "${TRAEFIK_BIN_NAME}" "${TRAEFIK_VERSION}")"
[[ -x "${traefik}" ]] || die "traefik not built: ${traefik} (bash sandbox/build.sh traefik)"

if pid="$(sandbox_pid "${IR_PIDS}/traefik.pid")"; then
  log traefik "already running (pid ${pid})"
else
  for port in "${TRAEFIK_PORT}" "${TRAEFIK_METRICS_PORT}"; do
    ! port_open "${port}" || die "traefik: port ${IR_HOST}:${port} is taken; free it or set IR_TRAEFIK_PORT / IR_TRAEFIK_METRICS_PORT"
  done
  # Flags (Traefik's static configuration): no version check or usage report (no internet here);
  # services labelled in the metrics, so a canary's backend has series of its own; its API (the
  # running configuration: a weight Traefik serves, not one it was told) on the loopback metrics port.
  # An access log of the answers 500-599 only (a line per failed request, JSON, naming the backend
  # address Traefik chose): what a test attaches when a burst fails (irsandbox.gateway_log).
  start_process traefik env KUBECONFIG="${IR_STATE}/kubeconfigs/traefik.kubeconfig" "${traefik}" \
    --global.checkNewVersion=false --global.sendAnonymousUsage=false \
    --entryPoints.web.address="${IR_HOST}:${TRAEFIK_PORT}" \
    --entryPoints.traefik.address="${IR_HOST}:${TRAEFIK_METRICS_PORT}" \
    --ping=true --ping.entryPoint=traefik --api=true --api.insecure=true --api.dashboard=false \
    --metrics.prometheus=true --metrics.prometheus.entryPoint=traefik \
    --metrics.prometheus.addServicesLabels=true --metrics.prometheus.addRoutersLabels=true \
    --providers.kubernetesgateway=true \
    --providers.kubernetesgateway.statusAddress.ip="${IR_HOST}" \
    --providers.kubernetesgateway.throttleDuration=0s \
    --accesslog=true --accesslog.format=json --accesslog.filters.statuscodes=500-599 \
    --accesslog.filepath="${IR_LOGS}/traefik-access.log" \
    --log.level="${IR_TRAEFIK_LOG_LEVEL:-INFO}"
  wait_for "traefik ping on ${IR_HOST}:${TRAEFIK_METRICS_PORT}" 60 "${IR_LOGS}/traefik.log" \
    curl -sf --max-time 1 "http://${IR_HOST}:${TRAEFIK_METRICS_PORT}/ping"
fi

sed "s/TRAEFIK_PORT/${TRAEFIK_PORT}/" "${IR_SANDBOX_DIR}/traefik/gateway.yaml.tmpl" |
  kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox -f - >>"${IR_LOGS}/apply.log" 2>&1 ||
  die "could not apply the Traefik Gateway (see ${IR_LOGS}/apply.log)"
wait_for "Gateway gateway-system/traefik Programmed by Traefik" 60 "${IR_LOGS}/traefik.log" \
  kubectl_ wait --for condition=Programmed --timeout 5s -n gateway-system gateway/traefik
log traefik "running (pid $(sandbox_pid "${IR_PIDS}/traefik.pid")) on http://${IR_HOST}:${TRAEFIK_PORT}; Gateway gateway-system/traefik programmed"
