#!/usr/bin/env bash
# Build (or reuse) every binary and manifest the sandbox needs, into a cache outside the repo:
#   $IR_CACHE/bin/<name>-<version>       Go binaries (CGO_ENABLED=0, -trimpath)
#   $IR_CACHE/crds/<name>-<version>/     Gateway API standard CRDs, InferencePool CRD
#   $IR_CACHE/src/<name>-<version>/      generated wrapper Go modules (not the repo)
# Idempotent: whatever is already in the cache is skipped. Versions: sandbox/versions.env.
# Usage: sandbox/build.sh [step...]   steps: apt crds kwok sim helm helm3 etcd kubernetes prometheus prometheus_adapter traefik (default: all); peers (bench only)
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GO_BUILD_FLAGS=(-trimpath -p "${IR_GO_PARALLEL:-$(nproc)}")
export CGO_ENABLED=0

mkdir -p "${IR_BIN}" "${IR_CACHE}/src" "${IR_CACHE}/crds"

have_all() {
  local f
  for f in "$@"; do [[ -x "${f}" ]] || return 1; done
}

# go_info MODULE VERSION: `go mod download -json` of one module version (Dir, Origin.Hash, Time).
go_info() {
  (cd "${IR_CACHE}/src" && go mod download -json "$1@$2")
}

# --- Debian packages: prometheus, nginx -------------------------------------------------------
step_apt() {
  apt_install_missing prometheus:prometheus nginx:nginx-light
}

# --- CRDs from module zips ----------------------------------------------------------------------
step_crds() {
  local gw="${IR_CACHE}/crds/gateway-api-${GATEWAY_API_VERSION}"
  local ip="${IR_CACHE}/crds/gateway-api-inference-extension-${GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
  local dir
  if [[ ! -s "${gw}/gateway.networking.k8s.io_httproutes.yaml" ]]; then
    dir="$(go_info sigs.k8s.io/gateway-api "${GATEWAY_API_VERSION}" | jq -r .Dir)"
    [[ -d "${dir}/config/crd/standard" ]] || die "no config/crd/standard in sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION}"
    mkdir -p "${gw}.tmp"
    install -m 0644 "${dir}"/config/crd/standard/*.yaml "${gw}.tmp/"
    rm -rf "${gw}" && mv "${gw}.tmp" "${gw}"
  fi
  log crds "gateway-api ${GATEWAY_API_VERSION}: $(find "${gw}" -name '*.yaml' | wc -l) standard-channel files in ${gw}"
  if [[ ! -s "${ip}/inference.networking.k8s.io_inferencepools.yaml" ]]; then
    dir="$(go_info sigs.k8s.io/gateway-api-inference-extension "${GATEWAY_API_INFERENCE_EXTENSION_VERSION}" | jq -r .Dir)"
    mkdir -p "${ip}.tmp"
    install -m 0644 "${dir}/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "${ip}.tmp/"
    rm -rf "${ip}" && mv "${ip}.tmp" "${ip}"
  fi
  log crds "InferencePool CRD ${GATEWAY_API_INFERENCE_EXTENSION_VERSION} in ${ip}"
}

# wrapper_build NAME MODULE VERSION PACKAGE [LDFLAGS [PATCH]]: build PACKAGE of MODULE@VERSION
# through a generated wrapper module ($IR_CACHE/src/NAME-VERSION) that requires MODULE at VERSION
# with the same `go` and `godebug` lines. PATCH, a function, is called with the wrapper's
# directory, MODULE and VERSION before `go mod tidy` (see patch_sim_loopback). (Not `go install pkg@version`: it also reads the module's version list,
# which some proxies, e.g. a curated mirror, do not serve.)
wrapper_build() {
  local name="$1" module="$2" version="$3" pkg="$4" ldflags="${5:-}" patch="${6:-}"
  local out
  out="$(cached_bin "${name}" "${version}")"
  if have_all "${out}"; then
    log "${name}" "cached ${out}"
    return
  fi
  local src="${IR_CACHE}/src/${name}-${version}" info gomod
  log "${name}" "generating wrapper module ${src} for ${module}@${version}"
  rm -rf "${src}" && mkdir -p "${src}"
  info="$(go_info "${module}" "${version}")"
  gomod="$(jq -r .GoMod <<<"${info}")"
  {
    printf 'module inference-rollout.local/sandbox/%s\n\n' "${name}"
    sed -n 's/^go .*/&/p; s/^godebug .*/&/p' "${gomod}"
    printf '\nrequire %s %s\n' "${module}" "${version}"
  } >"${src}/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "${pkg}" >"${src}/tools.go"
  [[ -z "${patch}" ]] || "${patch}" "${src}" "${module}" "${version}"
  log "${name}" "resolving modules (go mod tidy)"
  (cd "${src}" && go mod tidy)
  log "${name}" "compiling ${pkg}"
  (cd "${src}" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "-s -w ${ldflags}" -o "${out}.tmp" "${pkg}")
  mv "${out}.tmp" "${out}"
  log "${name}" "built ${out}"
}

