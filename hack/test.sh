#!/usr/bin/env bash
# The README's test command (`make test`) runs this: static checks, the unit tier, the operator
# image's build, then the integration, sandbox, end-to-end and image tiers on a local cluster built
# from real parts.  It installs what it needs (Python venv, Debian packages, the Go-built binaries
# and the image's base cached outside the repo), starts the sandbox if it is not running, and stops
# it again afterwards if it started it.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
PY=.venv/bin/python

step() { printf '\n=== %s (%ds)\n' "$1" "$SECONDS"; }

step "python environment and tools"
make -s venv
missing=()
command -v shellcheck >/dev/null || missing+=(shellcheck)  # the kind script is checked, not run
command -v chromium >/dev/null || missing+=(chromium)  # renders the release report (integration)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# Debian's nginx and Prometheus: the unit tier checks rendered nginx configs with nginx itself
# (sandbox/tests), and the integration tier runs Prometheus; installed before them, never skipped.
bash sandbox/build.sh apt

step "static checks: ruff, mypy (strict on core/api/budget; the unit tests too), layering contracts"
make -s lint  # one definition (Makefile), so a local `make lint` checks what CI checks

step "unit tests (the operator's, and the sandbox's own beside it)"
make -s unit  # under coverage, with floors for the reconciler, handlers and CLI (Makefile)

step "operator image: build from the Dockerfile with buildah (cached base; at most 15 min)"
# No Docker needed: Debian's buildah, a base from Debian packages (docs/install.md). tests/image
# runs the image on the sandbox below.
timeout 900 bash hack/build-image.sh

step "sandbox: build (cached) and start"
started_here=1
if [ -f .sandbox/env ] && (source .sandbox/env && kubectl get --raw /readyz >/dev/null 2>&1); then
  started_here=0   # a sandbox was already running: leave it running afterwards
fi
bash sandbox/build.sh
bash sandbox/up.sh   # idempotent: starts only what is not running
cleanup() { if [ "$started_here" = 1 ] && [ -z "${KEEP_SANDBOX:-}" ]; then bash sandbox/down.sh || true; fi; }
trap cleanup EXIT

step "integration, sandbox, end-to-end and image tests"
# tests/gitops needs Argo CD, which make test does not build (its cold build would take the CI run
# past 60 min): make test-gitops runs it (docs/gitops.md).
$PY -m pytest tests -q -p no:cacheprovider --ignore=tests/unit --ignore=tests/gitops "$@"
step "done"
