#!/usr/bin/env bash
# Stop what sandbox/argocd-up.sh started (its processes only; the sandbox keeps running, and
# sandbox/down.sh would stop them too). Argo CD's objects stay in the API server.
set -euo pipefail

# shellcheck source=sandbox/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for name in argocd-server argocd-application-controller argocd-repo-server argocd-redis git-daemon; do
  stop_process "${IR_PIDS}/${name}.pid"
done
rm -f "${IR_STATE}/argocd/env"
log argocd "stopped"
