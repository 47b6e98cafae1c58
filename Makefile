# The site and the library in one place: `make serve` and `make test` install what they need.
SHELL := bash
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
MIN_PYTHON := 3.12
# The first interpreter that is Python >= 3.12 (override: make test PYTHON=/path/to/python3.13).
PYTHON ?= $(shell for p in python3.12 python3.13 python3.14 python3 python; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
	&& { echo $$p; break; }; done)

export NO_MKDOCS_2_WARNING := 1
export UV_PYTHON_DOWNLOADS := never
export PYTHONPATH := tools

.PHONY: help serve build test test-all test-browser links test-latest outputs cpu-variants diagrams vendor lock check-python clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

serve: $(VENV)/.installed ## the site in every language at http://127.0.0.1:8000/, reloading on edits
	$(BIN)/mkdocs serve --dirty

build: $(VENV)/.installed ## the whole site, every language, into site/ (strict)
	$(BIN)/mkdocs build --strict

test: $(VENV)/.tests-installed $(VENV)/.torch-installed ## every check that CI runs, reusing the results whose inputs are unchanged
	$(BIN)/pytest

test-all: $(VENV)/.tests-installed $(VENV)/.torch-installed ## every check that CI runs, reusing nothing (as CI=true does)
	$(BIN)/pytest --no-reuse

test-browser: $(VENV)/.installed ## only the browser tests (headless Chromium; make test runs them too)
	$(BIN)/pytest -m browser -n 0

links: build ## check every internal link and anchor of the built site, all languages
	$(BIN)/python -m sitetools.links site

test-latest: check-python ## the same tests against the newest releases instead of uv.lock
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	VIRTUAL_ENV=.venv-latest .venv-latest/bin/uv pip install --quiet --upgrade -e . \
		--group tutorials --group docs --group test
	.venv-latest/bin/uv pip list --python .venv-latest/bin/python | grep -E '^(jax|jaxlib|flax|optax|mkdocs|mkdocs-material) '
	.venv-latest/bin/pytest

outputs: $(VENV)/.tests-installed $(VENV)/.torch-installed ## re-record the output of every snippet (or SNIPPETS="snippets/x/y.py ...")
	$(BIN)/python -m sitetools.snippets record $(SNIPPETS)

cpu-variants: $(VENV)/.tests-installed $(VENV)/.torch-installed ## run the snippets as other CPUs would (AVX2, other kernels, one core): which numbers move
	$(BIN)/python -m sitetools.cpus $(SNIPPETS)

diagrams: $(VENV)/.installed ## draw new or edited Mermaid diagrams into docs/diagrams/ (needs Chromium)
	$(BIN)/python -m sitetools.diagrams

vendor: $(VENV)/.installed ## re-download Mermaid (its version is in tools/sitetools/vendor.py)
	$(BIN)/python -m sitetools.vendor

lock: $(VENV)/.installed ## update uv.lock after editing the dependencies in pyproject.toml
	$(BIN)/uv lock

check-python:
	@if [ -z "$(PYTHON)" ] || ! "$(PYTHON)" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
		echo "error: this project needs Python $(MIN_PYTHON) or newer, but found $${PYTHON_FOUND:-$$($(or $(PYTHON),python3) --version 2>&1 || echo 'no python3')}." >&2; \
		echo "       Install Python $(MIN_PYTHON) (for example 'pyenv install $(MIN_PYTHON)', 'uv python install $(MIN_PYTHON)'" >&2; \
		echo "       or your system's python$(MIN_PYTHON) package), or point make at one: make PYTHON=/path/to/python$(MIN_PYTHON)" >&2; \
		exit 1; \
	fi

# Install exactly what uv.lock pins, once, and again whenever the lock changes: all that
# `make serve` needs (Python compiles to bytecode only the modules it imports).
$(VENV)/.installed: pyproject.toml uv.lock | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv sync --locked --python $(BIN)/python
	touch $@

# What the tests and the recordings add. Bytecode for every package: every snippet runs in
# a fresh process, and where PYTHONDONTWRITEBYTECODE is set Python would otherwise compile
# jax again on every start. XLA:GPU and XLA:TPU for jaxpar.compile_for (uv.lock's compilers
# group), in a folder of their own: installed beside jax, they would load on every
# `import jax` and print warnings.
XLA_COMPILERS := $(VENV)/xla-compilers

$(VENV)/.tests-installed: $(VENV)/.installed
	UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv sync --locked --compile-bytecode --python $(BIN)/python
	rm -rf $(XLA_COMPILERS)
	$(BIN)/uv export --only-group compilers --frozen --no-header --no-emit-project > $(VENV)/compilers.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --target $(XLA_COMPILERS) \
		--require-hashes --no-deps -r $(VENV)/compilers.txt
	touch $@

# PyTorch for the twins (uv.lock's torch group), in a folder of its own that only the twins'
# runs put on the path (sitetools.snippets): about 5 GB and a minute, which `make serve` skips.
TORCH := $(VENV)/torch

$(VENV)/.torch-installed: $(VENV)/.tests-installed
	rm -rf $(TORCH)
	$(BIN)/uv export --only-group torch --frozen --no-header --no-emit-project > $(VENV)/torch.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --target $(TORCH) \
		--require-hashes --no-deps -r $(VENV)/torch.txt
	touch $@

clean: ## remove the environment, the built site and the caches
	rm -rf $(VENV) .venv-latest site .cache .pytest_cache .ruff_cache
