# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv when it is missing and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test
DSTAMP := $(VENV)/.installed-docs

.PHONY: demo test unit_tests integration_tests lint format type docs benchmark notebooks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e . --group test --group lint
	touch $(STAMP) $@

$(DSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e . --group docs
	touch $(STAMP) $@

demo: $(STAMP)
	$(BIN)/tdai-recall demo

# PostgreSQL refuses to run as root; as root, the PostgreSQL tests run their throw-away server as
# the system user tdaipg, which they create on first use (langchain_tdai_recall/testing/postgres.py).
PG_USER_NOTICE := make test: running as root, so the PostgreSQL tests will create the system user \
	'tdaipg' (useradd --system) to run their throw-away server, and reuse it in later runs \
	(remove it with: userdel tdaipg). Run as a normal user, or set TDAI_TEST_POSTGRES_URL, to avoid it.

test: $(TSTAMP)
	@if [ "$$(id -u)" = 0 ] && [ -z "$${TDAI_TEST_POSTGRES_URL:-}" ] && ! id tdaipg >/dev/null 2>&1; then \
		echo "$(PG_USER_NOTICE)" >&2; fi
	$(BIN)/python -m pytest

unit_tests: $(TSTAMP)
	$(BIN)/python -m pytest tests/unit_tests

integration_tests: $(TSTAMP)
	$(BIN)/python -m pytest tests/integration_tests

lint: $(TSTAMP)
	$(BIN)/ruff check langchain_tdai_recall tests benchmarks examples docs/_hooks
	$(BIN)/ruff format --check langchain_tdai_recall tests benchmarks examples docs/_hooks

format: $(TSTAMP)
	$(BIN)/ruff format langchain_tdai_recall tests benchmarks examples docs/_hooks
	$(BIN)/ruff check --fix langchain_tdai_recall tests benchmarks examples docs/_hooks

type: $(TSTAMP)
	$(BIN)/mypy langchain_tdai_recall examples

# The documentation site into site/ (git-ignored). --strict: a broken link or anchor, a missing API
# reference or any other warning fails the build. `$(BIN)/mkdocs serve` serves it while editing.
docs: $(DSTAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

notebooks: $(TSTAMP)
	$(BIN)/python -m pytest tests/unit_tests/test_notebooks.py

benchmark: $(TSTAMP)
	$(BIN)/python -m pip install --quiet -e . --group bench
	$(BIN)/python benchmarks/quality/locomo.py
	$(BIN)/python benchmarks/quality/zh_eval.py
	$(BIN)/python benchmarks/quality/critical.py
	$(BIN)/python benchmarks/quality/medium.py
	$(BIN)/python benchmarks/perf/latency.py
	$(BIN)/python benchmarks/perf/scale.py
	$(BIN)/python benchmarks/perf/postgres.py
	$(BIN)/python benchmarks/perf/store_rw.py
	$(BIN)/python benchmarks/formation/locomo_oracle.py
	$(BIN)/python benchmarks/formation/candidate_floor.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