step_kwok() {
  wrapper_build "${KWOK_BIN_NAME}" sigs.k8s.io/kwok "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok "" \
    patch_kwok_mark_pod_ips
}

# KWOK hands out pod addresses from a pool kept in memory, and learns an address is taken only when
# it plays a stage on the pod. A restarted KWOK plays none on a pod that is already Running, so it
# gave the next new pod the address of a running one (after down.sh and up.sh, a test's pod got
# the demo pod's 10.244.0.1, and its shim never listened: "Address already in use"). Marking the
# pool from the pod events is not enough: the pool is per node CIDR and needs the node, which KWOK
# may learn after the pods. The patch keeps its own map of the addresses pods hold, filled from the
# same pod events (the list on start comes before any new pod's), and the allocation skips them.
patch_kwok_mark_pod_ips() {
  local src="$1" module="$2" version="$3" dir file
  copy_module "${module}" "${version}" "${src}/module"
  dir="${src}/module/pkg/kwok/controllers"
  file="${dir}/pod_controller.go"
  sed_present "${file}" '^			case informer.Added, informer.Modified, informer.Sync:$' \
    '&\n				holdPodIPs(event.Object) \/\/ inference-rollout sandbox' "kwok ${version}: patch_kwok_mark_pod_ips"
  sed_present "${file}" '^			case informer.Deleted:$' \
    '&\n				releasePodIPs(event.Object) \/\/ inference-rollout sandbox' "kwok ${version}: patch_kwok_mark_pod_ips"
  sed_present "${file}" 'return pool.Get(), nil' 'return freePodIP(pool), nil' \
    "kwok ${version}: patch_kwok_mark_pod_ips"
  sed_present "${file}" 'ips = append(ips, pool.Get())' 'ips = append(ips, freePodIP(pool))' \
    "kwok ${version}: patch_kwok_mark_pod_ips"
  new_source_file "${dir}/held_ips_sandbox.go" "kwok ${version}: patch_kwok_mark_pod_ips" <<'GO'
// Added by inference-rollout's sandbox/build.sh (patch_kwok_mark_pod_ips); not part of KWOK.

package controllers

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// heldPodIPs maps each address a pod holds to that pod's UID, for every pod this KWOK was told
// about. The ipPool learns an address only when a stage plays on its pod, and none plays on a pod
// that was Running before KWOK started.
var heldPodIPs sync.Map

func podAddresses(pod *corev1.Pod) []string {
	if pod.Spec.HostNetwork {
		return nil
	}
	out := make([]string, 0, len(pod.Status.PodIPs)+1)
	for _, ip := range pod.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if pod.Status.PodIP != "" {
		out = append(out, pod.Status.PodIP)
	}
	return out
}

func holdPodIPs(pod *corev1.Pod) {
	for _, ip := range podAddresses(pod) {
		heldPodIPs.Store(ip, pod.UID)
	}
}

func releasePodIPs(pod *corev1.Pod) {
	for _, ip := range podAddresses(pod) {
		if uid, ok := heldPodIPs.Load(ip); ok && uid.(types.UID) == pod.UID {
			heldPodIPs.Delete(ip)
		}
	}
}

// freePodIP is the pool's next address that no pod holds. A held address the pool offered stays
// marked used there; KWOK returns it to the pool when its pod is deleted.
func freePodIP(pool *ipPool) string {
	for i := 0; i < 1<<16; i++ {
		ip := pool.Get()
		if _, held := heldPodIPs.Load(ip); !held {
			return ip
		}
	}
	return pool.Get()
}
GO
  printf '\nreplace %s => ./module\n' "${module}" >>"${src}/go.mod"
  log "${KWOK_BIN_NAME}" "patched to skip addresses running pods hold (${file#"${src}/"})"
}

