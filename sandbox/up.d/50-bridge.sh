#!/usr/bin/env bash
# up.d hook: start the pod bridge (python -m irsandbox.bridge), the sandbox's container runtime
# for vLLM pods: one llm-d-inference-sim process per pod on a KWOK node, Prometheus file_sd targets,
# the pod -> port map for the gateway. See docs/sandbox-bridge.md.
# Idempotent: a running bridge (PID file + this sandbox's marker) is left alone.
# Log: .sandbox/logs/bridge.log (simulators: .sandbox/logs/pods/); PID: .sandbox/pids/bridge.pid.
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PY="${IR_PYTHON:-${IR_REPO}/.venv/bin/python}"
[[ -x "${PY}" ]] || die "python ${PY} not found (make venv, or set IR_PYTHON)"

if pid="$(sandbox_pid "${IR_PIDS}/bridge.pid")"; then
  log bridge "already running (pid ${pid})"
  exit 0
fi

sim="${IR_SIM_BIN:-$(cached_bin "${SIM_BIN_NAME}" "${LLM_D_INFERENCE_SIM_VERSION}")}"
[[ -x "${sim}" ]] || die "llm-d-inference-sim not built: ${sim} (bash sandbox/build.sh sim)"

export PYTHONPATH="${IR_SANDBOX_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
rm -f "${IR_STATE}/bridge/status.json"
start_process bridge "${PY}" -m irsandbox.bridge --state-dir "${IR_STATE}" --sim-binary "${sim}"

bridge_synced() {
  local pid
  pid="$(sandbox_pid "${IR_PIDS}/bridge.pid")" || return 1
  jq -e --argjson pid "${pid}" '.pid == $pid and .synced' "${IR_STATE}/bridge/status.json"
}
wait_for "pod bridge to list pods and nodes" 60 "${IR_LOGS}/bridge.log" bridge_synced
log bridge "running (pid $(sandbox_pid "${IR_PIDS}/bridge.pid")), endpoint map ${IR_STATE}/bridge/endpoints.json"
