"""Shared fixtures. Session-scoped so Hypothesis tests can use them too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

from salvagelane.core import ItemSchema


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
