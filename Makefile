# Atlas Jobs -- `make help` lists the targets. Every target sets itself up: a fresh
# machine needs only python3 (3.11+) and make.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNTIME_STAMP := $(VENV)/.runtime-stamp
PYTEST_ARGS ?=
# Test processes (pytest-xdist) sharing one PostgreSQL: most tests wait on processes,
# sockets and leases, so two share two cores well. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
CHAOS ?= full
CHAOS_ONLY ?=

.DEFAULT_GOAL := help
.PHONY: help install run test test-pg15 test-failover bench lint format openapi docs sql sdk-ts chaos audit clean

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# What running needs (no dev tools): `make run`.
$(RUNTIME_STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11+ is required (found $$($(PYTHON) --version))"; exit 1; }
	@test -x $(BIN)/python || { echo "==> creating the virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "==> upgrading pip in $(VENV)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "==> installing Atlas Jobs and its runtime dependencies (first time: about a minute)"
	@$(BIN)/python -m pip install --quiet --progress-bar off -e .
	@touch $(RUNTIME_STAMP)

# Adds the dev tools (lint, tests): `make test`, `make lint`, ...
$(STAMP): $(RUNTIME_STAMP)
	@echo "==> installing the dev tools (pytest, ruff, mypy, ...)"
	@$(BIN)/python -m pip install --quiet --progress-bar off -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create the virtualenv and install the project with its dev tools

run: $(RUNTIME_STAMP) ## Migrate and serve the API + workers (embedded PostgreSQL unless DATABASE_URL)
	@echo "==> migrating the database (starts the embedded PostgreSQL unless DATABASE_URL is set)"
	@$(BIN)/atlas-jobs migrate
	@echo "==> serving (Ctrl-C stops; HOST/PORT or ATLAS_HOST/ATLAS_PORT choose the address)"
	@# Development: webhooks may call a receiver on localhost (atlas-jobs dev-webhook).
	@ATLAS_WEBHOOK_INTERNAL_HOSTS="$${ATLAS_WEBHOOK_INTERNAL_HOSTS-localhost}" $(BIN)/atlas-jobs serve

test: lint ## Lint, then run the whole suite against a real PostgreSQL
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25 $(PYTEST_ARGS)

test-pg15: $(STAMP) ## The suite against a throwaway system PostgreSQL 15 (Debian binaries)
	scripts/test-on-postgres.sh 15 $(PYTEST_ARGS)

test-failover: $(STAMP) ## Only the pg_auto_failover test (part of `make test`; about a minute)
	$(BIN)/python -m pytest -m failover tests/ha $(PYTEST_ARGS)

bench: $(STAMP) ## The project's benchmarks (under 10 min): table + benchmarks/results/bench-*.json
	$(BIN)/python -m benchmarks.suite
	$(BIN)/python -m benchmarks.cli_startup

lint: $(STAMP) ## ruff (check + format), mypy --strict, import contracts, bandit (OpenAPI drift: a test of `make test`)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/bandit -c pyproject.toml -r app workers -q

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

chaos: $(STAMP) ## Fault scenarios on real processes, one table (CHAOS=short for the CI size)
	$(BIN)/python -m chaos.run --config $(CHAOS) $(if $(CHAOS_ONLY),--only $(CHAOS_ONLY))

audit: $(STAMP) ## pip-audit (needs PyPI's vulnerability data) and bandit over app/ and workers/
	$(BIN)/pip-audit --skip-editable
	$(BIN)/bandit -c pyproject.toml -r app workers -q

docs: $(STAMP) ## Regenerate docs/lifecycle.md (state x delivery x observation) from the code
	$(BIN)/python -m atlas_jobs._app.lifecycle_doc > docs/lifecycle.md

sql: $(STAMP) ## Regenerate app/db/sql/transitions.sql (every statement built from the transition table)
	$(BIN)/python -m atlas_jobs._app.db.render_sql > app/db/sql/transitions.sql

sdk-ts: $(STAMP) ## TypeScript client (@hey-api/openapi-ts, npm) compiled with tsc --strict, run live
	$(BIN)/python -m pytest tests/api/test_sdk_typescript.py $(PYTEST_ARGS)

openapi: $(STAMP) ## Regenerate the committed OpenAPI spec from the app
	$(BIN)/atlas-jobs openapi --output openapi/openapi.json

clean: ## Stop the embedded database and remove local state (venv, data, caches)
	-$(BIN)/atlas-jobs db stop
	rm -rf $(VENV) .atlas .pytest_cache .mypy_cache .ruff_cache .hypothesis
