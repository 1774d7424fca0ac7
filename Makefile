# These commands do all the set-up on a fresh Linux machine:
#   make serve     creates .venv, installs semcache (the service only), and runs it on its embedded default
#   make test      adds the test and benchmark tools to .venv, lints, and runs the whole suite
#   make notebook  adds the notebook runner and runs notebooks/threshold_tuning.ipynb headless on its sample
# Tests that read ../shared/data (the labelled evaluation data) skip when it is absent.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: install serve test lint clean bench reliability notebook

# Each marker file records one install; pyproject.toml changing redoes it.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	# The CPU build of torch first, from PyTorch's CPU wheel index (or a local wheel pip is set up to find):
	# PyPI's Linux torch, pinned or not, is the multi-GB CUDA build. The same line is in the README and Dockerfile.
	$(BIN)/python -m pip install --quiet --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu
	# semcache depends on its client, which lives in clients/python: installed from there, with it.
	$(BIN)/python -m pip install --quiet -e ./clients/python -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

$(VENV)/.installed-notebook: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[notebook]'
	touch $@

install: $(VENV)/.installed

serve: install
	$(BIN)/semcache serve $(ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check semcache clients testkit tests benchmarks reliability notebooks
	$(BIN)/ruff format --check semcache clients testkit tests benchmarks reliability notebooks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(ARGS)

# The load (30-minute soak), fault, fuzz and probe suites in full; `make test` runs them short.
reliability: $(VENV)/.installed-test
	SEMCACHE_RELIABILITY=full $(BIN)/python -m pytest -m reliability -v $(ARGS)

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.latency $(ARGS)

# The tuning notebook on its shipped sample; no service needed. ARGS="--set NAME=VALUE" changes a parameter.
notebook: $(VENV)/.installed-notebook
	$(BIN)/python -m notebooks.run $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache notebooks/executed
