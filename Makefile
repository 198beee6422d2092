# Two commands: `make demo` and `make test`. Everything they need is installed here, from the
# project's own pinned files, into .venv/ and node_modules/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt packages/blobsingleton/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	# The library as an editable install, so a change to it is tested without reinstalling.
	$(PY) -m pip install --quiet --no-deps -e packages/blobsingleton
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-fund --no-audit --loglevel=error
	touch $@

demo: setup
	$(PY) -m devhost demo

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m mypy --strict packages/blobsingleton/src

# Every benchmark against one private Azurite (~10 minutes): bench/results/results.json + plots.
bench: setup
	$(PY) -m bench all --json

clean:
	rm -rf $(VENV) node_modules .devhost .pytest_cache .ruff_cache