# Pure Go (CGO_ENABLED=0): with a model name unknown to HuggingFace, or --force-dummy-tokenizer,
# it tokenizes with a built-in regex tokenizer and needs no network.
step_sim() {
  wrapper_build "${SIM_BIN_NAME}" github.com/llm-d/llm-d-inference-sim "${LLM_D_INFERENCE_SIM_VERSION}" \
    github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim "" patch_sim_loopback
}

# The simulator listens on ":<port>", every interface (pkg/communication/http.go; no flag picks
# the address). The sandbox serves on loopback only, so the build changes that one address to
# 127.0.0.1 in a copy of the module beside the wrapper (the module cache stays read-only and
# untouched), replaces the module with the copy, and fails if the line is not where it was.
patch_sim_loopback() {
  local src="$1" module="$2" version="$3" file
  copy_module "${module}" "${version}" "${src}/module"
  file="${src}/module/pkg/communication/http.go"
  sed_present "${file}" 'net.Listen("tcp4", fmt.Sprintf(":%d"' \
    'net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d"' "llm-d-inference-sim ${version}: patch_sim_loopback"
  printf '\nreplace %s => ./module\n' "${module}" >>"${src}/go.mod"
  log "${SIM_BIN_NAME}" "patched its listener to 127.0.0.1 (${file#"${src}/"})"
}

# copy_module MODULE VERSION DIR: a writable copy of MODULE@VERSION's source at DIR (the module
# cache stays read-only and untouched), for a patch and a `replace MODULE => DIR`.
copy_module() {
  local dir
  dir="$(go_info "$1" "$2" | jq -r .Dir)"
  rm -rf "$3" && cp -r "${dir}" "$3" && chmod -R u+w "$3"
}

# new_source_file FILE WHO: write standard input to FILE, a file a patch adds to a module copy;
# fail naming WHO if a new version of the module already has a file by that name.
new_source_file() {
  [[ ! -e "$1" ]] || die "$2: $1 exists upstream; update the patch"
  cat >"$1"
}

# sed_present FILE PATTERN REPLACEMENT WHO: replace PATTERN (a sed regex without `#`) in FILE,
# failing naming WHO when a new version no longer has it, so a patch never silently does nothing.
sed_present() {
  grep -q -- "$2" "$1" || die "$4: '$2' is no longer in $1; update the patch"
  sed -i "s#$2#$3#" "$1"
}

step_helm() {
  wrapper_build helm helm.sh/helm/v4 "${HELM_VERSION}" helm.sh/helm/v4/cmd/helm \
    "-X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
}

# Helm 3 (the libraries Argo CD and Flux render charts with), built with its release Makefile's
# ldflags: the Kubernetes version `helm template` and `helm lint` assume without --kube-version
# comes from the client-go it was built with (v0.37 -> 1.37). Without them it is v1.20.0, and
# the chart's kubeVersion (>=1.29) refuses to render: that was the build, not the chart.
step_helm3() {
  local gomod client_go major minor ld
  gomod="$(go_info helm.sh/helm/v3 "${HELM3_VERSION}" | jq -r .GoMod)"
  client_go="$(sed -nE 's#^[[:space:]]*k8s\.io/client-go[[:space:]]+(v[0-9.]+).*#\1#p' "${gomod}" | head -1)"
  [[ "${client_go}" =~ ^v0\.([0-9]+)\. ]] || die "no k8s.io/client-go version in ${gomod}"
  major=1 minor="${BASH_REMATCH[1]}"
  ld="-X helm.sh/helm/v3/internal/version.version=${HELM3_VERSION}"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X ${pkg}.k8sVersionMajor=${major} -X ${pkg}.k8sVersionMinor=${minor}"
  done
  wrapper_build helm3 helm.sh/helm/v3 "${HELM3_VERSION}" helm.sh/helm/v3/cmd/helm "${ld}"
}

# The external-metrics API server (APIService v1beta1.external.metrics.k8s.io) that the HPA
# controller reads vllm:num_requests_waiting through (docs/autoscaling.md).
step_prometheus_adapter() {
  wrapper_build prometheus-adapter sigs.k8s.io/prometheus-adapter "${PROMETHEUS_ADAPTER_VERSION}" \
    sigs.k8s.io/prometheus-adapter/cmd/adapter
}

# etcd: the server's main package is the root of go.etcd.io/etcd/server/v3 (3.6).
step_etcd() {
  local hash
  if have_all "$(cached_bin etcd "${ETCD_VERSION}")"; then
    log etcd "cached $(cached_bin etcd "${ETCD_VERSION}")"
    return
  fi
  hash="$(go_info go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" | jq -r '.Origin.Hash // "unknown"')"
  wrapper_build etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" go.etcd.io/etcd/server/v3 \
    "-X go.etcd.io/etcd/api/v3/version.GitSHA=${hash:0:10}"
}

