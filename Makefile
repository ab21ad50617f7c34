# Every target sets itself up: a virtual environment inside the project, then the work.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE ?= data/agents/demo
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home

.PHONY: run test dev bench lint clean setup

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

## Run one full dream cycle through Dagster on the bundled demo agent.
run: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dream run --profile $(PROFILE) --demo

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $@

## Run the test suite.
test: $(STAMP)
	$(BIN)/python -m pytest

## Open the Dagster UI (webserver + daemon) on 127.0.0.1:3000 with a persistent instance.
dev: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dream init --profile $(PROFILE) --demo --if-missing
	DREAM__ProfileRoot=$(dir $(PROFILE)) $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: $(STAMP)
	$(BIN)/python benchmarks/store.py --quick

lint: $(STAMP)
	$(BIN)/ruff check dream_assets dream_assets_tests benchmarks

clean:
	rm -rf $(VENV) .dagster_home
