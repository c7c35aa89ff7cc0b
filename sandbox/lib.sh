# shellcheck shell=bash
# Helpers shared by sandbox/build.sh, sandbox/up.sh and sandbox/down.sh. Source it; do not run it.

IR_SANDBOX_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IR_REPO="$(cd "${IR_SANDBOX_DIR}/.." && pwd)"
IR_CACHE="${IR_CACHE:-${HOME}/.cache/inference-rollout}"
IR_STATE="${IR_STATE:-${IR_REPO}/.sandbox}"
IR_BIN="${IR_CACHE}/bin"
export IR_SANDBOX_DIR IR_REPO IR_CACHE IR_STATE IR_BIN
export GOTOOLCHAIN=local

# shellcheck source=sandbox/versions.env
source "${IR_SANDBOX_DIR}/versions.env"

# Fixed loopback ports (documented in docs/sandbox.md); each can be overridden from the environment.
IR_HOST=127.0.0.1
ETCD_CLIENT_PORT="${IR_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${IR_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${IR_APISERVER_PORT:-16443}"
CONTROLLER_MANAGER_PORT="${IR_CONTROLLER_MANAGER_PORT:-16257}"
SCHEDULER_PORT="${IR_SCHEDULER_PORT:-16259}"
KWOK_PORT="${IR_KWOK_PORT:-16080}"
PROMETHEUS_PORT="${IR_PROMETHEUS_PORT:-19090}"
GATEWAY_PORT="${IR_GATEWAY_PORT:-18080}"
METRICS_ADAPTER_PORT="${IR_METRICS_ADAPTER_PORT:-16445}"
# Traefik (up.d/65-traefik.sh): its web entry point (the Gateway's HTTP listener) and its
# metrics/ping entry point.
TRAEFIK_PORT="${IR_TRAEFIK_PORT:-18081}"
TRAEFIK_METRICS_PORT="${IR_TRAEFIK_METRICS_PORT:-18082}"
# Pods' IPs (KWOK's cidr, sandbox/kwok/kwok.yaml): local inside the sandbox's pod network namespace
# (sandbox/podnet.sh), reached from the host through the veth IR_POD_VETH; each pod's shim listens
# on <podIP>:<port> there, so EndpointSlices name addresses that answer.
IR_POD_CIDR="${IR_POD_CIDR:-10.244.0.0/16}"
IR_POD_NETNS="${IR_POD_NETNS:-inference-rollout-pods}"
IR_POD_VETH="${IR_POD_VETH:-irpods0}"
# One sandbox per machine (its ports, its pod network namespace): the checkout whose sandbox runs
# here is named in this file (claim_machine).
IR_MACHINE_OWNER="${IR_MACHINE_OWNER:-/run/inference-rollout/sandbox-owner}"
# The namespace whose ServiceAccounts' requests the API server's audit log records (up.sh).
IR_AUDITED_NAMESPACE=ir-tenancy-system
export IR_HOST ETCD_CLIENT_PORT ETCD_PEER_PORT APISERVER_PORT CONTROLLER_MANAGER_PORT \
  SCHEDULER_PORT KWOK_PORT PROMETHEUS_PORT GATEWAY_PORT METRICS_ADAPTER_PORT TRAEFIK_PORT \
  TRAEFIK_METRICS_PORT IR_POD_CIDR IR_POD_NETNS IR_POD_VETH IR_MACHINE_OWNER IR_AUDITED_NAMESPACE

IR_T0="${IR_T0:-$(date +%s)}"
export IR_T0

# log STEP MESSAGE...: one progress line with the elapsed seconds since the script started.
log() {
  local step="$1"
  shift
  printf '[%4ds] %-18s %s\n' "$(($(date +%s) - IR_T0))" "${step}" "$*" >&2
}

die() {
  printf 'ERROR: %s\n' "$*" >&2
  exit 1
}

# k8s_staging_version v1.37.2 -> v0.37.2
k8s_staging_version() {
  printf 'v0.%s\n' "${1#v1.}"
}

# llm-d-inference-sim as the sandbox builds it: patched to listen on 127.0.0.1 only (build.sh).
SIM_BIN_NAME=llm-d-inference-sim-loopback
# Traefik as the sandbox builds it: its HTTP server in full duplex, and a request body left unread
# finished before the handler returns (build.sh patch_traefik_full_duplex; issue 34). A new name per
# patch, so a cache holding an older build is not reused.
TRAEFIK_BIN_NAME=traefik-fullduplex-bodyclose
# KWOK as the sandbox builds it: a restarted KWOK knows the addresses its running pods hold
# (build.sh patch_kwok_mark_pod_ips).
KWOK_BIN_NAME=kwok-heldips

