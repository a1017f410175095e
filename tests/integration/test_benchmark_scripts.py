"""The benchmark scripts still run: a renamed module or model breaks them silently
otherwise, since nothing else imports them. Tiny sizes; no figure is asserted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.cli import ROOT
from tests.support.databases import POSTGRES_ENV


def run_on_postgres(script: str) -> str:
    """``benchmarks/SCRIPT`` over a 300-item scratch database, quickly; its stdout."""
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"set {POSTGRES_ENV} to run the PostgreSQL benchmark")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script),
         "--server", server, "--rows", "300", "--quick"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.postgres
def test_the_quarantine_list_benchmark_runs_and_prints_its_table() -> None:
    printed = run_on_postgres("quarantine_list.py")
    assert "filled 300 quarantined items" in printed
    assert "--instruction --reason" in printed


@pytest.mark.postgres
def test_the_review_page_benchmark_runs_and_times_every_page() -> None:
    printed = run_on_postgres("ui_pages.py")
    for page in ("queue --reason", "item view, 256 KiB output", "run view", "health, all 5"):
        assert page in printed


@pytest.mark.postgres
def test_the_queue_load_benchmark_runs_and_checks_every_fire() -> None:
    server = os.environ.get(POSTGRES_ENV)
    if not server:
        pytest.skip(f"set {POSTGRES_ENV} to run the PostgreSQL benchmark")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "queue_load.py"), "--server", server,
         "--instructions", "3", "--workers", "1", "--skip-inprocess", "--lead", "20"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "queue-1w" in proc.stdout
    assert "check: every fire ran exactly once in every scenario" in proc.stdout


@pytest.mark.postgres
def test_the_metrics_state_benchmark_runs_and_times_every_query() -> None:
    printed = run_on_postgres("metrics_state.py")
    assert "300 quarantined items in 15 runs, plus 300 scheduled runs" in printed
    for query in ("_runs_by_status", "_pending_quarantine", "_last_clean"):
        assert printed.count(query) == 2, printed  # PostgreSQL and SQLite


def test_the_placement_recall_benchmark_runs_and_counts_both_variants() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "placement_recall.py"), "--reports", "200"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if "placement" in line]
    # Four rows (two damage sets, without and with placement); counts, so deterministic
    # for the seed: with placement no sub-item is ever accepted as an item.
    assert len(rows) == 4, proc.stdout
    with_placement = [row for row in rows if row[-5:-3] == ["with", "placement"]]
    assert len(with_placement) == 2, proc.stdout
    assert all(row[-2] == "0" for row in with_placement), proc.stdout