# --- Kubernetes: wrapper module requiring k8s.io/kubernetes, staging modules replaced ------------
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

step_kubernetes() {
  local outs=() c
  for c in "${K8S_CMDS[@]}"; do outs+=("$(cached_bin "${c}" "${KUBERNETES_VERSION}")"); done
  if have_all "${outs[@]}"; then
    log kubernetes "cached ${K8S_CMDS[*]} ${KUBERNETES_VERSION}"
    return
  fi
  local v="${KUBERNETES_VERSION}" sv
  sv="$(k8s_staging_version "${v}")"
  local src="${IR_CACHE}/src/kubernetes-${v}"
  log kubernetes "generating wrapper module ${src}"
  rm -rf "${src}" && mkdir -p "${src}"
  local info gomod hash btime major minor
  info="$(go_info k8s.io/kubernetes "${v}")"
  gomod="$(jq -r .GoMod <<<"${info}")"
  hash="$(jq -r '.Origin.Hash // empty' <<<"${info}")"
  btime="$(jq -r '.Time // empty' <<<"${info}")"
  [[ -n "${hash}" ]] || hash="$(printf '%040d' 0)"
  [[ -n "${btime}" ]] || btime="1970-01-01T00:00:00Z"
  btime="$(date -u -d "${btime}" +%Y-%m-%dT%H:%M:%SZ)"
  major="${v#v}" && major="${major%%.*}"
  minor="${v#v*.}" && minor="${minor%%.*}"
  # The staging modules k8s.io/kubernetes replaces with ./staging/src/k8s.io/<x> (v0.0.0 in require).
  local staging=()
  mapfile -t staging < <(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\1#p' "${gomod}")
  ((${#staging[@]} > 10)) || die "could not read the staging modules from ${gomod}"
  log kubernetes "${#staging[@]} staging modules -> ${sv}"
  (
    cd "${src}"
    {
      printf 'module inference-rollout.local/sandbox/kubernetes\n\n'
      sed -n 's/^go .*/&/p; s/^godebug .*/&/p' "${gomod}"
      printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "${v}"
      for c in "${staging[@]}"; do printf '\t%s => %s %s\n' "${c}" "${c}" "${sv}"; done
      printf ')\n'
    } >go.mod
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for c in "${K8S_CMDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${c}"; done
      printf ')\n'
    } >tools.go
    log kubernetes "resolving modules (go mod tidy; first time downloads ~300 modules)"
    go mod tidy
    local ld="-s -w" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
      ld+=" -X ${pkg}.gitCommit=${hash} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${btime}"
    done
    local pkgs=()
    for c in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
    log kubernetes "compiling ${K8S_CMDS[*]} (one go build; cold: tens of minutes on 2 cores)"
    rm -rf out && mkdir out
    go build "${GO_BUILD_FLAGS[@]}" -ldflags "${ld}" -o out/ "${pkgs[@]}"
  )
  for c in "${K8S_CMDS[@]}"; do mv "${src}/out/${c}" "$(cached_bin "${c}" "${v}")"; done
  rmdir "${src}/out"
  log kubernetes "built: $("$(cached_bin kube-apiserver "${v}")" --version)"
}

# --- Traefik: the sandbox's Gateway API implementation (docs/sandbox.md#gateways-traefik-and-the-nginx-translator) -----------------
# Its go.mod has three kinds of `replace` a wrapper module must handle:
#   * forks (go-http-auth, mux): copied (patch_copy_replaces); the go-http-auth fork's pseudo-version
#     of v3.7.13 (2026-08) is refused by the Go module proxy here (403), so the fork's 2020 one, which
#     the proxy serves and Traefik v2 used, stands in (TRAEFIK_HTTP_AUTH below);
#   * a local one, ./pkg/config/dynamic/ext: a nested module that the module zip leaves out, two
#     empty structs upstream (its extension point); written beside the wrapper;
#   * its `exclude` (tencentcloud): copied.
# And lego v5 (ACME) registers every DNS provider; the proxy refuses the SDKs of a few of them
# (TRAEFIK_LEGO_DROP), so a copy of lego without those providers replaces it. The sandbox uses no
# ACME: nothing it runs changes.
TRAEFIK_HTTP_AUTH=v0.4.1-0.20200324110947-a37a7636d23e
TRAEFIK_LEGO_DROP=(edgedns huaweicloud oraclecloud sakuracloud ucloud yandexcloud)

step_traefik() {
  wrapper_build "${TRAEFIK_BIN_NAME}" github.com/traefik/traefik/v3 "${TRAEFIK_VERSION}" \
    github.com/traefik/traefik/v3/cmd/traefik \
    "-X github.com/traefik/traefik/v3/pkg/version.Version=${TRAEFIK_VERSION}" patch_traefik
}

patch_traefik() {
  local src="$1" module="$2" version="$3" gomod legov p f
  gomod="$(go_info "${module}" "${version}" | jq -r .GoMod)"
  patch_copy_replaces "${src}" "${module}" "${version}"
  grep -q 'github.com/containous/go-http-auth ' "${src}/go.mod" ||
    die "traefik ${version}: no go-http-auth fork in its replaces; update patch_traefik"
  sed -i -E "s#(github.com/containous/go-http-auth) v[^ ]+#\1 ${TRAEFIK_HTTP_AUTH}#" "${src}/go.mod"
  grep '^exclude ' "${gomod}" >>"${src}/go.mod" || true
  # the local replace: github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext
  grep -q '^replace github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext' "${gomod}" ||
    die "traefik ${version}: its dynamic/ext replace moved; update patch_traefik"
  mkdir -p "${src}/ext"
  printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.26.0\n' >"${src}/ext/go.mod"
  printf '%s\n' '// Package ext: Traefik'"'"'s extension point, empty upstream (written by sandbox/build.sh).' \
    'package ext' '' 'type HTTP struct{}' '' 'type Router struct{}' >"${src}/ext/ext.go"
  printf '\nreplace github.com/traefik/traefik/dynamic/ext => ./ext\n' >>"${src}/go.mod"
  # lego without the DNS providers whose SDKs the proxy refuses
  legov="$(sed -nE 's#^[[:space:]]*github.com/go-acme/lego/v5[[:space:]]+(v[^ ]+).*#\1#p' "${gomod}" | head -1)"
  [[ -n "${legov}" ]] || die "traefik ${version}: no github.com/go-acme/lego/v5 in its go.mod"
  copy_module github.com/go-acme/lego/v5 "${legov}" "${src}/lego"
  f="${src}/lego/providers/dns/zz_gen_dns_providers.go"
  for p in "${TRAEFIK_LEGO_DROP[@]}"; do
    grep -q "\"github.com/go-acme/lego/v5/providers/dns/${p}\"" "${f}" ||
      die "lego ${legov}: no DNS provider ${p} in ${f}; update TRAEFIK_LEGO_DROP"
    rm -rf "${src}/lego/providers/dns/${p}"
    sed -i "\#\"github.com/go-acme/lego/v5/providers/dns/${p}\"#d; /^\tcase .*\"${p}\"/{N;d}" "${f}"
  done
  rm -f "${src}/lego/providers/dns/dns_providers_test.go"
  printf '\nreplace github.com/go-acme/lego/v5 => ./lego\n' >>"${src}/go.mod"
  patch_traefik_full_duplex "${src}" "${module}" "${version}"
  log traefik "wrapper: forks and exclude copied, go-http-auth fork at ${TRAEFIK_HTTP_AUTH}, ext module written, lego ${legov} without ${TRAEFIK_LEGO_DROP[*]}, HTTP server in full duplex, unread bodies finished in the handler"
}

# patch_traefik_full_duplex DIR MODULE VERSION: Traefik's entry points serve HTTP/1 in full duplex
# (http.ResponseController.EnableFullDuplex on every request), as Go documents for proxies. Without
# it Go's HTTP/1 server closes a request's body once the response starts (golang/go#15527,
# #57786), and when a backend answers a POST's headers within a millisecond or two, the transport's
# last read of that body (it checks the body has no bytes beyond Content-Length) can come after:
# the read fails, the transport closes the backend connection, and the client's stream is cut
# right after its 200 ("httputil: ReverseProxy read error during body copy: use of closed network
# connection", traefik/traefik#10381). Measured here: about 1 streamed chat completion in 3,000,
# 4 in 4,800 while routes change (docs/sandbox.md, "Gateways").
# Full duplex alone has a defect of its own in Go's server (golang/go#68560, through Go 1.26): a
# body still unread when the handler returns (Traefik's own 404/502/503 to a POST, a backend that
# answered before the body came) is closed by response.finishRequest AFTER it stops the
# connection's background read; closing reads the body to its EOF, whose hook starts a new
# background read that nothing stops, and the next request on the keep-alive connection panics
# ("invalid concurrent Body.Read call"): recovered when the connection's goroutine reads it (the
# connection is dropped unanswered), fatal when that request was already buffered and the
# transport's write loop reads its body (Traefik exits; issue 34). So the wrapper also finishes
# such a body itself before the handler returns (fullduplex_sandbox.go below);
# tests/integration/test_traefik_full_duplex.py runs both cases against the binary. A copy of the
# module, replaced.
patch_traefik_full_duplex() {
  local src="$1" module="$2" version="$3" file
  copy_module "${module}" "${version}" "${src}/traefik"
  file="${src}/traefik/pkg/server/server_entrypoint_tcp.go"
  sed_present "${file}" '^	handler = denyOpaque(handler)$' \
    '	handler = denyOpaque(handler)\n	handler = fullDuplex(handler)' \
    "traefik ${version}: patch_traefik_full_duplex"
  new_source_file "${src}/traefik/pkg/server/fullduplex_sandbox.go" \
    "traefik ${version}: patch_traefik_full_duplex" <<'GO'
// Added by inference-rollout's sandbox/build.sh (patch_traefik_full_duplex); not part of Traefik.

package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// bodyDrainWait bounds how long fullDuplex waits for the rest of a body nobody read.
const bodyDrainWait = time.Second

// fullDuplex serves each HTTP/1 request in full duplex, so a request's body can still be read after
// its response has begun: a proxied POST is never cut because its backend answered early.
//
// And it finishes the body before returning when no read reached its end. Otherwise Go's server
// (golang/go#68560) closes it in finishRequest after stopping the connection's background read;
// closing reads the body's rest, its EOF starts a background read that nothing stops, and the
// next request on the connection panics with "invalid concurrent Body.Read call" (fatal when the
// transport copying that request's body upstream hits it). Here the rest is read while the handler
// still runs, so finishRequest stops the background read that EOF starts; a read after that gets
// http.ErrBodyReadAfterClose and never touches the connection.
func fullDuplex(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(rw)
		// HTTP/2 is full duplex already. With 100-continue Go's server closes the connection after
		// a body that was not read before the response (closeAfterReply), so none is reused.
		if rc.EnableFullDuplex() != nil || req.Body == nil || req.Body == http.NoBody || expectsContinue(req) {
			h.ServeHTTP(rw, req)
			return
		}
		body := &eofBody{ReadCloser: req.Body}
		inner := req.WithContext(req.Context()) // a shallow copy: the server's own Request keeps its Body
		inner.Body = body
		h.ServeHTTP(rw, inner)
		if body.eof.Load() {
			return // the EOF came while the handler ran: finishRequest stops the read it started
		}
		if _, err := rw.Write(nil); errors.Is(err, http.ErrHijacked) {
			return // an upgraded connection is the handler's; the server reads nothing more from it
		}
		// The answer goes out first (a client may wait for it before sending the rest), then the
		// body's rest is read (Go's Close reads up to 256 KiB, else gives up and the server closes
		// the connection). A rest that does not come within bodyDrainWait, or a failed read, leaves
		// bytes of unknown length on the connection: it must not be reused. http.MaxBytesReader
		// past its limit is Go's public way to say so (response.requestTooLarge: closeAfterReply).
		_ = rc.Flush()
		_ = rc.SetReadDeadline(time.Now().Add(bodyDrainWait))
		if req.Body.Close() != nil {
			_, _ = http.MaxBytesReader(rw, io.NopCloser(strings.NewReader("x")), 0).Read(make([]byte, 1))
		}
	})
}

// expectsContinue: does the request carry "Expect: 100-continue" (Go's Request.expectsContinue)?
func expectsContinue(req *http.Request) bool {
	for _, v := range req.Header.Values("Expect") {
		for _, token := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "100-continue") {
				return true
			}
		}
	}
	return false
}

