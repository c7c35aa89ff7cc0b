#!/usr/bin/env bash
# Start the sandbox cluster on 127.0.0.1 (idempotent: running parts are left alone):
#   etcd, kube-apiserver (RBAC), kube-controller-manager, kube-scheduler, KWOK with 4 fake GPU
#   nodes, Gateway API + InferencePool CRDs, Prometheus; then the hooks in sandbox/up.d/*.sh.
# State (git-ignored) under <repo>/.sandbox/: kubeconfig, env, pki/, logs/, pids/, etcd/, ...
# Binaries come from the cache that sandbox/build.sh fills (run automatically when missing).
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=sandbox/podnet.sh
source "${IR_SANDBOX_DIR}/podnet.sh"

PKI="${IR_STATE}/pki"
KCFG="${IR_STATE}/kubeconfigs"
SBIN="${IR_STATE}/bin"
PROM_DIR="${IR_STATE}/prometheus"
GPU_NODES="${IR_GPU_NODES:-4}"
SERVICE_CIDR=10.96.0.0/16
SA_ISSUER=https://kubernetes.default.svc.cluster.local

# --- binaries -------------------------------------------------------------------------------------
ensure_binaries() {
  local name version incomplete=0
  while read -r name version; do
    [[ -x "$(cached_bin "${name}" "${version}")" ]] || incomplete=1
  done < <(sandbox_binaries)
  [[ -d "${IR_CACHE}/crds/gateway-api-${GATEWAY_API_VERSION}" ]] || incomplete=1
  [[ -d "${IR_CACHE}/crds/gateway-api-inference-extension-${GATEWAY_API_INFERENCE_EXTENSION_VERSION}" ]] || incomplete=1
  command -v nginx >/dev/null || incomplete=1
  if ((incomplete)); then
    log build "binaries missing from ${IR_CACHE}; running sandbox/build.sh (the first build takes long)"
    bash "${IR_SANDBOX_DIR}/build.sh"
  fi
  # .sandbox/bin: unversioned names (kubectl, helm, ...) for PATH, pointing into the cache.
  mkdir -p "${SBIN}"
  while read -r name version; do
    ln -sfn "$(cached_bin "${name}" "${version}")" "${SBIN}/${name}"
  done < <(sandbox_binaries)
  while read -r name version; do
    if [[ -x "$(cached_bin "${name}" "${version}")" ]]; then
      ln -sfn "$(cached_bin "${name}" "${version}")" "${SBIN}/${name}"
    fi
  done < <(optional_binaries)
}

# --- PKI (openssl; generated once, kept across restarts) ----------------------------------------
# gen_cert NAME SUBJECT EXTENSIONS [CA]: EC P-256 key and a cert signed by the sandbox CA (or by
# ${PKI}/CA.crt), unless both exist already.
gen_cert() {
  local name="$1" subj="$2" ext="$3" ca="${4:-ca}"
  [[ -s "${PKI}/${name}.crt" && -s "${PKI}/${name}.key" ]] && return 0
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "${PKI}/${name}.key" -subj "${subj}" -out "${PKI}/${name}.csr" 2>/dev/null
  printf '%s\n' "${ext}" >"${PKI}/${name}.ext"
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/${ca}.crt" -CAkey "${PKI}/${ca}.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "${PKI}/${name}.ext" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${PKI}/${name}.ext"
}

