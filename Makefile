# The two quick-start commands: `make demo` (main job) and `make test` (whole suite).
# Both create .venv on first use and reinstall only when pyproject.toml or the compiled
# scan loops (src/salvagelane/core/_speedups.c, built by hatch_build.py) change.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

FIXTURE := tests/fixtures/daily-triage-truncated

.PHONY: demo test test-loaded test-processes-loaded bench clean

$(STAMP): pyproject.toml hatch_build.py src/salvagelane/core/_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/salvagelane run daily-triage --replay $(FIXTURE)

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest -n auto

# The whole suite with both cores kept busy (the tests must not depend on an idle host).
test-loaded: $(STAMP)
	bash .ci/with-load $(BIN)/pytest

# The process-level serve tests (real processes, signals, kill -9) under that load.
test-processes-loaded: $(STAMP)
	bash .ci/with-load $(BIN)/pytest tests/integration/test_serve_processes.py \
		tests/integration/test_cron_mode.py

bench: $(STAMP)
	$(BIN)/python benchmarks/salvage_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