// eofBody records that a read of the body returned io.EOF, i.e. that the server's body has seen
// its end and run its EOF hook (a read that returns io.EOF runs it before returning, or ran it on
// an earlier read).
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}
GO
  printf '\nreplace %s => ./traefik\n' "${module}" >>"${src}/go.mod"
}

# --- Peers for the side-by-side benchmark (bench-only: not in the default steps) -----------------
# Flagger's go.mod has no replace directive; Argo Rollouts' replaces every k8s.io staging module
# (and two forks), which a wrapper module must repeat: patch_copy_replaces copies them.
step_peers() {
  wrapper_build flagger github.com/fluxcd/flagger "${FLAGGER_VERSION}" \
    github.com/fluxcd/flagger/cmd/flagger
  wrapper_build argo-rollouts-controller github.com/argoproj/argo-rollouts "${ARGO_ROLLOUTS_VERSION}" \
    github.com/argoproj/argo-rollouts/cmd/rollouts-controller "" patch_copy_replaces
  argo_gatewayapi_plugin_build
}

# argo_gatewayapi_plugin_build: Argo Rollouts' Gateway API traffic-router plugin, a main package at
# its module root. The Go module proxy here refuses the module (403 for every version), so it is
# built from the tag in a git directory named by IR_ARGO_GATEWAYAPI_PLUGIN_GIT where the proxy fails.
argo_gatewayapi_plugin_build() {
  own_module_build argo-rollouts-gatewayapi-plugin \
    github.com/argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi \
    "${ARGO_GATEWAYAPI_PLUGIN_VERSION}" . "" "" "${IR_ARGO_GATEWAYAPI_PLUGIN_GIT:-}"
}

