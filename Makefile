# Two commands: `make demo` and `make test` (`make test-fast` for the tests that need no services). Everything they need is installed here, from the
# project's own pinned files, into .venv/ and node_modules/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Test processes for `make test` (pytest-xdist, whole files per process: a file's fixtures and
# its Azurite stay together), the longest files first (tests/durations.py). 4 on 2 cores: the
# suite waits on storage, processes and lease expiry more than on the CPU (CHANGELOG.md has
# the runs at 3, 4 and 5). 1 runs them in this process, one after the other.
TEST_WORKERS ?= 4

.PHONY: setup chromium postgres node-check demo demo-intro test test-fast test-lib test-long lint docs dist lock audit bench screenshot clean

setup: $(VENV)/.installed node-check node_modules/.installed chromium postgres

# Node.js for Azurite and Prism: the version the pinned Azurite declares (package-lock.json's
# engines, read here so the message follows the lock). Below Node 20 it fails; Node 20 and 21
# run the suite here but are outside Azurite's declared support (npm warns EBADENGINE): said.
NODE_CHECK = const need = require("./package-lock.json").packages["node_modules/azurite"].engines.node; \
	const want = parseInt(need.replace(/^[^0-9]*/, "")), have = process.versions.node; \
	if (parseInt(have) < 20) { console.error(`make: Node.js $${have} is too old: the pinned Azurite declares node $${need}; install Node.js $${want} or newer (README.md)`); process.exit(1); } \
	if (parseInt(have) < want) console.error(`make: Node.js $${have}: the pinned Azurite declares node $${need} (npm warns EBADENGINE); the suite runs on 20, but install Node.js $${want} or newer to be within its support (README.md)`);
node-check:
	@command -v node >/dev/null 2>&1 || { echo "make: Node.js is missing: install Node.js 22 or newer, with npm (README.md); Azurite and Prism run on it" >&2; exit 1; }
	@node -e '$(NODE_CHECK)'

# The status page's browser test drives Debian's chromium (never `playwright install`).
# CI runs as root on a fresh Debian machine; elsewhere without it, the test says how to get it.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing chromium (apt-get)"; \
			apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
		else \
			echo "chromium missing: sudo apt-get install chromium (for tests/ops)"; \
		fi; \
	fi

# The database-source tests run a real PostgreSQL (harness/postgres.py starts one per test
# module on a free port): Debian's package, binaries under /usr/lib/postgresql/*/bin (its
# cluster is not used: the tests make their own). As root (CI), tests run it as the package's
# `postgres` user. About 30 s on a fresh machine.
postgres:
	@if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing postgresql (apt-get)"; \
			apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
				apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends postgresql >/dev/null; \
		else \
			echo "postgresql missing: sudo apt-get install postgresql (for tests/imports' database tests)"; \
		fi; \
	fi

# Each step says what it does and how long it takes on a fresh machine (measured: the demo's
# paragraph in README.md).
$(VENV)/.installed: requirements.txt requirements-dev.txt packages/blobsingleton/pyproject.toml
	@echo "set-up 1/4: a virtualenv in $(VENV)/ (seconds)"
	$(PYTHON) -m venv $(VENV)
	@echo "set-up 2/4: pip's latest release (seconds)"
	$(PY) -m pip install --quiet --upgrade pip
	@echo "set-up 3/4: the $$(grep -cE '^[A-Za-z0-9._-]+==' requirements-dev.txt) pinned Python packages of requirements-dev.txt, hash-checked (the longest step: 1 to 3 minutes on a fresh machine, by its downloads)"
	# The hashed lock (make lock): pip refuses any file whose hash is not in it. It replaces the
	# venv's bundled setuptools too.
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.txt
	@echo "set-up 4/4: the library, editable from packages/blobsingleton (seconds)"
	# The library as an editable install, so a change to it is tested without reinstalling.
	$(PY) -m pip install --quiet --no-deps -e packages/blobsingleton
	touch $@

node_modules/.installed: package.json package-lock.json | node-check
	@echo "set-up: Azurite, Prism and the other pinned Node tools (npm ci: about 2 minutes on a fresh machine)"
	npm ci --no-fund --no-audit --loglevel=error
	touch $@

