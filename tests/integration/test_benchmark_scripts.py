"""The benchmark scripts still run: a renamed module or model breaks them silently
otherwise, since nothing else imports them. Tiny sizes; no figure is asserted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.cli import ROOT
from tests.support.databases import POSTGRES_ENV


@pytest.mark.postgres
def test_the_quarantine_list_benchmark_runs_and_prints_its_table() -> None:
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"set {POSTGRES_ENV} to run the PostgreSQL benchmark")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "quarantine_list.py"),
         "--server", server, "--rows", "300", "--quick"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "filled 300 quarantined items" in proc.stdout
    assert "--instruction --reason" in proc.stdout


@pytest.mark.postgres
def test_the_review_page_benchmark_runs_and_times_every_page() -> None:
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"set {POSTGRES_ENV} to run the PostgreSQL benchmark")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ui_pages.py"),
         "--server", server, "--rows", "300", "--quick"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for page in ("queue --reason", "item view, 256 KiB output", "run view", "health, all 5"):
        assert page in proc.stdout
