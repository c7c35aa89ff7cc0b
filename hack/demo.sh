#!/usr/bin/env bash
# `make demo`: bring the sandbox up (building it the first time), then run the demo driver.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
make -s venv
bash sandbox/build.sh
bash sandbox/up.sh
exec .venv/bin/python hack/demo.py "$@"
