#!/usr/bin/env bash
# Argo CD on the running sandbox (issue 32, docs/gitops.md): its CRDs and configuration from the
# module's own core-install.yaml (with deploy/argocd/argocd-cm.yaml's health check and actions),
# then redis, the repo server, the application controller and Argo CD's API server (no TLS, no
# logins, loopback only: `argocd app actions run` goes through it, since the CLI's --core mode
# port-forwards to redis and repo-server pods, which this sandbox's pods are not) as processes
# against the sandbox API server, and a git daemon on loopback serving .sandbox/git. Opt-in and idempotent;
# sandbox/down.sh stops these processes with the rest. Needs `bash sandbox/build.sh argocd`.
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ARGOCD_REDIS_PORT="${IR_ARGOCD_REDIS_PORT:-16379}"
ARGOCD_REPO_PORT="${IR_ARGOCD_REPO_PORT:-18881}"
ARGOCD_METRICS_PORT="${IR_ARGOCD_METRICS_PORT:-18882}"
ARGOCD_REPO_METRICS_PORT="${IR_ARGOCD_REPO_METRICS_PORT:-18883}"
ARGOCD_SERVER_PORT="${IR_ARGOCD_SERVER_PORT:-18880}"
ARGOCD_SERVER_METRICS_PORT="${IR_ARGOCD_SERVER_METRICS_PORT:-18884}"
GIT_DAEMON_PORT="${IR_GIT_DAEMON_PORT:-19418}"
ARGOCD="$(cached_bin argocd "${ARGOCD_BUILD}")"
DIR="${IR_STATE}/argocd"
GIT_ROOT="${IR_STATE}/git"

