#!/usr/bin/env bash
# Stop the sandbox: exactly the processes recorded in .sandbox/pids/*.pid (each checked to carry
# this sandbox's IR_SANDBOX_STATE marker before it is signalled), hooks' processes first, then the
# control plane in reverse start order. Idempotent. State (etcd data, certs) is kept for the next
# up.sh unless --purge is given, which deletes .sandbox/ entirely.
# Usage: sandbox/down.sh [--purge]
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=sandbox/podnet.sh
source "${IR_SANDBOX_DIR}/podnet.sh"

purge=0
for arg in "$@"; do
  case "${arg}" in
    --purge) purge=1 ;;
    *) die "usage: sandbox/down.sh [--purge]" ;;
  esac
done

if [[ ! -d "${IR_STATE}" ]]; then
  log down "no sandbox state at ${IR_STATE}; nothing to stop"
  exit 0
fi
lock_state

# Started by up.sh in this order; stopped in the reverse one.
CORE=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok prometheus)

is_core() {
  local c
  for c in "${CORE[@]}"; do [[ "$1" == "${c}" ]] && return 0; done
  return 1
}

if [[ -d "${IR_PIDS}" ]]; then
  # 1. Whatever the up.d hooks started (pod bridge, gateway, ...).
  for pidfile in "${IR_PIDS}"/*.pid; do
    [[ -e "${pidfile}" ]] || continue
    is_core "$(basename "${pidfile}" .pid)" || stop_process "${pidfile}"
  done
  # 2. The control plane, last started first.
  for ((i = ${#CORE[@]} - 1; i >= 0; i--)); do
    stop_process "${IR_PIDS}/${CORE[i]}.pid"
  done
fi

# 3. Children the recorded processes left behind (e.g. simulators of a killed pod bridge): they
#    inherited the IR_SANDBOX_STATE marker, so they are ours. Report and stop them.
self_and_ancestors=" $$ "
p=$$
while [[ "${p}" -gt 1 ]]; do
  p="$(awk '/^PPid:/{print $2}' "/proc/${p}/status" 2>/dev/null || echo 1)"
  self_and_ancestors+="${p} "
done
has_marker() {
  tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "IR_SANDBOX_STATE=${IR_STATE}" &&
    ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
leftover=()
for env in /proc/[0-9]*/environ; do
  pid="${env#/proc/}" && pid="${pid%/environ}"
  [[ "${self_and_ancestors}" == *" ${pid} "* ]] && continue
  has_marker "${pid}" && leftover+=("${pid}")
done
if ((${#leftover[@]})); then
  for pid in "${leftover[@]}"; do
    log down "leftover sandbox process ${pid}: $(tr '\0' ' ' 2>/dev/null <"/proc/${pid}/cmdline" | cut -c1-120)"
    kill -TERM "${pid}" 2>/dev/null || true
  done
  sleep 1
  for pid in "${leftover[@]}"; do
    if has_marker "${pid}"; then kill -KILL "${pid}" 2>/dev/null || true; fi
  done
fi

# 4. The pod network (its namespace, veth and route), once nothing listens in it; and the claim on
#    the machine. Another checkout's namespace is left alone.
other="$(machine_owner)"
if [[ -z "${other}" || "${other}" == "${IR_STATE}" ]] || ! sandbox_alive "${other}"; then
  podnet_down
fi
release_machine

if ((purge)); then
  [[ "${IR_STATE}" == */.sandbox || -n "${IR_STATE_PURGE_OK:-}" ]] ||
    die "refusing to delete ${IR_STATE} (not named .sandbox); set IR_STATE_PURGE_OK=1 to force"
  rm -rf "${IR_STATE}"
  log down "purged ${IR_STATE}"
fi
log down "sandbox stopped"
