# perfwatch — the two commands: `make demo` and `make test`. Each bootstraps itself and is idempotent.
# While working: `make check` (lint, format, types, import cycles, the manual's build) and `make test-fast` (the unit tests: no TensorFlow, no Airflow).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PY ?= python3
ROOT := $(CURDIR)
UV := $(shell command -v uv 2>/dev/null || echo $(ROOT)/.venv-uv/bin/uv)
VENV := $(ROOT)/.venv
export PERFWATCH_HOME ?= $(ROOT)/.perfwatch
export AIRFLOW_HOME ?= $(ROOT)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(ROOT)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(ROOT)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__UNIT_TEST_MODE := False
export TF_CPP_MIN_LOG_LEVEL := 2
export GX_ANALYTICS_ENABLED := false
export PYTHONPATH := $(ROOT)
AIRFLOW := $(VENV)/bin/airflow
PERFWATCH := $(VENV)/bin/perfwatch
DEMO_MODEL := demo_mobilenet
# The demo asks for 100 measured steps (default 320, sized for 5% on this noisy CPU): its v2 is about x2 slower
# (paired gates on the 2-core dev machine: x1.74-1.76 by wall time quiet and at 1-min load 1.5-3, up to x2.1 at
# load 3; x1.90-2.07 by CPU time).
DEMO_STEPS := 100
# A measurement on a busy host is taken again later (the DAG's measure task: PERFWATCH_HOST_BUSY_RETRIES tries,
# PERFWATCH_HOST_BUSY_RETRY_DELAY_S apart, 600 s for the nightly). The demo waits 60 s instead: a second `make
# demo` on a busy host (v1 then has a baseline to be judged against) waited 2 x 10 min before it went on; now it
# shows the retry and goes on within minutes, the last try archived `inconclusive (host busy)`.
DEMO_BUSY_RETRY_S := 60
# What a DAG run is doing, read from its log as it is written (the full log stays in the file): each task's
# start and end, and perfwatch's own lines (each stage's start, warm-up / measured-step / profiling / paired-round
# progress, a busy host's wait for the retry and until when) with their UTC time; the scheduler's "No tasks to
# run" warning, once a second while a retry waits, folded into a line a minute (tasks/cli/follow.py).
DEMO_FOLLOW := $(PERFWATCH) demo follow

.PHONY: demo test test-fast check bootstrap airflow-init airflow ui env lint bench clean gpu-runner gpu-runner-lock \
	gpu-runner-lock-check

$(UV):
	$(PY) -m venv $(ROOT)/.venv-uv
	$(ROOT)/.venv-uv/bin/pip install -q uv

# Quiet: uv prints only errors (a fresh sync lists ~200 packages otherwise). --compile-bytecode: uv leaves the
# .pyc files out by default, and where PYTHONDONTWRITEBYTECODE is set (CI runners, containers) Python never writes
# them, so every process compiled TensorFlow's sources again: `import tensorflow` took 11.3 s of CPU, 4.9-5.3 s
# with the bytecode (2-core dev machine, load 3.7), in every runner process, test and DAG task.
$(VENV)/.synced: pyproject.toml uv.lock Makefile | $(UV)
	@echo "== installing the locked environment into .venv (uv sync --frozen; the first time downloads TensorFlow and Airflow, a few minutes)"
	@$(UV) sync --frozen --quiet --compile-bytecode --python $(PY)
	@touch $@

bootstrap: $(VENV)/.synced

# The GPU runner's environment (docs/gpu.md): TensorFlow's CUDA build and its nvidia-* wheels, for
# PERFWATCH_RUNNER_PYTHON on a GPU host (the Dockerfile's gpu target installs the same lock). The lock,
# gpu-runner/requirements.txt, is resolved from gpu-runner/requirements.in within uv.lock's versions (so the
# runner's numpy, protobuf, keras... are the project's), for CPython 3.11 on manylinux_2_28, with hashes; its
# resolution reads the registry's metadata only, no wheel (tests/unit/test_deployment.py checks it is current).
# It sees only releases before GPU_LOCK_DATE, so a new nvidia-* wheel on PyPI changes nothing until the date moves.
GPU_RUNNER ?= $(ROOT)/.venv-gpu
GPU_LOCK := gpu-runner/requirements.txt
GPU_LOCK_DATE := 2026-12-04T00:00:00Z
GPU_LOCK_RESOLVE = $(UV) pip compile gpu-runner/requirements.in --quiet --no-header --generate-hashes \
	--python-version 3.11 --python-platform x86_64-manylinux_2_28 --exclude-newer $(GPU_LOCK_DATE) \
	--constraints <($(UV) export --frozen --quiet --no-dev --no-hashes --no-emit-project --no-header)

