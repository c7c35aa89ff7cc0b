#!/usr/bin/env bash
# The sandbox's stability proof, as a newcomer runs it: `make demo`, then `make test` N times in a
# row on that one sandbox (nothing restarted in between), recording each step's exit code, its
# closing pytest line, and the PIDs of the sandbox's parts before and after (a part that died and
# was started again shows as a new PID). docs/reliability.md keeps the results.
# Usage: hack/tier-runs.sh [RUNS] [OUT_DIR]     (default 3 runs, .sandbox/tier-runs/<time>)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export GOTOOLCHAIN=local
runs="${1:-3}"
out="${2:-.sandbox/tier-runs/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "${out}"
summary="${out}/summary"

pids() {
  local p
  for p in traefik prometheus kube-apiserver etcd bridge gateway nginx kwok; do
    printf '%s=%s ' "${p}" "$(head -n1 ".sandbox/pids/${p}.pid" 2>/dev/null)"
  done
}
note() { printf '%s\n' "$*" | tee -a "${summary}"; }

note "commit $(git rev-parse --short HEAD), ${runs} runs, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
note "demo start $(date -u +%T)"
make demo >"${out}/demo.log" 2>&1
note "demo exit $? end $(date -u +%T) pids: $(pids)"
for ((i = 1; i <= runs; i++)); do
  note "test${i} start $(date -u +%T) pids: $(pids)"
  make test >"${out}/test${i}.log" 2>&1
  rc=$?
  note "test${i} exit ${rc} end $(date -u +%T) pids: $(pids) :: $(grep -E '[0-9]+ (passed|failed)' "${out}/test${i}.log" | tail -n 2 | tr '\n' '|')"
done
PYTHONPATH=sandbox .venv/bin/python -m irsandbox.components | tee -a "${summary}"
note "done $(date -u +%T)"
