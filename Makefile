# Two commands do all the set-up on a fresh Linux machine:
#   make serve   creates .venv, installs semcache, and runs it on its embedded default
#   make test    creates .venv, installs semcache with its test extras, and runs the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: install serve test lint clean bench reliability

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

serve: install
	$(BIN)/semcache serve $(ARGS)

lint: install
	$(BIN)/ruff check semcache tests benchmarks
	$(BIN)/ruff format --check semcache tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(ARGS)

# The load (30-minute soak), fault, fuzz and probe suites in full; `make test` runs them short.
reliability: install
	SEMCACHE_RELIABILITY=full $(BIN)/python -m pytest -m reliability -v $(ARGS)

bench: install
	$(BIN)/python -m benchmarks.latency $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
