# Every target sets itself up: a virtual environment inside the project, then the work.
# Variables: PROFILE (the agent's folder; its parent is the profile root), DAGSTER_HOME, HOST and PORT (make dev),
# FROM, TO and ASSETS (make backfill), BENCH and ARGS (make bench).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := data/agents/demo
PROFILE ?= $(DEMO)
PROFILE_ROOT = $(patsubst %/,%,$(dir $(PROFILE)))
HOST ?= 127.0.0.1
PORT ?= 3000
BENCH ?= store
ARGS ?= --quick
# The persistent instance every target uses (Dagster needs an absolute path), configured from deploy/dagster.yaml.
DAGSTER_HOME ?= $(CURDIR)/.dagster_home
override DAGSTER_HOME := $(abspath $(DAGSTER_HOME))
export DAGSTER_HOME
INSTANCE := $(DAGSTER_HOME)/dagster.yaml

.PHONY: run test test-unit test-fast dev status backfill bench lint clean setup

# Every extra a user runs and the tests' tools; not `tokens`: tiktoken fetches its encodings from the network on first
# use, which a machine without one cannot (an estimate counts instead: README, "Tokens are counted").
$(STAMP): pyproject.toml setup.py dream_assets/text/_bm25kernel.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dagster,tfidf,langgraph,test]'
	touch $(STAMP)

## Create .venv with the project installed (then `. .venv/bin/activate` puts `dream` and `dagster` on PATH).
setup: $(STAMP)

$(INSTANCE): deploy/dagster.yaml
	mkdir -p $(DAGSTER_HOME) && cp deploy/dagster.yaml $@

## Run one full dream cycle through Dagster on the bundled demo agent.
run: $(STAMP) $(INSTANCE)
	$(BIN)/dream run --profile $(PROFILE) --demo

## Run the test suite, on both cores (each test file stays on one worker: its fixtures are built once).
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

## The pure tests (dream_assets_tests/unit: no DuckDB file, Dagster, process or socket), on both cores.
test-unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 dream_assets_tests/unit

## The unit and integration tiers (the library in one process, on real DuckDB files), on both cores; e2e/ (the dream
## command and servers as processes, Dagster runs, the browser, PostgreSQL, make targets, fault runs) is left out.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile dream_assets_tests/unit dream_assets_tests/integration

## Open the Dagster UI (webserver + daemon) on $(HOST):$(PORT) with the persistent instance, after saying which agents
## it dreams for (those `dream init` set up, or DREAM_AGENTS names: dream_assets/enrolment.py) and when the first cycle
## fires. `exec` makes `dagster dev` make's own child, so the SIGTERM make forwards (and Ctrl-C) reach it and it stops
## its services; launch.interruptible restores SIGINT's default first (a background job inherits it ignored, and
## `dagster dev` then ignores SIGTERM as well).
dev: export DREAM__ProfileRoot = $(PROFILE_ROOT)
dev: $(STAMP) $(INSTANCE)
	$(BIN)/dream init --profile $(PROFILE) --demo --if-missing
	$(BIN)/python -m dream_assets.enrolment
	exec $(BIN)/python -m dream_assets.launch.interruptible $(BIN)/dagster dev -w workspace.yaml -h $(HOST) -p $(PORT)

## The agent's counts and pass ledger.
status: $(STAMP)
	$(BIN)/dream status --profile $(PROFILE)

## Materialize the day-partitioned assets of one agent over FROM..TO (YYYY-MM-DD) on the persistent instance:
## the agent is registered there first (a dynamic partition lives in the instance, not in the code).
backfill: $(STAMP) $(INSTANCE)
	$(if $(filter $(DEMO),$(PROFILE)),$(BIN)/dream init --profile $(PROFILE) --demo --if-missing)
	$(BIN)/python -m dream_assets.launch.backfill --profile '$(PROFILE)' --from '$(FROM)' --to '$(TO)' --select '$(ASSETS)'

## One benchmark, quick by default: make bench BENCH=faults, make bench BENCH=text ARGS=
bench: $(STAMP)
	$(BIN)/python benchmarks/$(BENCH).py $(ARGS)

## Lint and check formatting (ruff format --check: run `.venv/bin/ruff format .` to fix).
lint: $(STAMP)
	$(BIN)/ruff check dream_assets dream_assets_tests benchmarks
	$(BIN)/ruff format --check dream_assets dream_assets_tests benchmarks

clean:
	rm -rf $(VENV) .dagster_home