# Cached binary path for a tool at a version: $IR_CACHE/bin/<name>-<version>
cached_bin() {
  printf '%s/%s-%s\n' "${IR_BIN}" "$1" "$2"
}

# The binaries up.sh needs, as "name version" lines.
sandbox_binaries() {
  local k
  for k in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    printf '%s %s\n' "${k}" "${KUBERNETES_VERSION}"
  done
  printf '%s %s\n' etcd "${ETCD_VERSION}" "${KWOK_BIN_NAME}" "${KWOK_VERSION}" \
    "${SIM_BIN_NAME}" "${LLM_D_INFERENCE_SIM_VERSION}" "${TRAEFIK_BIN_NAME}" "${TRAEFIK_VERSION}" \
    prometheus "${PROMETHEUS_MODULE_VERSION}"
}

# Binaries only some tests need (the chart's tests: helm; autoscaling: prometheus-adapter):
# `make demo` does not build them (DEMO_BUILD_STEPS), `make test` does; up.sh links them when built.
optional_binaries() {
  printf '%s %s\n' helm "${HELM_VERSION}" prometheus-adapter "${PROMETHEUS_ADAPTER_VERSION}"
}

#: The build steps `make demo` needs (sandbox/build.sh STEP...): not helm, helm3, the metrics
#: adapter, or the peers.
# shellcheck disable=SC2034  # read by hack/demo.sh
DEMO_BUILD_STEPS=(apt crds kwok sim etcd kubernetes prometheus traefik)

# Is TCP PORT on 127.0.0.1 accepting connections?
port_open() {
  (exec 3<>"/dev/tcp/${IR_HOST}/$1") 2>/dev/null
}

# wait_for DESCRIPTION TIMEOUT_SECONDS LOGFILE CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local what="$1" timeout="$2" logfile="$3"
  shift 3
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if (($(date +%s) >= deadline)); then
      printf 'ERROR: timed out after %ss waiting for %s.\n' "${timeout}" "${what}" >&2
      if [[ -n "${logfile}" && -f "${logfile}" ]]; then
        printf '  Last lines of %s:\n' "${logfile}" >&2
        tail -n 20 "${logfile}" | sed 's/^/    /' >&2
      fi
      exit 1
    fi
    sleep 0.2
  done
}

# --- processes ------------------------------------------------------------------------------------
# Every process the sandbox starts carries IR_SANDBOX_STATE=<state dir> in its environment (and so
# do its children). down.sh only signals processes that carry this marker, so a PID reused by an
# unrelated process is never killed.
IR_PIDS="${IR_STATE}/pids"
IR_LOGS="${IR_STATE}/logs"
export IR_PIDS IR_LOGS

# sandbox_pid PIDFILE [STATE]: print the PID if it is alive and carries the marker of this sandbox
# (or of the sandbox whose state dir is STATE).
sandbox_pid() {
  local pidfile="$1" state="${2:-${IR_STATE}}" pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(head -n 1 "${pidfile}" 2>/dev/null)" || return 1
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/${pid}/environ" ]] || return 1
  grep -q '^State:[[:space:]]*Z' "/proc/${pid}/status" 2>/dev/null && return 1
  tr '\0' '\n' 2>/dev/null <"/proc/${pid}/environ" | grep -qxF "IR_SANDBOX_STATE=${state}" || return 1
  printf '%s\n' "${pid}"
}

