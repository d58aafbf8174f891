# probembed: `make run` shows the main job, `make test` runs the tests. Both set up .venv first.
.DEFAULT_GOAL := help
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make run DATA=PATH` indexes PATH; unset, the demo takes retrieval/scifact under
# $(PROBEMBED_DATASETS) (default ../shared/datasets beside the checkout), else the Python docs.
DATA ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: help install run test check fix pipelines bench clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install probembed with its pinned dependencies

run: $(STAMP)  ## The main job: uncertainty per model, then index and search DATA (SciFact, else Python docs)
	$(BIN)/probembed inspect
	$(BIN)/probembed demo $(if $(DATA),--data $(DATA))

test: $(STAMP)  ## Run the fast test suite
	$(BIN)/pytest -q

check: $(STAMP)  ## Lint and format check
	$(BIN)/ruff check probembed tests benchmarks scripts
	$(BIN)/ruff format --check probembed tests benchmarks scripts

fix: $(STAMP)  ## Auto-fix lint and format
	$(BIN)/ruff check --fix probembed tests benchmarks scripts
	$(BIN)/ruff format probembed tests benchmarks scripts

pipelines: $(STAMP)  ## Refit the built-in pipelines from ../shared/datasets/pairs (seeded)
	$(BIN)/python scripts/build_pipelines.py

bench: $(STAMP)  ## Run every benchmark and refresh the README tables (hours on 2 cores)
	$(BIN)/python benchmarks/encode_overhead.py
	$(BIN)/python benchmarks/quality.py
	$(BIN)/python benchmarks/search.py
	$(BIN)/python benchmarks/readme_tables.py

clean:  ## Remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
