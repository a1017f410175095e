# The two quick-start commands: `make demo` (main job) and `make test` (whole suite).
# Both create .venv on first use and install from the lock files in requirements/ (exact
# versions, hashes required, docs/adr/0017-locked-dependencies.md): demo the runtime's core
# (SQLite, no extra), test every extra's and the tools'. They reinstall only when a lock file or the package
# build (pyproject.toml, hatch_build.py, the compiled scan loops) changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUILD_INPUTS := pyproject.toml hatch_build.py src/salvagelane/core/_speedups.c

# pip-compile, as `make lock` runs it: hashes for every file of every pin, setuptools and
# pip pinned too, the build backend's own requirements included (the package is built
# with them, not with whatever the index serves that day), no index address written.
LOCK_VENV := .venv-lock
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	--strip-extras --no-emit-index-url --no-emit-find-links $(LOCK_FLAGS)

FIXTURE := tests/fixtures/daily-triage-truncated

.PHONY: demo test docs test-loaded test-processes-loaded test-latest lock lock-upgrade bench clean

# install_locked LOCKFILE: the lock's pins with their hashes, then the package itself
# (built with the locked backend, no dependency resolved), then a check that the
# installed versions satisfy every range pyproject.toml declares.
define install_locked
	@echo "install: $(1) into $(VENV) (exact versions, hashes required)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r $(1)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		--no-build-isolation --editable .
	$(BIN)/python -m pip check --disable-pip-version-check
endef

$(VENV)/.installed-main: requirements/main.txt $(BUILD_INPUTS)
	$(call install_locked,requirements/main.txt)
	touch $@

$(VENV)/.installed-dev: requirements/dev.txt $(BUILD_INPUTS)
	$(call install_locked,requirements/dev.txt)
	touch $@

demo: $(VENV)/.installed-main
	$(BIN)/salvagelane run daily-triage --replay $(FIXTURE)

test: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest -n auto

# The documentation site (mkdocs.yml, docs/) into site/; --strict makes every warning
# (a broken link or anchor, a page missing from the nav, a missing snippet) an error.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --site-dir site

# The whole suite with both cores kept busy (the tests must not depend on an idle host).
test-loaded: $(VENV)/.installed-dev
	bash .ci/with-load $(BIN)/pytest

# The process-level serve tests (real processes, signals, kill -9) under that load.
test-processes-loaded: $(VENV)/.installed-dev
	bash .ci/with-load $(BIN)/pytest tests/integration/test_serve_processes.py \
		tests/integration/test_cron_mode.py

# The whole suite in a throwaway venv holding the newest releases pyproject.toml's ranges
# allow, ignoring the lock: what a `pip install salvagelane` user gets today. It prints
# which packages moved from the lock first.
test-latest:
	PYTHON=$(PYTHON) bash .ci/test-latest

$(LOCK_VENV)/.installed: requirements/tools.txt
	test -x $(LOCK_VENV)/bin/python || $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		--require-hashes -r requirements/tools.txt
	touch $@

# After a change to pyproject.toml's dependencies: resolve again, keeping every pin that
# still fits. main.txt is the core alone (SQLite; what `make demo` installs), dev.txt every
# extra and the tools; dev.txt is constrained by main.txt, so the two agree on shared
# packages.
lock: $(LOCK_VENV)/.installed
	$(PIP_COMPILE) --all-build-deps -o requirements/main.txt pyproject.toml
	$(PIP_COMPILE) --all-build-deps --extra all --extra dev --extra bench --extra docs -c requirements/main.txt \
		-o requirements/dev.txt pyproject.toml
	$(PIP_COMPILE) -o requirements/tools.txt requirements/tools.in

# Every pin to the newest release its range allows; then `make test` on the result.
lock-upgrade: LOCK_FLAGS := --upgrade
lock-upgrade: lock

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/salvage_throughput.py

clean:
	rm -rf $(VENV) $(LOCK_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
