"""Shared fixtures. Session-scoped so Hypothesis tests can use them too."""

from __future__ import annotations

import compileall
import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

from salvagelane.core import ItemSchema


def pytest_configure(config: pytest.Config) -> None:
    # The tests start hundreds of `salvagelane` processes. Where PYTHONDONTWRITEBYTECODE
    # is set (this CI's machines set it), each one would compile salvagelane from source,
    # which an installed wheel never does: compile it once, and let the children read
    # it. py_compile replaces each file atomically, so concurrent workers are safe.
    del config
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "src" / "salvagelane", quiet=1)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The project checkout (the directory holding pyproject.toml)."""
    root = Path(__file__).resolve().parents[1]
    assert (root / "pyproject.toml").is_file()
    return root


@pytest.fixture(scope="session")
def daily_triage_schema(repo_root: Path) -> ItemSchema:
    """The compiled item schema of the daily-triage instruction."""
    path = repo_root / "schemas" / "daily-triage-item.schema.json"
    return ItemSchema.compile(json.loads(path.read_text(encoding="utf-8")), source=str(path))


# The properties run reproducibly by default (CI, `make test`): the same examples on every
# run, so a red build always means a change, never a lucky draw. Exploring afresh is a
# deliberate hunt: SALVAGELANE_HYPOTHESIS=explore (ADR 0002 lists what such hunts found).
settings.register_profile("reproducible", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(
    "explore" if os.environ.get("SALVAGELANE_HYPOTHESIS") == "explore" else "reproducible"
)
