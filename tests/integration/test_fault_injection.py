"""Kill -9 ``serve`` at random moments, restart it, and check that nothing was lost.

CI runs a few cycles per backend; a soak runs many more with
``SALVAGELANE_FAULT_CYCLES=200 pytest tests/integration/test_fault_injection.py -s``
(``SALVAGELANE_FAULT_SEED`` picks the kill plan). See :mod:`tests.support.faults` for what
a cycle does and what is checked after it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from salvagelane.store import upgrade
from tests.support.faults import run_campaign
from tests.support.postgres import PostgresDatabase

CYCLES = int(os.environ.get("SALVAGELANE_FAULT_CYCLES", "6"))
SEED = int(os.environ.get("SALVAGELANE_FAULT_SEED", "1111"))


def test_sqlite_nodes_killed_at_random_moments_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'salvagelane.db'}"
    figures = run_campaign(tmp_path, database_url=url, backend="sqlite", cycles=CYCLES, seed=SEED)
    print(figures.summary())
    assert figures.violations == [], figures.summary() + "\n" + "\n".join(figures.violations)
    assert figures.fires_checked > CYCLES


@pytest.mark.postgres
def test_postgres_nodes_killed_at_random_moments_lose_nothing(
    tmp_path: Path, postgres_database: PostgresDatabase
) -> None:
    postgres_database.reset()
    upgrade(postgres_database.url)
    figures = run_campaign(
        tmp_path,
        database_url=postgres_database.url,
        backend="postgresql",
        cycles=CYCLES,
        seed=SEED + 1,
    )
    print(figures.summary())
    assert figures.violations == [], figures.summary() + "\n" + "\n".join(figures.violations)
    assert figures.fires_checked > CYCLES
