# probembed: `make run` shows the main job, `make test` runs the tests. Both set up .venv first.
.DEFAULT_GOAL := help
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
LOCK_VENV := .venv-lock
#: The CPU build of torch lies in the machine's wheel folder; pinning it first keeps pip from
#: resolving `torch>=2.4,<3` to a multi-GB CUDA build from the index.
TORCH := torch==2.13.0
# `make run DATA=PATH` indexes PATH; unset, the demo takes retrieval/scifact under
# $(PROBEMBED_DATASETS) (default ../shared/datasets beside the checkout), else the Python docs.
DATA ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: help install lock run test check fix pipelines bench clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml $(LOCK)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install probembed with the exact versions in requirements.lock

lock:  ## Re-resolve '.[all,dev]' in a fresh venv and write its exact versions to requirements.lock
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet $(TORCH) '.[all,dev]'
	$(LOCK_VENV)/bin/pip check
	{ echo "# Exact versions for \`make install\`; regenerate with \`make lock\` (Python 3.11, Linux x86_64)."; \
	  $(LOCK_VENV)/bin/pip freeze --exclude probembed | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > $(LOCK)
	rm -rf $(LOCK_VENV)

run: $(STAMP)  ## The main job: uncertainty per model, then index and search DATA (SciFact, else Python docs)
	@test -z "$(DATA)" || test -e "$(DATA)" || { echo "error: DATA=$(DATA): no such file or folder" >&2; exit 2; }
	$(BIN)/probembed inspect
	$(BIN)/probembed demo $(if $(DATA),--data "$(DATA)")

# A file's tests stay in one process (--dist loadfile), so a module's server starts once.
# PYTHONDONTWRITEBYTECODE is cleared for the run: pytest keeps its rewritten test modules, and
# each child process (CLI, server, Ray worker) probembed's compiled ones, only where bytecode
# may be written; with it set (some CI images do) every worker rewrote about 600 modules as it
# started and every child compiled probembed again. The files go to the __pycache__ folders
# git ignores.
test: $(STAMP)  ## Run the test suite, a process per core (at most 4)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q --numprocesses logical --maxprocesses 4 --dist loadfile

check: $(STAMP)  ## Lint, format check and type check (mypy on probembed/, benchmarks/, scripts/)
	$(BIN)/ruff check probembed tests benchmarks scripts
	$(BIN)/ruff format --check probembed tests benchmarks scripts
	$(BIN)/mypy

fix: $(STAMP)  ## Auto-fix lint and format
	$(BIN)/ruff check --fix probembed tests benchmarks scripts
	$(BIN)/ruff format probembed tests benchmarks scripts

pipelines: $(STAMP)  ## Refit the built-in pipelines from ../shared/datasets/pairs (seeded)
	$(BIN)/python scripts/build_pipelines.py
	$(BIN)/python scripts/fit_calibration.py --pipeline default
	$(BIN)/python scripts/fit_calibration.py --pipeline retrieval

# benchmarks/mpnet.py is left out: it needs the [mpnet] part wheels, which [all] does not install.
# So is sync_removal.py: its figures are a before/after pair, the after run at the change
# (--label after) and the before by the script of a5fdbd9 in a checkout of 0e0fe28 (its
# docstring says how), so an after run here would be set against a before of another session.
# search_calibration-dense-reading.json was scored at 69c35dd (docs/results.md says how) and stays.
# The lodo_* scripts run after lodo.py, whose embeddings of the LODO splits they read from the
# cache; filtered_search.py after search_calibration.py, whose SciFact collection it searches;
# variance.py after search.py, whose text sample it ingests (embedded once, then cached); and
# every script before readme_tables.py, which quotes their result files.
bench: $(STAMP)  ## Run every benchmark and refresh the tables in README.md and docs/ (hours on 2 cores)
	$(BIN)/python benchmarks/encode_overhead.py
	$(BIN)/python benchmarks/quality.py
	$(BIN)/python benchmarks/paper.py
	$(BIN)/python benchmarks/lodo.py
	$(BIN)/python benchmarks/lodo_headroom.py
	$(BIN)/python benchmarks/lodo_geometry.py
	$(BIN)/python benchmarks/lodo_task.py
	$(BIN)/python benchmarks/lodo_similar.py
	$(BIN)/python benchmarks/lodo_regret.py
	$(BIN)/python benchmarks/lodo_halves.py
	$(BIN)/python benchmarks/error_signals.py
	$(BIN)/python benchmarks/retrieval.py
	$(BIN)/python benchmarks/calibration.py
	$(BIN)/python benchmarks/calibration.py --pipeline retrieval
	$(BIN)/python benchmarks/search_calibration.py
	$(BIN)/python benchmarks/search_calibration.py --pipeline default
	$(BIN)/python benchmarks/filtered_search.py
	$(BIN)/python benchmarks/abstention.py
	$(BIN)/python benchmarks/confidence_cost.py
	$(BIN)/python benchmarks/chunking.py
	$(BIN)/python benchmarks/search.py
	$(BIN)/python benchmarks/search_profile.py
	$(BIN)/python benchmarks/variance.py
	$(BIN)/python benchmarks/scale.py --real
	$(BIN)/python benchmarks/stored_size.py
	$(BIN)/python benchmarks/serve.py
	$(BIN)/python benchmarks/pieces.py
	$(BIN)/python benchmarks/cli_start.py
	$(BIN)/python benchmarks/cli_exit.py
	$(BIN)/python benchmarks/first_collection.py
	$(BIN)/python benchmarks/verdict_fusion.py
	$(BIN)/python benchmarks/ray_ingest.py
	$(BIN)/python benchmarks/ray_driver_memory.py
	$(BIN)/python benchmarks/tune_own_data.py
	$(BIN)/python benchmarks/readme_tables.py

clean:  ## Remove the virtual environment and caches
	rm -rf $(VENV) $(LOCK_VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
