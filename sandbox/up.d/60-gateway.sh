#!/usr/bin/env bash
# up.d hook: start the nginx translator (python -m irsandbox.gateway), which renders nginx config
# from HTTPRoutes and runs nginx on NGINX_GATEWAY_URL (127.0.0.1:18080): the sandbox keeps it for
# InferencePool backends and as the tests' service proxy; Traefik (up.d/65-traefik.sh) is the
# sandbox's gateway (GATEWAY_URL). See docs/sandbox-bridge.md. Routes whose only parent is
# Traefik's Gateway (gateway-system/traefik) are Traefik's: the translator neither serves them
# nor writes their status.
# Idempotent: a running controller is left alone (it adopts a running nginx after a restart).
# Logs: .sandbox/logs/gateway.log, nginx-error.log, nginx-access.log;
# PIDs: .sandbox/pids/gateway.pid (controller), .sandbox/pids/nginx.pid (nginx master).
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PY="${IR_PYTHON:-${IR_REPO}/.venv/bin/python}"
[[ -x "${PY}" ]] || die "python ${PY} not found (make venv, or set IR_PYTHON)"
NGINX="$(command -v nginx || true)"
[[ -n "${NGINX}" ]] || NGINX=/usr/sbin/nginx
[[ -x "${NGINX}" ]] || die "nginx is not installed (bash sandbox/build.sh apt)"

port="${IR_GATEWAY_PORT:-${GATEWAY_PORT}}"
healthz="http://${IR_HOST}:${port}/-/gateway/healthz"

if pid="$(sandbox_pid "${IR_PIDS}/gateway.pid")"; then
  log gateway "already running (pid ${pid})"
  exit 0
fi
# Our nginx (left by a killed controller; the new one adopts it). nginx overwrites its environment
# (setproctitle), so it is recognised by its command line, which names our prefix.
our_nginx() {
  local pid
  pid="$(head -n 1 "${IR_PIDS}/nginx.pid" 2>/dev/null)" || return 1
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "-p ${IR_STATE}/nginx "
}
# a port held by something that is not our nginx is a conflict, not ours to kill
if port_open "${port}" && ! our_nginx; then
  die "port ${port} is taken by another process; free it or set GATEWAY_PORT"
fi

export PYTHONPATH="${IR_SANDBOX_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
rm -f "${IR_STATE}/gateway/state.json"
start_process gateway "${PY}" -m irsandbox.gateway --state-dir "${IR_STATE}" \
  --listen "${IR_HOST}:${port}" --nginx "${NGINX}" --foreign-gateway gateway-system/traefik

wait_for "gateway (nginx on ${IR_HOST}:${port})" 60 "${IR_LOGS}/gateway.log" \
  curl -sf --max-time 1 "${healthz}"
wait_for "gateway state" 30 "${IR_LOGS}/gateway.log" test -s "${IR_STATE}/gateway/state.json"
log gateway "running (pid $(sandbox_pid "${IR_PIDS}/gateway.pid"), nginx pid $(cat "${IR_PIDS}/nginx.pid" 2>/dev/null)) on http://${IR_HOST}:${port}"