gpu-runner: | $(UV)
	$(UV) venv --quiet --python 3.11 $(GPU_RUNNER)
	$(UV) pip install --quiet --compile-bytecode --require-hashes --python $(GPU_RUNNER)/bin/python -r $(GPU_LOCK)
	@echo "the GPU runner is ready: export PERFWATCH_RUNNER_PYTHON=$(GPU_RUNNER)/bin/python"

gpu-runner-lock: | $(UV)
	$(GPU_LOCK_RESOLVE) --output-file $(GPU_LOCK)

# Compared as pins and hashes only (comments, spacing and line continuations stripped): another uv writes
# another layout of the same lock.
GPU_LOCK_PINS = sed -e 's/\#.*//' -e 's/[[:space:]\\]*$$//' -e 's/^[[:space:]]*//' | grep -v '^$$'
gpu-runner-lock-check: | $(UV)
	@diff <($(GPU_LOCK_RESOLVE) --output-file /dev/stdout | $(GPU_LOCK_PINS)) <(cat $(GPU_LOCK) | $(GPU_LOCK_PINS)) | head -20 && \
	  cmp -s <($(GPU_LOCK_RESOLVE) --output-file /dev/stdout | $(GPU_LOCK_PINS)) <(cat $(GPU_LOCK) | $(GPU_LOCK_PINS)) || \
	  { echo "$(GPU_LOCK) is not what gpu-runner/requirements.in resolves to: run make gpu-runner-lock"; exit 1; }

$(AIRFLOW_HOME)/.initialised: $(VENV)/.synced
	mkdir -p $(AIRFLOW_HOME)
	$(AIRFLOW) db migrate > $(AIRFLOW_HOME)/db-migrate.log 2>&1 || (tail -30 $(AIRFLOW_HOME)/db-migrate.log; exit 1)
	$(AIRFLOW) pools set perfwatch_profile 1 "perfwatch: one profiled run at a time" > /dev/null
	touch $@

airflow-init: $(AIRFLOW_HOME)/.initialised

