# Every target is a script in the repo: a fresh machine needs only `make demo` and `make test`.
SHELL := /bin/bash
PY ?= .venv/bin/python
export GOTOOLCHAIN := local

.PHONY: venv test unit lint sandbox-build sandbox-up sandbox-down sandbox-status tier-runs crd demo bench bench-peers bench-verdicts fuzz failover chaos chaos-sandbox

venv: .venv/.installed
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	touch $@

# The static checks hack/test.sh runs (it calls this target): every Python folder, bench/ and hack/ too.
lint: venv
	.venv/bin/ruff check operator tests sandbox hack bench
	.venv/bin/mypy
	.venv/bin/mypy tests/unit  # the unit tests, not strictly ([[tool.mypy.overrides]] tests.*)
	.venv/bin/lint-imports

# The unit tier runs under coverage and fails below a floor per group: the reconciler, the kopf
# handlers and the kubectl plugin (cli/ as a whole).  Each floor is a few points under what the
# unit tests reached (reconciler 92 %, handlers 93 %, cli/ 90 %); raise them as tests are added.
unit: venv
	$(PY) -m coverage run -m pytest tests/unit sandbox/tests -q -p no:cacheprovider
	$(PY) -m coverage report --fail-under=88 --include=operator/inference_rollout/reconciler.py
	$(PY) -m coverage report --fail-under=89 --include=operator/inference_rollout/handlers.py
	$(PY) -m coverage report --fail-under=86 --include='operator/inference_rollout/cli/*'

crd: venv
	$(PY) -m inference_rollout.api.crd > crds/rollouts.inference.dev_inferencerollouts.yaml
	cp crds/rollouts.inference.dev_inferencerollouts.yaml charts/inference-rollout/crds/

sandbox-build:
	bash sandbox/build.sh

sandbox-up: venv sandbox-build
	bash sandbox/up.sh

sandbox-down:
	bash sandbox/down.sh

# What runs and what died (each part's PID and uptime; a dead one's last log lines). Exit 1 if any died.
sandbox-status: venv
	PYTHONPATH=sandbox $(PY) -m irsandbox.components

# The README's test command: static checks, unit tests, then the sandbox tiers (hack/test.sh).
test:
	bash hack/test.sh

# The stability proof (docs/reliability.md): make demo, then make test TIER_RUNS times in a row on
# that one sandbox, with each run's result and the sandbox parts' PIDs in .sandbox/tier-runs/.
TIER_RUNS ?= 3
tier-runs:
	bash hack/tier-runs.sh $(TIER_RUNS)

# The README's first command: the sandbox, the operator, and two releases (hack/demo.sh).
demo: venv  # hack/demo.sh builds only the steps the demo needs (DEMO_BUILD_STEPS)
	bash hack/demo.sh

# Benchmarks on a running sandbox (make sandbox-up): DESIGN §9's numbers, method and latest results
# in docs/benchmarks.md; JSON results in .sandbox/bench/.  BENCH_SCALE=500 for the full scale run.
BENCH_SCALE ?= 100
bench: venv
	$(PY) bench/rollback_latency.py
	$(PY) bench/breach_to_rollback.py
	$(PY) bench/scale.py --rollouts $(BENCH_SCALE)

# Side by side with Flagger and Argo Rollouts on a running sandbox (issue 15; needs
# `bash sandbox/build.sh peers` once, and for the API-request counts a sandbox started with
# IR_APISERVER_AUDIT=1): the same bad and good releases under each; docs/benchmarks.md §5.
PEERS_RUNS ?= 5
PEERS_SCENARIOS ?= bad-ttft,good,bad-errors,noisy-good,low-ttft,low-good,low-ttft-probes
# each run's raw results kept in the repository (docs tables are generated from them: bench/doc_tables.py)
PEERS_OUT ?= bench/results/$(shell date -u +%F)-$(shell git rev-parse --short HEAD)/peers-$(shell date -u +%H%M%S).json
bench-peers: venv
	$(PY) -m bench.peers --runs $(PEERS_RUNS) --scenarios $(PEERS_SCENARIOS) --out $(PEERS_OUT)

# Verdicts at low traffic (pure, no sandbox, a few minutes on one core): the Sequential rule
# beside the Window rule over thousands of simulated releases; table in docs/benchmarks.md.
VERDICT_RELEASES ?= 1000
bench-verdicts: venv
	$(PY) bench/verdicts.py --releases $(VERDICT_RELEASES) --json .sandbox/bench/verdicts.json

# Fuzzed manifests at volume (no sandbox: a bare etcd + kube-apiserver from the sandbox's cache):
# the models, lints, core and CLI, then the CRD's schema and CEL on a real API server compared with
# the models. `make test` runs the same tests at 300/150 manifests. Figures: docs/reliability.md.
FUZZ_MANIFESTS ?= 10000
fuzz: venv
	FUZZ_MANIFESTS=$(FUZZ_MANIFESTS) $(PY) -m pytest tests/unit/test_manifest_fuzz.py tests/integration/test_crd_fuzz.py -q -s -p no:cacheprovider

# Leader failover time with two operator replicas (no sandbox; docs/reliability.md).
failover: venv
	$(PY) bench/failover.py --rounds 10 --json .sandbox/bench/failover.json

# A bounded chaos run (no sandbox): releases under leader SIGKILLs, an API server and an etcd
# restart; checks steps and writers from the audit log (docs/reliability.md).
CHAOS_SECONDS ?= 240
chaos: venv
	$(PY) bench/chaos.py --rollouts 6 --seconds $(CHAOS_SECONDS) --json .sandbox/bench/chaos.json

# The long chaos run on a running sandbox (make sandbox-up): 20 rollouts, good and bad canaries,
# two replicas, 100 SIGKILLs, Prometheus down 5 min, API server/etcd/gateway restarts; about
# 20 minutes (docs/reliability.md).
chaos-sandbox: venv
	$(PY) bench/chaos_sandbox.py --json .sandbox/bench/chaos-sandbox.json