[[ -f "${IR_STATE}/env" ]] || die "the sandbox is not running: bash sandbox/up.sh first"
[[ -x "${ARGOCD}" ]] || die "Argo CD ${ARGOCD_VERSION} is not built: bash sandbox/build.sh argocd (≈25 min cold on 2 cores)"
command -v redis-server >/dev/null || die "redis-server is not installed: bash sandbox/build.sh argocd installs it"
HELM3="$(cached_bin helm3 "${HELM3_VERSION}")"
[[ -x "${HELM3}" ]] || die "Helm ${HELM3_VERSION} (the repo server renders charts with it) is not built: bash sandbox/build.sh helm3"
kubectl_() { "$(cached_bin kubectl "${KUBERNETES_VERSION}")" --kubeconfig "${IR_STATE}/kubeconfig" "$@"; }
established() {
  [[ "$(kubectl_ get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]]
}

# The multi-call binary picks its part by the name it is started under; the repo server finds
# `helm` (v3, which Argo CD drives) and git on its PATH.
mkdir -p "${DIR}/bin" "${GIT_ROOT}"
for part in argocd argocd-repo-server argocd-application-controller argocd-server; do
  ln -sfn "${ARGOCD}" "${DIR}/bin/${part}"
done
ln -sfn "${HELM3}" "${DIR}/bin/helm"

# CRDs and configuration only (no Deployments, Services or RBAC: the parts run here as processes
# with the sandbox's admin kubeconfig), then the health check and actions this repository ships.
src="$(cd "${IR_CACHE}/src" && GOTOOLCHAIN="${ARGOCD_GOTOOLCHAIN}" go mod download -json \
  "github.com/argoproj/argo-cd/v3@${ARGOCD_VERSION}" | jq -er .Dir)"
# The repo server runs Argo CD's own git-verify-wrapper.sh on every revision (its image ships it).
install -m 0755 "${src}/hack/git-verify-wrapper.sh" "${DIR}/bin/git-verify-wrapper.sh"
"${IR_REPO}/.venv/bin/python" - "${src}/manifests/core-install.yaml" >"${DIR}/config.yaml" <<'PY'
import sys, yaml
keep = {"CustomResourceDefinition", "ConfigMap", "Secret"}
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") in keep]
for d in docs:
    if d["kind"] != "CustomResourceDefinition":
        d["metadata"]["namespace"] = "argocd"
print(yaml.safe_dump_all(docs))
PY
# The sandbox as Argo CD's cluster "sandbox" (its processes run outside any pod, so the in-cluster
# destination https://kubernetes.default.svc, which needs a pod's service account, is turned off).
"${IR_REPO}/.venv/bin/python" - "${IR_STATE}/kubeconfig" >"${DIR}/cluster.yaml" <<'PY'
import json, sys, yaml
kc = yaml.safe_load(open(sys.argv[1]))
cluster, user = kc["clusters"][0]["cluster"], kc["users"][0]["user"]
config = {"tlsClientConfig": {"caData": cluster["certificate-authority-data"],
                              "certData": user["client-certificate-data"],
                              "keyData": user["client-key-data"]}}
print(yaml.safe_dump({
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "cluster-sandbox", "namespace": "argocd",
                 "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
    "stringData": {"name": "sandbox", "server": cluster["server"], "config": json.dumps(config)}}))
PY
{
  kubectl_ create namespace argocd --dry-run=client -o yaml | kubectl_ apply -f -
  kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox -f "${DIR}/config.yaml"
  for crd in applications.argoproj.io appprojects.argoproj.io; do
    wait_for "CRD ${crd} Established" 60 "${IR_LOGS}/argocd-crds.log" established "${crd}"
  done
  kubectl_ -n argocd patch configmap argocd-cm --type merge \
    --patch-file "${IR_REPO}/deploy/argocd/argocd-cm.yaml"
  kubectl_ -n argocd patch configmap argocd-cm --type merge \
    -p '{"data": {"cluster.inClusterEnabled": "false", "timeout.reconciliation": "10s"}}'
  kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox -f "${DIR}/cluster.yaml"
  kubectl_ apply --server-side --force-conflicts --field-manager ir-sandbox -f - <<'YAML'
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: default, namespace: argocd}
spec:
  sourceRepos: ['*']
  destinations: [{namespace: '*', server: '*'}]
  clusterResourceWhitelist: [{group: '*', kind: '*'}]
YAML
} >>"${IR_LOGS}/apply.log"

start_once() {  # start_once NAME PORT CMD...
  local name="$1" port="$2"
  shift 2
  if pid="$(sandbox_pid "${IR_PIDS}/${name}.pid")"; then
    log "${name}" "already running (pid ${pid})"
    return
  fi
  port_open "${port}" && die "port ${port} is taken by another process; free it or set the IR_*_PORT override in sandbox/argocd-up.sh"
  start_process "${name}" "$@"
  wait_for "${name}" 120 "${IR_LOGS}/${name}.log" port_open "${port}"
  log "${name}" "started (pid $(head -n1 "${IR_PIDS}/${name}.pid"), 127.0.0.1:${port})"
}

start_once argocd-redis "${ARGOCD_REDIS_PORT}" redis-server --bind "${IR_HOST}" \
  --port "${ARGOCD_REDIS_PORT}" --save "" --appendonly no --set-proc-title no  # its environ names the sandbox
start_once git-daemon "${GIT_DAEMON_PORT}" git daemon --reuseaddr --export-all \
  --enable=receive-pack --base-path="${GIT_ROOT}" --listen="${IR_HOST}" \
  --port="${GIT_DAEMON_PORT}" "${GIT_ROOT}"
export PATH="${DIR}/bin:${PATH}" ARGOCD_GPG_ENABLED=false
start_once argocd-repo-server "${ARGOCD_REPO_PORT}" "${DIR}/bin/argocd-repo-server" \
  --port "${ARGOCD_REPO_PORT}" --address "${IR_HOST}" --metrics-port "${ARGOCD_REPO_METRICS_PORT}" \
  --metrics-address "${IR_HOST}" --disable-tls --client-ca-path "" --redis "${IR_HOST}:${ARGOCD_REDIS_PORT}" \
  --logformat text
# --app-resync 10: the tests wait on Argo CD's view of the cluster, not on its 3-minute default.
start_once argocd-application-controller "${ARGOCD_METRICS_PORT}" \
  "${DIR}/bin/argocd-application-controller" --kubeconfig "${IR_STATE}/kubeconfig" \
  --namespace argocd --repo-server "${IR_HOST}:${ARGOCD_REPO_PORT}" --repo-server-plaintext \
  --redis "${IR_HOST}:${ARGOCD_REDIS_PORT}" --metrics-port "${ARGOCD_METRICS_PORT}" \
  --app-resync 10 --self-heal-timeout-seconds 2 --logformat text

# The API server without TLS or logins, on loopback only: the tests run `argocd app actions run`
# through it, which evaluates the actions in Argo CD's own Lua sandbox.
start_once argocd-server "${ARGOCD_SERVER_PORT}" "${DIR}/bin/argocd-server" \
  --kubeconfig "${IR_STATE}/kubeconfig" --namespace argocd --insecure --disable-auth \
  --address "${IR_HOST}" --port "${ARGOCD_SERVER_PORT}" --metrics-address "${IR_HOST}" \
  --metrics-port "${ARGOCD_SERVER_METRICS_PORT}" --repo-server "${IR_HOST}:${ARGOCD_REPO_PORT}" \
  --repo-server-plaintext --redis "${IR_HOST}:${ARGOCD_REDIS_PORT}" --logformat text \
  --staticassets "${DIR}/no-ui"

cat >"${DIR}/env" <<ENV
ARGOCD_BIN=${DIR}/bin/argocd
ARGOCD_SERVER=${IR_HOST}:${ARGOCD_SERVER_PORT}
ARGOCD_GIT_URL=git://${IR_HOST}:${GIT_DAEMON_PORT}
ARGOCD_GIT_ROOT=${GIT_ROOT}
ARGOCD_VERSION=${ARGOCD_VERSION}
ENV
log argocd "ready: Argo CD ${ARGOCD_VERSION}; git repositories under ${GIT_ROOT} at git://${IR_HOST}:${GIT_DAEMON_PORT}/NAME ($(basename "${DIR}")/env)"