ensure_pki() {
  mkdir -p "${PKI}"
  chmod 700 "${PKI}"
  if [[ ! -s "${PKI}/ca.crt" ]]; then
    log pki "creating CA and certificates in ${PKI}"
    rm -f "${PKI}"/*.crt "${PKI}"/*.key
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" -days 3650 -sha256 \
      -subj "/CN=inference-rollout-sandbox-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  fi
  local client='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth'
  gen_cert kube-apiserver "/CN=kube-apiserver" 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
  if [[ ! -s "${PKI}/front-proxy-ca.crt" ]]; then
    # Aggregation layer (requestheader authentication), for API servers such as metrics-server.
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "${PKI}/front-proxy-ca.key" -out "${PKI}/front-proxy-ca.crt" -days 3650 -sha256 \
      -subj "/CN=inference-rollout-sandbox-front-proxy-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    rm -f "${PKI}/front-proxy-client.crt"
  fi
  gen_cert front-proxy-client "/CN=front-proxy-client" "${client}" front-proxy-ca
  gen_cert admin "/O=system:masters/CN=sandbox-admin" "${client}"
  gen_cert kube-controller-manager "/CN=system:kube-controller-manager" "${client}"
  gen_cert kube-scheduler "/CN=system:kube-scheduler" "${client}"
  gen_cert kwok-controller "/CN=kwok-controller" "${client}"
  # the external-metrics adapter (up.d/70-metrics-adapter.sh): a client, and a loopback server
  # named as the aggregation layer dials it (its Service name, resolved to localhost)
  gen_cert prometheus-adapter "/CN=prometheus-adapter" "${client}"
  gen_cert traefik "/CN=traefik" "${client}"  # its RBAC: sandbox/traefik/rbac.yaml
  gen_cert prometheus "/CN=prometheus" "${client}"  # pod discovery: sandbox/prometheus/rbac.yaml
  gen_cert metrics-adapter-serving "/CN=metrics-adapter" 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:metrics-adapter.kube-system.svc'
  if [[ ! -s "${PKI}/sa.key" ]]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${PKI}/sa.key" 2>/dev/null
    openssl pkey -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub"
  fi
  chmod 600 "${PKI}"/*.key
}

# write_kubeconfig FILE CERT_NAME: a kubeconfig for user CERT_NAME (certs embedded).
write_kubeconfig() {
  local file="$1" user="$2" tmp
  tmp="$(mktemp "${file}.XXXXXX")"
  cat >"${tmp}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: inference-rollout-sandbox
  cluster:
    server: https://${IR_HOST}:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 "${PKI}/ca.crt")
users:
- name: ${user}
  user:
    client-certificate-data: $(base64 -w0 "${PKI}/${user}.crt")
    client-key-data: $(base64 -w0 "${PKI}/${user}.key")
contexts:
- name: inference-rollout-sandbox
  context:
    cluster: inference-rollout-sandbox
    user: ${user}
    namespace: default
current-context: inference-rollout-sandbox
EOF
  chmod 600 "${tmp}"
  mv "${tmp}" "${file}"
}

write_configs() {
  mkdir -p "${KCFG}" "${PROM_DIR}/targets" "${PROM_DIR}/data" "${IR_LOGS}" "${IR_PIDS}"
  # pods' targets files, written by the bridge before Prometheus discovered pods itself
  { grep -lF '"__irsandbox_owner": "bridge"' "${PROM_DIR}"/targets/*.json 2>/dev/null || true; } |
    xargs -r rm -f
  write_kubeconfig "${IR_STATE}/kubeconfig" admin
  local c
  for c in kube-controller-manager kube-scheduler kwok-controller prometheus-adapter traefik \
    prometheus; do
    write_kubeconfig "${KCFG}/${c}.kubeconfig" "${c}"
  done
  cat >"${PROM_DIR}/prometheus.yml" <<EOF
# Generated by sandbox/up.sh. Reload: curl -X POST http://${IR_HOST}:${PROMETHEUS_PORT}/-/reload
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
# Pods, discovered from the API server as a PodMonitor discovers them (kubernetes_sd_configs,
# role pod, sandbox/prometheus/rbac.yaml): each container port named http, scraped on the pod's
# own address (<podIP>:8000, where the bridge's shim serves vLLM's /metrics), labelled with the
# pod's labels, then namespace, pod and container (which win).
- job_name: pods
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: ${KCFG}/prometheus.kubeconfig
  relabel_configs:
  - source_labels: [__meta_kubernetes_pod_container_port_name]
    regex: http
    action: keep
  - source_labels: [__meta_kubernetes_pod_phase]
    regex: Succeeded|Failed
    action: drop
  - action: labelmap
    regex: __meta_kubernetes_pod_label_(.+)
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
  - source_labels: [__meta_kubernetes_pod_container_name]
    target_label: container
# Everything else that is not a pod (a test's load generator, an operator run as a process)
# drops a JSON file per target group into ${PROM_DIR}/targets/.
- job_name: files
  file_sd_configs:
  - files: ['${PROM_DIR}/targets/*.json']
    refresh_interval: 1s
- job_name: prometheus
  static_configs:
  - targets: ['${IR_HOST}:${PROMETHEUS_PORT}']
# Traefik, the Gateway API implementation (up.d/65-traefik.sh): the gateway's own view of the
# traffic (traefik_service_requests_total{service="httproute-<ns>-<route>-...-svc-<ns>-<svc>-<i>@kubernetesgateway",
# code}: docs/metrics.md, "Which gateway").
- job_name: traefik
  static_configs:
  - targets: ['${IR_HOST}:${TRAEFIK_METRICS_PORT}']
EOF
  local tmp audit_log="${IR_LOGS}/audit.log"
  tmp="$(mktemp "${IR_STATE}/env.XXXXXX")"
  cat >"${tmp}" <<EOF
# Generated by sandbox/up.sh: source it to use the sandbox (kubectl, helm, tests, the operator).
export KUBECONFIG=${IR_STATE}/kubeconfig
export PROMETHEUS_URL=http://${IR_HOST}:${PROMETHEUS_PORT}
export GATEWAY_URL=http://${IR_HOST}:${TRAEFIK_PORT}
export NGINX_GATEWAY_URL=http://${IR_HOST}:${GATEWAY_PORT}
export IR_CACHE=${IR_CACHE}
export IR_STATE=${IR_STATE}
export IR_GATEWAY_PORT=${GATEWAY_PORT}
export IR_PROMETHEUS_TARGETS_DIR=${PROM_DIR}/targets
export IR_METRICS_ADAPTER_PORT=${METRICS_ADAPTER_PORT}
export IR_AUDIT_LOG=${audit_log}
export IR_AUDITED_NAMESPACE=${IR_AUDITED_NAMESPACE}
export TRAEFIK_URL=http://${IR_HOST}:${TRAEFIK_PORT}
export IR_TRAEFIK_PORT=${TRAEFIK_PORT}
export IR_TRAEFIK_METRICS_PORT=${TRAEFIK_METRICS_PORT}
export IR_POD_NETWORK=${IR_POD_CIDR}
export IR_POD_NETNS=${IR_POD_NETNS}
export IR_POD_VETH=${IR_POD_VETH}
export PATH=${SBIN}:\${PATH}
EOF
  mv "${tmp}" "${IR_STATE}/env"
}

# --- components ---------------------------------------------------------------------------------
# running NAME: is component NAME (PID file in .sandbox/pids) alive?
running() {
  sandbox_pid "${IR_PIDS}/$1.pid" >/dev/null
}

# port_free_or_die NAME PORT: a port we are about to listen on must not be taken by someone else.
port_free_or_die() {
  if port_open "$2"; then
    die "$1: port ${IR_HOST}:$2 is already in use by a process this sandbox did not start (ss -ltnp | grep :$2). Stop it, or set IR_*_PORT (see docs/sandbox.md)."
  fi
}

# start NAME PORT CMD...: start a component unless it already runs.
start() {
  local name="$1" port="$2"
  shift 2
  if running "${name}"; then
    log "${name}" "already running (pid $(head -n1 "${IR_PIDS}/${name}.pid"))"
    return 0
  fi
  port_free_or_die "${name}" "${port}"
  start_process "${name}" "$@"
  log "${name}" "started (pid $(head -n1 "${IR_PIDS}/${name}.pid"), log ${IR_LOGS}/${name}.log)"
}

# healthy NAME URL TIMEOUT [curl args...]: wait until URL answers 2xx, checking the process lives.
healthy() {
  local name="$1" url="$2" timeout="$3"
  shift 3
  local deadline=$(($(date +%s) + timeout))
  until curl -fsS -o /dev/null --max-time 2 "$@" "${url}" 2>/dev/null; do
    running "${name}" || {
      printf 'ERROR: %s exited during startup. Last lines of %s:\n' "${name}" "${IR_LOGS}/${name}.log" >&2
      tail -n 25 "${IR_LOGS}/${name}.log" | sed 's/^/    /' >&2
      exit 1
    }
    if (($(date +%s) >= deadline)); then
      printf 'ERROR: %s not healthy at %s after %ss. Last lines of %s:\n' "${name}" "${url}" "${timeout}" "${IR_LOGS}/${name}.log" >&2
      tail -n 25 "${IR_LOGS}/${name}.log" | sed 's/^/    /' >&2
      exit 1
    fi
    sleep 0.2
  done
  log "${name}" "healthy (${url})"
}

bin() { cached_bin "$1" "$2"; }

kubectl_() { "$(bin kubectl "${KUBERNETES_VERSION}")" --kubeconfig "${IR_STATE}/kubeconfig" "$@"; }

start_etcd() {
  mkdir -p "${IR_STATE}/etcd"
  chmod 700 "${IR_STATE}/etcd"
  start etcd "${ETCD_CLIENT_PORT}" "$(bin etcd "${ETCD_VERSION}")" \
    --name sandbox \
    --data-dir "${IR_STATE}/etcd" \
    --listen-client-urls "http://${IR_HOST}:${ETCD_CLIENT_PORT}" \
    --advertise-client-urls "http://${IR_HOST}:${ETCD_CLIENT_PORT}" \
    --listen-peer-urls "http://${IR_HOST}:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls "http://${IR_HOST}:${ETCD_PEER_PORT}" \
    --initial-cluster "sandbox=http://${IR_HOST}:${ETCD_PEER_PORT}" \
    --unsafe-no-fsync \
    --log-level warn
  healthy etcd "http://${IR_HOST}:${ETCD_CLIENT_PORT}/health" 30
}

# The audit log: the metadata of the requests of two groups only, so the log stays small and the
# rest of the sandbox pays nothing. bench:audited is bench/peers' controllers (it counts their
# requests); system:serviceaccounts:<IR_AUDITED_NAMESPACE> is every ServiceAccount of that one
# namespace: tests/sandbox/test_tenant_boundary.py installs the chart there and checks what the
# operator's identity asked the API server for (lib.sh names it).
audit_flags() {
  cat >"${IR_STATE}/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["bench:audited", "system:serviceaccounts:${IR_AUDITED_NAMESPACE}"]
- level: None
POLICY
  printf '%s\n' --audit-policy-file "${IR_STATE}/audit-policy.yaml" \
    --audit-log-path "${IR_LOGS}/audit.log" --audit-log-maxsize 500 --audit-log-maxbackup 1
}

start_apiserver() {
  local audit=()
  mapfile -t audit < <(audit_flags)
  start kube-apiserver "${APISERVER_PORT}" "$(bin kube-apiserver "${KUBERNETES_VERSION}")" \
    --etcd-servers "http://${IR_HOST}:${ETCD_CLIENT_PORT}" \
    --bind-address "${IR_HOST}" \
    --secure-port "${APISERVER_PORT}" \
    --tls-cert-file "${PKI}/kube-apiserver.crt" \
    --tls-private-key-file "${PKI}/kube-apiserver.key" \
    --client-ca-file "${PKI}/ca.crt" \
    --authorization-mode Node,RBAC \
    --service-account-key-file "${PKI}/sa.pub" \
    --service-account-signing-key-file "${PKI}/sa.key" \
    --service-account-issuer "${SA_ISSUER}" \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --requestheader-client-ca-file "${PKI}/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User \
    --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "${PKI}/front-proxy-client.crt" \
    --proxy-client-key-file "${PKI}/front-proxy-client.key" \
    --allow-privileged=true \
    --profiling=false \
    "${audit[@]}" \
    --v=1
  healthy kube-apiserver "https://${IR_HOST}:${APISERVER_PORT}/readyz" 90 \
    --cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" --key "${PKI}/admin.key"
}

start_controller_manager() {
  local kc="${KCFG}/kube-controller-manager.kubeconfig"
  start kube-controller-manager "${CONTROLLER_MANAGER_PORT}" "$(bin kube-controller-manager "${KUBERNETES_VERSION}")" \
    --kubeconfig "${kc}" \
    --authentication-kubeconfig "${kc}" \
    --authorization-kubeconfig "${kc}" \
    --bind-address "${IR_HOST}" \
    --secure-port "${CONTROLLER_MANAGER_PORT}" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "${PKI}/sa.key" \
    --root-ca-file "${PKI}/ca.crt" \
    --cluster-signing-cert-file "${PKI}/ca.crt" \
    --cluster-signing-key-file "${PKI}/ca.key" \
    --service-cluster-ip-range "${SERVICE_CIDR}" \
    --horizontal-pod-autoscaler-sync-period "${IR_HPA_SYNC_PERIOD:-5s}" \
    --profiling=false \
    --v=1
}

start_scheduler() {
  local kc="${KCFG}/kube-scheduler.kubeconfig"
  start kube-scheduler "${SCHEDULER_PORT}" "$(bin kube-scheduler "${KUBERNETES_VERSION}")" \
    --kubeconfig "${kc}" \
    --authentication-kubeconfig "${kc}" \
    --authorization-kubeconfig "${kc}" \
    --bind-address "${IR_HOST}" \
    --secure-port "${SCHEDULER_PORT}" \
    --leader-elect=false \
    --profiling=false \
    --v=1
}

start_kwok() {
  start kwok "${KWOK_PORT}" "$(bin "${KWOK_BIN_NAME}" "${KWOK_VERSION}")" \
    --kubeconfig "${KCFG}/kwok-controller.kubeconfig" \
    --config "${IR_SANDBOX_DIR}/kwok/kwok.yaml" \
    --config "${IR_SANDBOX_DIR}/kwok/stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip "${IR_HOST}" \
    --server-address "${IR_HOST}:${KWOK_PORT}"
}

start_prometheus() {
  start prometheus "${PROMETHEUS_PORT}" "$(bin prometheus "${PROMETHEUS_MODULE_VERSION}")" \
    --config.file "${PROM_DIR}/prometheus.yml" \
    --storage.tsdb.path "${PROM_DIR}/data" \
    --storage.tsdb.retention.time 2d \
    --web.listen-address "${IR_HOST}:${PROMETHEUS_PORT}" \
    --web.enable-lifecycle \
    --log.level warn
}

# --- cluster objects ------------------------------------------------------------------------------
apply_objects() {
  local gw="${IR_CACHE}/crds/gateway-api-${GATEWAY_API_VERSION}"
  local ip="${IR_CACHE}/crds/gateway-api-inference-extension-${GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
  local nodes="${IR_STATE}/nodes.yaml" i
  : >"${nodes}"
  for ((i = 0; i < GPU_NODES; i++)); do
    printf -- '---\n' >>"${nodes}"
    sed "s/NODE_NAME/gpu-node-${i}/g" "${IR_SANDBOX_DIR}/kwok/node.yaml.tmpl" >>"${nodes}"
  done
  kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox \
    -f "${IR_SANDBOX_DIR}/kwok/rbac.yaml" -f "${IR_SANDBOX_DIR}/traefik/rbac.yaml" \
    -f "${IR_SANDBOX_DIR}/prometheus/rbac.yaml" \
    -f "${nodes}" -f "${gw}" -f "${ip}" >"${IR_LOGS}/apply.log" 2>&1 ||
    { tail -n 20 "${IR_LOGS}/apply.log" >&2; die "kubectl apply failed, see ${IR_LOGS}/apply.log"; }
  log objects "applied kwok RBAC, ${GPU_NODES} GPU nodes, Gateway API ${GATEWAY_API_VERSION} CRDs, InferencePool CRD ${GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
}

wait_cluster() {
  healthy kube-controller-manager "https://${IR_HOST}:${CONTROLLER_MANAGER_PORT}/healthz" 60 -k
  healthy kube-scheduler "https://${IR_HOST}:${SCHEDULER_PORT}/healthz" 60 -k
  healthy kwok "http://${IR_HOST}:${KWOK_PORT}/healthz" 60
  wait_for "CRDs to be Established" 60 "${IR_LOGS}/kube-apiserver.log" \
    kubectl_ wait --for condition=Established --timeout 5s \
    crd/httproutes.gateway.networking.k8s.io crd/gateways.gateway.networking.k8s.io \
    crd/inferencepools.inference.networking.k8s.io
  wait_for "nodes gpu-node-* Ready (KWOK)" 60 "${IR_LOGS}/kwok.log" \
    kubectl_ wait --for condition=Ready --timeout 5s node -l type=kwok
  log nodes "$(kubectl_ get nodes -l type=kwok --no-headers | awk '{print $1"="$2}' | tr '\n' ' ')"
  wait_for "ServiceAccount default/default (kube-controller-manager)" 60 "${IR_LOGS}/kube-controller-manager.log" \
    kubectl_ get serviceaccount default -n default
  healthy prometheus "http://${IR_HOST}:${PROMETHEUS_PORT}/-/ready" 60
}

main() {
  log up "state ${IR_STATE}, cache ${IR_CACHE}, Kubernetes ${KUBERNETES_VERSION}"
  lock_state
  claim_machine
  ensure_binaries
  ensure_pki
  mkdir -p "${IR_LOGS}"
  podnet_up
  write_configs
  start_etcd
  start_apiserver
  apply_objects
  start_controller_manager
  start_scheduler
  start_kwok
  start_prometheus
  wait_cluster

  # --- pod bridge and gateway (sandbox/irsandbox) ---
  # Every sandbox/up.d/*.sh runs here in name order, with .sandbox/env sourced and lib.sh loaded
  # (scripts may `source "${IR_SANDBOX_DIR}/lib.sh"` and use start_process NAME CMD...). Whatever
  # a hook starts must write its PID to ${IR_PIDS}/<name>.pid: down.sh stops those first.
  local hook
  for hook in "${IR_SANDBOX_DIR}"/up.d/*.sh; do
    [[ -e "${hook}" ]] || continue
    log hook "running ${hook#"${IR_REPO}"/}"
    (
      # shellcheck disable=SC1091
      source "${IR_STATE}/env"
      bash "${hook}"
    ) || die "hook ${hook} failed"
  done

  log up "sandbox ready: source ${IR_STATE}/env (KUBECONFIG, PROMETHEUS_URL, GATEWAY_URL = Traefik, PATH)"
}

main "$@"