# The Airflow UI on this machine (alias: make ui): api-server, scheduler and dag-processor with this Makefile's
# environment (LocalExecutor with 4 task slots, not 32 idle processes; the SQLite metadata DB in AIRFLOW_HOME),
# each logging to $(AIRFLOW_HOME)/logs/.
# Ctrl-C stops all three (each in its own process group: SIGTERM, after 30 s SIGKILL). Another port: make airflow AIRFLOW_PORT=8081
# The api-server listens on this machine only (127.0.0.1; Airflow's own default is 0.0.0.0, every interface):
# make airflow AIRFLOW_HOST=0.0.0.0 opens it to the network. Once the three are up, `perfwatch doctor` checks that
# a task can run (the components agree on the JWT secret, the pool exists, the DAGs are parsed).
AIRFLOW_PORT ?= 8080
AIRFLOW_HOST ?= 127.0.0.1
AIRFLOW_PROBE_HOST := $(if $(filter 0.0.0.0 :: [::],$(AIRFLOW_HOST)),127.0.0.1,$(AIRFLOW_HOST))
AIRFLOW_URL := http://$(if $(findstring :,$(AIRFLOW_PROBE_HOST)),[$(AIRFLOW_PROBE_HOST)],$(AIRFLOW_PROBE_HOST)):$(AIRFLOW_PORT)
AIRFLOW_PASSWORDS := $(AIRFLOW_HOME)/simple_auth_manager_passwords.json.generated
airflow ui: airflow-init
	@mkdir -p $(AIRFLOW_HOME)/logs
	@export AIRFLOW__API__HOST=$(AIRFLOW_HOST) AIRFLOW__API__PORT=$(AIRFLOW_PORT) AIRFLOW__CORE__PARALLELISM=$${AIRFLOW__CORE__PARALLELISM:-4}; \
	export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=$${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-$(AIRFLOW_URL)/execution/}; \
	pids=; stop() { kill -TERM -- $$(printf ' -%s' $$pids) 2> /dev/null || true; \
	  for _ in $$(seq 30); do kill -0 $$pids 2> /dev/null || break; sleep 1; done; \
	  kill -KILL -- $$(printf ' -%s' $$pids) 2> /dev/null || true; }; \
	trap stop EXIT; trap 'echo "== stopping Airflow"; exit 0' INT TERM; \
	for c in api-server scheduler dag-processor; do setsid $(AIRFLOW) $$c > $(AIRFLOW_HOME)/logs/$$c.log 2>&1 & pids="$$pids $$!"; done; \
	echo "== starting Airflow's api-server, scheduler and dag-processor (logs: $(AIRFLOW_HOME)/logs/<name>.log)"; \
	until $(VENV)/bin/python -c "import urllib.request as u; u.urlopen('$(AIRFLOW_URL)/api/v2/monitor/health', timeout=2)" 2> /dev/null; do \
	  if [ "$$(jobs -r | wc -l)" -lt 3 ]; then echo "an Airflow component exited:"; tail -n 15 $(AIRFLOW_HOME)/logs/*.log; exit 1; fi; sleep 2; \
	done; \
	echo "== Airflow UI: $(AIRFLOW_URL) (listening on $(AIRFLOW_HOST); another: make airflow AIRFLOW_HOST=0.0.0.0)"; \
	echo "   login: user admin, password $$($(VENV)/bin/python -c "import json; print(json.load(open('$(AIRFLOW_PASSWORDS)'))['admin'])")"; \
	echo "   (the simple auth manager generated it on first start; it is kept in $(AIRFLOW_PASSWORDS))"; \
	echo "   The DAG perfwatch_profile starts paused: unpause it with its toggle (Dags page; this also starts the"; \
	echo "   latest nightly run over config/perfwatch.yaml), then trigger it with the play button (Params: model,"; \
	echo "   version, ...), or from another shell in this directory:"; \
	echo "     eval \"\$$(make -s env)\"; airflow dags unpause perfwatch_profile"; \
	echo "     airflow dags trigger perfwatch_profile -c '{\"model\": \"$(DEMO_MODEL)\", \"version\": \"1\"}'"; \
	echo "   (make demo builds the $(DEMO_MODEL) model store). Ctrl-C stops Airflow."; \
	echo "== perfwatch doctor: the store, the DAGs and pool, and a trivial task through this Airflow"; \
	$(PERFWATCH) doctor --airflow-url $(AIRFLOW_URL) --airflow-user admin --dag-wait 180 \
	  --airflow-password "$$($(VENV)/bin/python -c "import json; print(json.load(open('$(AIRFLOW_PASSWORDS)'))['admin'])")" \
	  || echo "   perfwatch doctor found a problem (above: FAIL lines name the cause); Airflow keeps running"; \
	wait -n || true; echo "an Airflow component exited:"; tail -n 15 $(AIRFLOW_HOME)/logs/*.log; exit 1

# eval "$$(make -s env)": this shell gets the make targets' environment (AIRFLOW_HOME, DAGS_FOLDER, ...) and
# .venv/bin on PATH, so that `airflow ...` and `perfwatch ...` commands work as the README and the manual (docs/) write them.
# (Setting up, make airflow-init's messages go to stderr: stdout is only the exports.)
env:
	@$(MAKE) --no-print-directory airflow-init >&2
	@export -p | grep -E '^declare -x (PERFWATCH_[A-Z_]+|AIRFLOW_HOME|AIRFLOW__[A-Z_]+|TF_CPP_MIN_LOG_LEVEL|GX_ANALYTICS_ENABLED|PYTHONPATH)='
	@echo 'export PATH="$(VENV)/bin:$$PATH"'

# Whatever happened (building the model store failed, a DAG run failed, the check failed), the demo ends with the
# runs table and each verdict's reason; it exits 1 when the model store could not be built (then no DAG run is
# tried), DAG run 1 failed (then DAG run 2 is not tried) or the check failed.
demo: airflow-init
	@status=0; \
	echo "== the demo's model store ($(PERFWATCH) demo build-store)"; \
	$(PERFWATCH) demo build-store || { status=1; echo "   (building the demo's model store failed: no DAG run is tried)"; }; \
	if [ $$status = 0 ]; then \
	  echo "== DAG run 1: $(DEMO_MODEL) version 1 (on a fresh store it becomes the baseline if measured soundly; later runs join its history)"; \
	  echo "   (full log: $(PERFWATCH_HOME)/demo-v1.log)"; \
	  PERFWATCH_HOST_BUSY_RETRY_DELAY_S=$(DEMO_BUSY_RETRY_S) $(AIRFLOW) dags test perfwatch_profile -c '{"model": "$(DEMO_MODEL)", "version": "1", "measured_steps": $(DEMO_STEPS)}' 2>&1 \
	    | tee $(PERFWATCH_HOME)/demo-v1.log | $(DEMO_FOLLOW) \
	    || { tail -40 $(PERFWATCH_HOME)/demo-v1.log; echo "   (DAG run 1 ended failed: the last 40 lines of its log above; the demo goes on when version 1 has a successful run: a busy host's inconclusive one)"; }; \
	fi; \
	if [ $$status = 0 ]; then \
	  $(PERFWATCH) demo baseline --model $(DEMO_MODEL) || status=1; \
	fi; \
	if [ $$status = 0 ]; then \
	  echo "== DAG run 2: $(DEMO_MODEL) version 2 (heavier: expected to be flagged; the DAG run then fails by design)"; \
	  echo "   (full log: $(PERFWATCH_HOME)/demo-v2.log)"; \
	  PERFWATCH_HOST_BUSY_RETRY_DELAY_S=$(DEMO_BUSY_RETRY_S) $(AIRFLOW) dags test perfwatch_profile -c '{"model": "$(DEMO_MODEL)", "version": "2", "trigger": "release", "measured_steps": $(DEMO_STEPS)}' 2>&1 \
	    | tee $(PERFWATCH_HOME)/demo-v2.log | $(DEMO_FOLLOW) || echo "   (DAG run 2 ended failed — see $(PERFWATCH_HOME)/demo-v2.log)"; \
	  $(PERFWATCH) demo check --model $(DEMO_MODEL) || status=1; \
	fi; \
	echo "== the demo's runs (perfwatch runs --model $(DEMO_MODEL) --last 2), each verdict's reason below the table"; \
	$(PERFWATCH) runs --model $(DEMO_MODEL) --last 2 || status=1; \
	exit $$status

# Two worker processes (pytest-xdist; tests/conftest.py gives each its own PostgreSQL test database and its own
# copy of AIRFLOW_HOME, and keeps the tests that share Redis on one worker: --dist loadgroup). --durations: the 25 slowest
# tests, printed at the end (where the 20-minute budget goes).
test: airflow-init
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup --durations=25

# The unit tests (tests/unit): pure Python, SQLite (PostgreSQL too when PERFWATCH_TEST_DATABASE_URL is set),
# no TensorFlow runner and no Airflow services, in two xdist workers; the marker filter keeps a slow or live test out
# if one lands there (2 min 2 s here without PostgreSQL, 2 min 54 s with it, 2026-12-05: the 60-s target is not met).
test-fast: airflow-init
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup -m "not slow and not airflow_live" tests/unit

# What CI checks before the tests (.ci/run) and pre-commit runs on commit: lint, format, types ([tool.mypy]; and a negative
# fixture, tests/typecheck/wrong_records.py, that mypy must reject, so a lost pydantic plugin setting fails), no import
# cycle anywhere in the tree, function-level imports included (.ci/import_cycles.py, on grimp's import graph;
# tests/unit/test_import_cycles.py shows it naming a deliberate cycle of each kind), and the
# manual (docs/, mkdocs.yml): --strict fails on any warning, a link to a missing page or anchor included (not with
# --quiet, which hides the warnings and passes). The site goes to a temporary directory, removed after.
check: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python .ci/import_cycles.py
	@out=$$($(VENV)/bin/mypy tests/typecheck/wrong_records.py 2>&1) && { echo "mypy accepted tests/typecheck/wrong_records.py: the pydantic plugin's init_typed is off"; exit 1; }; \
	for want in 'wrong_records.py:12: error: Argument "cold_step_ms"' 'wrong_records.py:13: error: Argument "batch_size"' \
	  'wrong_records.py:14: error: Unexpected keyword argument "no_such_field"'; do \
	  grep -qF "$$want" <<< "$$out" || { echo "mypy missed a wrongly typed record ($$want):"; echo "$$out"; exit 1; }; \
	done; echo "mypy rejects the three wrongly typed records of tests/typecheck/wrong_records.py"
	@site=$$(mktemp -d); trap 'rm -rf "$$site"' EXIT; \
	out=$$($(VENV)/bin/mkdocs build --strict --site-dir "$$site" 2>&1) || { echo "$$out"; exit 1; }; \
	echo "mkdocs build --strict: the manual (docs/) builds without a warning"

lint: bootstrap
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(PERFWATCH_HOME) $(AIRFLOW_HOME)