# own_module_build NAME MODULE VERSION PKG [LDFLAGS [TAGS [GIT]]]: build PKG (relative to the module
# root) inside MODULE@VERSION itself, with its own go.mod and go.sum (-mod=readonly, GOWORK=off), so
# only the modules PKG imports under TAGS are downloaded: a wrapper module's `go mod tidy` would
# resolve every build tag's imports. The source is the Go module proxy's zip or, where the proxy
# refuses the module, the tag VERSION of the git directory GIT (`git archive`, nothing but the tag).
own_module_build() {
  local name="$1" module="$2" version="$3" pkg="$4" ldflags="${5:-}" tags="${6:-}" git="${7:-}"
  local out src="${IR_CACHE}/src/${name}-${version}" dir
  out="$(cached_bin "${name}" "${version}")"
  if have_all "${out}"; then
    log "${name}" "cached ${out}"
    return
  fi
  rm -rf "${src}" && mkdir -p "${src}"
  if dir="$(go_info "${module}" "${version}" 2>/dev/null | jq -er .Dir)"; then
    cp -r "${dir}/." "${src}/" && chmod -R u+w "${src}"
  elif [[ -n "${git}" ]]; then
    log "${name}" "the module proxy does not serve ${module}@${version}; using ${git}"
    git -C "${git}" archive "${version}" | tar -x -C "${src}"
  else
    die "the Go module proxy does not serve ${module}@${version}${git:+ and ${git} has no tag ${version}}"
  fi
  log "${name}" "compiling ${module}@${version} ${pkg}${tags:+ (tags ${tags})}"
  (cd "${src}" && GOWORK=off go build -mod=readonly "${GO_BUILD_FLAGS[@]}" ${tags:+-tags "${tags}"} \
    -ldflags "-s -w ${ldflags}" -o "${out}.tmp" "${pkg}")
  mv "${out}.tmp" "${out}"
  log "${name}" "built ${out}"
}