# sandbox_alive STATE: does any process recorded under STATE/pids still run?
sandbox_alive() {
  local f
  for f in "$1"/pids/*.pid; do
    [[ -e "${f}" ]] && sandbox_pid "${f}" "$1" >/dev/null && return 0
  done
  return 1
}

# machine_owner: the state dir named in IR_MACHINE_OWNER (empty if none).
machine_owner() {
  [[ -f "${IR_MACHINE_OWNER}" ]] && sed -n 's/^state=//p' "${IR_MACHINE_OWNER}" | head -n 1
  return 0
}

# claim_machine: this checkout's sandbox is the machine's, unless another checkout's runs here; then
# say whose and stop (its ports, its pod network namespace and its CRDs are that checkout's).
claim_machine() {
  local other
  other="$(machine_owner)"
  if [[ -n "${other}" && "${other}" != "${IR_STATE}" ]] && sandbox_alive "${other}"; then
    die "this machine's sandbox belongs to another checkout (state ${other}, named in ${IR_MACHINE_OWNER}); one sandbox runs per machine. Use that checkout, or stop its sandbox first: bash $(dirname "${other}")/sandbox/down.sh"
  fi
  mkdir -p "$(dirname "${IR_MACHINE_OWNER}")"
  printf 'state=%s\nrepo=%s\n' "${IR_STATE}" "${IR_REPO}" >"${IR_MACHINE_OWNER}.tmp"
  mv "${IR_MACHINE_OWNER}.tmp" "${IR_MACHINE_OWNER}"
}

# release_machine: forget the claim, if it is this checkout's.
release_machine() {
  [[ "$(machine_owner)" != "${IR_STATE}" ]] || rm -f "${IR_MACHINE_OWNER}"
}

# start_process NAME CMD...: start CMD detached (own session, stdin closed), output appended to
# $IR_LOGS/NAME.log, PID in $IR_PIDS/NAME.pid. Returns at once; callers wait for health.
start_process() {
  local name="$1"
  shift
  local pidfile="${IR_PIDS}/${name}.pid" logfile="${IR_LOGS}/${name}.log"
  mkdir -p "${IR_PIDS}" "${IR_LOGS}"
  rm -f "${pidfile}.new"
  printf '\n==== %s start %s: %s\n' "$(date -u +%FT%TZ)" "${name}" "$*" >>"${logfile}"
  # shellcheck disable=SC2016 # $$, $0 and $@ are expanded by the inner bash
  IR_SANDBOX_STATE="${IR_STATE}" setsid bash -c 'printf "%s\n" "$$" >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' \
    "${pidfile}.new" "$@" >>"${logfile}" 2>&1 </dev/null 8>&- 9>&- &
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -s "${pidfile}.new" ]] && break
    sleep 0.05
  done
  [[ -s "${pidfile}.new" ]] || die "could not start ${name}; see ${logfile}"
  mv "${pidfile}.new" "${pidfile}"
}

# stop_process PIDFILE [GRACE_SECONDS]: SIGTERM the recorded process (if it is ours), SIGKILL after
# the grace period, then remove the PID file.
stop_process() {
  local pidfile="$1" grace="${2:-15}" name pid i
  name="$(basename "${pidfile}" .pid)"
  if ! pid="$(sandbox_pid "${pidfile}")"; then
    [[ -f "${pidfile}" ]] && log down "${name}: not running (stale PID file removed)"
    rm -f "${pidfile}"
    return 0
  fi
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    sandbox_pid "${pidfile}" >/dev/null || break
    sleep 0.1
  done
  if sandbox_pid "${pidfile}" >/dev/null; then
    log down "${name}: still alive after ${grace}s, SIGKILL ${pid}"
    kill -KILL "${pid}" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "${pidfile}"
  log down "${name}: stopped (pid ${pid})"
}

# lock_state: serialize up.sh and down.sh runs on one state dir (fd 8, released at exit).
lock_state() {
  mkdir -p "${IR_STATE}"
  exec 8>"${IR_STATE}/.lock"
  if ! flock -n 8; then
    log lock "another up.sh/down.sh is running on ${IR_STATE}; waiting"
    flock -w 600 8 || die "timed out waiting for ${IR_STATE}/.lock"
  fi
}

# apt_install_missing COMMAND:PACKAGE...: apt-get install (as root) the packages whose command is
# not on PATH; the log goes to $IR_CACHE/apt.log. No daemon may start from the package scripts:
# the sandbox runs its own on loopback ports, and the image tools need none.
apt_install_missing() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
  done
  if ((${#missing[@]} == 0)); then
    log apt "present: ${*%%:*}"
    return
  fi
  [[ "$(id -u)" == 0 ]] || die "need root to apt-get install ${missing[*]} (or install them yourself)"
  log apt "installing ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [[ ! -e "${policy}" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"${policy}"
    chmod +x "${policy}"
    created_policy=1
  fi
  local rc=0
  mkdir -p "${IR_CACHE}"
  {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  } >>"${IR_CACHE}/apt.log" 2>&1 || rc=$?
  ((created_policy)) && rm -f "${policy}"
  ((rc == 0)) || die "apt-get failed, see ${IR_CACHE}/apt.log"
  log apt "installed ${missing[*]} (log: ${IR_CACHE}/apt.log)"
}
