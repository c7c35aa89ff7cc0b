#!/usr/bin/env bash
# The README's test command (`make test`) runs this: static checks, the unit tier, then the
# integration and sandbox tiers on a local cluster built from real parts.  It installs what it
# needs (Python venv, Debian packages, the Go-built binaries cached outside the repo), starts the
# sandbox if it is not running, and stops it again afterwards if it started it.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
PY=.venv/bin/python

step() { printf '\n=== %s (%ds)\n' "$1" "$SECONDS"; }

step "python environment and tools"
make -s venv
if ! command -v shellcheck >/dev/null; then   # the kind script is checked, not run (no Docker)
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck
fi

step "static checks: ruff, mypy (strict on core/api/budget), layering contracts"
.venv/bin/ruff check $(ls -d operator tests sandbox hack bench 2>/dev/null)
.venv/bin/mypy
.venv/bin/lint-imports

step "unit tests (the operator's, and the sandbox's own beside it)"
$PY -m pytest tests/unit sandbox/tests -q -p no:cacheprovider

step "sandbox: build (cached) and start"
started_here=1
if [ -f .sandbox/env ] && (source .sandbox/env && kubectl get --raw /readyz >/dev/null 2>&1); then
  started_here=0   # a sandbox was already running: leave it running afterwards
fi
bash sandbox/build.sh
bash sandbox/up.sh   # idempotent: starts only what is not running
cleanup() { if [ "$started_here" = 1 ] && [ -z "${KEEP_SANDBOX:-}" ]; then bash sandbox/down.sh || true; fi; }
trap cleanup EXIT

step "integration, sandbox and end-to-end tests"
$PY -m pytest tests -q -p no:cacheprovider --ignore=tests/unit "$@"
step "done"