# Argo CD (opt-in: the GitOps tier, issue 32): one multi-call binary (argocd, and the
# application controller, repo server, server... chosen by the name it is started under). Built in
# its own module with gitops-engine from the proxy instead of the zip's missing ./gitops-engine.
step_argocd() {
  local name=argocd version="${ARGOCD_VERSION}" out src dir
  local module=github.com/argoproj/argo-cd/v3 engine=github.com/argoproj/argo-cd/gitops-engine/v3
  out="$(cached_bin "${name}" "${ARGOCD_BUILD}")"
  apt_install_missing redis-server:redis-server  # its cache, for sandbox/argocd-up.sh
  if have_all "${out}"; then
    log "${name}" "cached ${out}"
    return
  fi
  src="${IR_CACHE}/src/${name}-${version}"
  export GOTOOLCHAIN="${ARGOCD_GOTOOLCHAIN}"
  rm -rf "${src}" && mkdir -p "${src}"
  dir="$(go_info "${module}" "${version}" | jq -er .Dir)"
  cp -r "${dir}/." "${src}/" && chmod -R u+w "${src}"
  # The application controller's metrics listen on every address (appcontroller.go hard-codes
  # 0.0.0.0, and no flag sets it): a sandbox listens on loopback only.
  local ctl="${src}/controller/appcontroller.go"
  grep -q '"0.0.0.0:%d", metricsPort' "${ctl}" || die "${ctl}: the metrics address line moved; update the patch"
  sed -i 's/"0.0.0.0:%d", metricsPort/"127.0.0.1:%d", metricsPort/' "${ctl}"
  log "${name}" "compiling ${module}@${version} ./cmd with ${GOTOOLCHAIN} (${engine} ${version} from the proxy)"
  (cd "${src}" && go mod edit -dropreplace="${engine}" -require="${engine}@${version}" &&
    GOWORK=off go build -mod=mod "${GO_BUILD_FLAGS[@]}" -o "${out}.tmp" \
      -ldflags "-s -w -X github.com/argoproj/argo-cd/v3/common.version=${version#v}" ./cmd)
  mv "${out}.tmp" "${out}"
  export GOTOOLCHAIN=local
  log "${name}" "built ${out}"
}

