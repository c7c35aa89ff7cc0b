#!/usr/bin/env bash
# `make demo`: bring the sandbox up (building it the first time), then run the demo driver.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
make -s venv
# shellcheck source=sandbox/lib.sh
source sandbox/lib.sh
bash sandbox/build.sh "${DEMO_BUILD_STEPS[@]}"  # only what the demo needs (make test builds all)
bash sandbox/up.sh
exec .venv/bin/python hack/demo.py "$@"
