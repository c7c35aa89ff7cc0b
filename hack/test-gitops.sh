#!/usr/bin/env bash
# The GitOps tier (`make test-gitops`, docs/gitops.md): builds Argo CD (cached; ≈ 12–25 min cold on
# 2 cores, which is why `make test` does not), starts the sandbox if it is not running and Argo CD
# on it (sandbox/argocd-up.sh), then runs tests/gitops. A sandbox it started is stopped afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
make -s venv
bash sandbox/build.sh apt crds kwok sim etcd kubernetes prometheus traefik helm3 argocd
started_here=1
# shellcheck disable=SC1091
if [ -f .sandbox/env ] && (source .sandbox/env && kubectl get --raw /readyz >/dev/null 2>&1); then
  started_here=0
fi
bash sandbox/up.sh
cleanup() { if [ "$started_here" = 1 ] && [ -z "${KEEP_SANDBOX:-}" ]; then bash sandbox/down.sh || true; fi; }
trap cleanup EXIT
bash sandbox/argocd-up.sh
# shellcheck disable=SC1091
source .sandbox/env
.venv/bin/python -m pytest tests/gitops -q -p no:cacheprovider "$@"