# The demo needs no browser: the Python and Node set-up only (chromium is for tests/ops).
demo: demo-intro $(VENV)/.installed node-check node_modules/.installed
	$(PY) -m harness demo

demo-intro:
	@echo "make demo: 4 function app instances on a private Azurite, each receiving every one of 200"
	@echo "events, first with @once (each event emailed once), then without (every instance emails"
	@echo "every event); then the nightly import timer on 2 instances: 2 accounts of files and one"
	@echo "whose members are in a SQLite table, each imported once; about a minute and a half."
	@echo "On a fresh machine the set-up comes first, each step shown:"
	@echo "3 to 4 minutes (a virtualenv of pinned packages, then the Node tools), once only."

test: setup lint docs
	$(PY) -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# Under a minute: only the tests that start no Azurite, Prism or process (not marked `services`),
# spread test by test over one process per core (they wait on the CPU, not on services).
FAST_WORKERS ?= auto
test-fast: $(VENV)/.installed
	$(PY) -m pytest -m "not services" $(if $(filter-out 1,$(FAST_WORKERS)),-n $(FAST_WORKERS)) $(PYTEST_ARGS)

# The library's own tests, from its folder alone (they start their own Azurite).
test-lib: $(VENV)/.installed node-check node_modules/.installed
	cd packages/blobsingleton && ../../$(PY) -m pytest $(PYTEST_ARGS)

# The minutes-long variants too (100k-row import, memory growth): not part of CI's `make test`.
test-long: setup lint
	$(PY) -m pytest --long $(PYTEST_ARGS)

# mypy: strict typing of the library, the app, devhost and harness (files and settings in pyproject.toml).
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m bandit -q -c pyproject.toml -r function_app.py functions shared packages/blobsingleton/src

# The library's API reference, from its docstrings: any warning fails the build.
docs: $(VENV)/.installed
	$(PY) -W error -m pdoc --docformat markdown -o .build/docs blobsingleton \
		blobsingleton.testing blobsingleton.ops blobsingleton.results blobsingleton.errors \
		blobsingleton.batches blobsingleton.schedules blobsingleton.timers

# The library's release artifacts: sdist and wheel in dist/, metadata checked strictly.
dist: $(VENV)/.installed
	rm -rf dist && $(PY) -m build --outdir dist packages/blobsingleton
	$(PY) -m twine check --strict dist/*

# requirements.txt and requirements-dev.txt, hashed, from the .in files, and the library's wheel
# in deploy/ (deploy/lock.py; needs PyPI). Run after editing a .in file or the library.
lock: $(VENV)/.installed
	$(PY) deploy/lock.py

# Known vulnerabilities in the locked dependencies: requirements-dev.txt holds every package
# the deployment installs (at the same versions) and the dev tools; package-lock.json the
# Node tools. Needs PyPI's JSON API (or OSV) and the npm registry. --strict: a package that
# could not be audited fails the run, so "no known vulnerabilities" is only ever said of all.
AUDIT_FAILED = echo "make audit: FAILED: a known vulnerability, or a package that could not be audited (no vulnerability service reachable?). This is not a clean result." >&2; exit 1
audit: $(VENV)/.installed node_modules/.installed
	$(PY) -m pip_audit --strict --disable-pip --require-hashes -r requirements-dev.txt || { $(AUDIT_FAILED); }
	npm audit --audit-level=low || { $(AUDIT_FAILED); }
	@echo "make audit: every locked Python and Node package audited: no known vulnerability"

# Every benchmark against one private Azurite (~10 minutes): bench/results/results.json + plots.
bench: setup
	$(PY) -m bench all --json

# The pictures of the status page in docs/operations.md (phone and desktop): a private Azurite,
# seeded with the trial's scenario, devhost, chromium.
screenshot: setup
	$(PY) -m tests.ops.screenshot docs/status-page.png docs/status-page-desktop.png

clean:
	rm -rf $(VENV) node_modules .devhost .pytest_cache .ruff_cache .build dist