# Prometheus with only its Kubernetes service discovery (Debian's package has none, and the
# sandbox discovers pods as a PodMonitor does: up.sh's prometheus.yml). Its build tags drop the
# other discovery plugins (remove_all_sd, enable_kubernetes_sd: plugins/plugin_*.go); without
# `builtinassets` the web UI is not embedded, and the HTTP API, all the sandbox uses, is whole.
step_prometheus() {
  local v="${PROMETHEUS_VERSION}" m=github.com/prometheus/common/version
  own_module_build prometheus github.com/prometheus/prometheus "${PROMETHEUS_MODULE_VERSION}" \
    ./cmd/prometheus "-X ${m}.Version=${v#v} -X ${m}.Branch=module -X ${m}.Revision=${PROMETHEUS_MODULE_VERSION}" \
    remove_all_sd,enable_kubernetes_sd
}

# patch_copy_replaces DIR MODULE VERSION: append MODULE's non-local replace directives to DIR/go.mod
# (a dependency's replaces do not apply to the module that requires it).
patch_copy_replaces() {
  local src="$1" gomod
  gomod="$(go_info "$2" "$3" | jq -r .GoMod)"
  {
    printf '\nreplace (\n'
    awk '/^replace \(/{inside=1; next} inside && /^\)/{inside=0} inside && /=>/ && $NF !~ /^[.\/]/ {print}
         /^replace [^(]/ && $NF !~ /^[.\/]/ {sub(/^replace /, "\t"); print}' "${gomod}"
    printf ')\n'
  } >>"${src}/go.mod"
}

# Minutes each step takes from empty caches on a 2-core machine (docs/sandbox.md, "Build time":
# 22 min for the sandbox's steps on a nearly idle machine; Traefik 6, Prometheus 2, the metrics
# adapter 5, Helm 3 4), for the progress lines: an estimate, printed, never waited on.
declare -A COLD_MINUTES=([apt]=1 [crds]=1 [kwok]=3 [sim]=4 [helm]=4 [helm3]=4 [etcd]=2
  [kubernetes]=9 [prometheus]=2 [prometheus_adapter]=5 [traefik]=6 [peers]=20
  [argocd]=25)

main() {
  command -v go >/dev/null || die "go is not installed (need Go >= 1.26)"
  command -v jq >/dev/null || die "jq is not installed (apt-get install -y jq)"
  local steps=("$@")
  ((${#steps[@]})) || steps=(apt crds kwok sim helm helm3 etcd kubernetes prometheus prometheus_adapter traefik)
  log build "cache ${IR_CACHE}; $(go version)"
  local s lock left=0
  for s in "${steps[@]}"; do left=$((left + ${COLD_MINUTES[${s}]:-1})); done
  for s in "${steps[@]}"; do
    # A cached step takes seconds; the estimate is for one that builds from nothing.
    log "${s}" "cold ≈ ${COLD_MINUTES[${s}]:-1} min on 2 cores; at most ≈ ${left} min left in this build"
    left=$((left - ${COLD_MINUTES[${s}]:-1}))
    declare -F "step_${s}" >/dev/null || die "unknown step ${s} (steps: apt crds kwok sim helm helm3 etcd kubernetes prometheus prometheus_adapter traefik, peers for bench/peers, argocd for the GitOps tier)"
    # One lock per step: two concurrent build.sh runs never build the same thing twice.
    lock="${IR_CACHE}/.build-${s}.lock"
    exec 9>"${lock}"
    flock -n 9 || { log "${s}" "another build.sh holds ${lock}; waiting"; flock 9; }
    "step_${s}"
    exec 9>&-
  done
  log build "done"
}

main "$@"
