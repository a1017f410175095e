"""How fast ``salvagelane quarantine list`` answers on 100,000 quarantined items.

Run from the project root against a PostgreSQL server (a scratch database is created
and dropped; nothing else is touched):

    .venv/bin/python benchmarks/quarantine_list.py
    .venv/bin/python benchmarks/quarantine_list.py --server postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python benchmarks/quarantine_list.py --rows 20000 --quick

It fills the scratch database with runs, attempts and quarantined items spread over
instructions, reasons, review states and 90 days, runs ANALYZE, then times the queries
the command makes (``Store.quarantine.list_quarantine``, newest first, ``--limit 50``):
no filter, and each filter of the command. Every figure is the best of several
repetitions. The baseline is the same query with index scans disabled (what the
database would do without the quarantine indexes); the ratio is baseline / indexed.
The plan PostgreSQL chose for each indexed query is printed (EXPLAIN ANALYZE).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

# The checkout's src/ and its root: the scratch database comes from the tests' support.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.support.postgres import scratch_database

from salvagelane.store import QuarantineFilter, Store, upgrade
from salvagelane.store.models import AttemptRow, QuarantinedItemRow, RunRow

INSTRUCTIONS = ("daily-triage", "weekly-digest", "incident-summary", "release-notes", "sla-audit")
REASONS = ("truncated", "malformed", "schema", "allow_list", "over_limit", "too_long")
STATES = ("pending",) * 6 + ("approved", "rejected", "superseded", "superseded")
ITEMS_PER_RUN = 20
NOW = datetime(2026, 11, 21, 6, 0, tzinfo=UTC)


def fill(url: str, rows: int, seed: int) -> None:
    rng = random.Random(seed)
    engine = sa.create_engine(url)
    runs, attempts, items = [], [], []
    for run_number in range(rows // ITEMS_PER_RUN):
        created = NOW - timedelta(minutes=rng.randrange(90 * 24 * 60))
        instruction = rng.choice(INSTRUCTIONS)
        run_id = f"{run_number:08d}-0000-4000-8000-000000000000"
        attempt_id = f"{run_number:08d}-0000-4000-8000-000000000001"
        runs.append(
            {
                "id": run_id,
                "instruction_id": instruction,
                "definition_sha256": "d" * 64,
                "trigger": "manual",
                "scheduled_for": None,  # manual: many runs share a minute here
                "fire_attempt": 1,
                "status": "partial",
                "created_at": created,
                "started_at": created,
                "finished_at": created,
            }
        )
        attempts.append(
            {
                "id": attempt_id,
                "run_id": run_id,
                "number": 1,
                "started_at": created,
                "request": {},
                "raw_output": b"[]",
            }
        )
        for index in range(ITEMS_PER_RUN):
            reason = rng.choice(REASONS)
            items.append(
                {
                    "run_id": run_id,
                    "attempt_id": attempt_id,
                    "instruction_id": instruction,
                    "source_index": index,
                    "reason": reason,
                    "error": {"code": reason, "path": "$", "message": f"{reason} at $"},
                    "span_start": index * 100,
                    "span_end": index * 100 + 90,
                    "snippet": '{"rank": 1, "candidate": "billing-migration"',
                    "sha256": secrets.token_hex(32),
                    "repaired": None,
                    "provenance": {"instruction": instruction, "model": "m"},
                    "review_status": rng.choice(STATES),
                    "created_at": created,
                }
            )
    with engine.begin() as connection:
        connection.execute(sa.insert(RunRow), runs)
        connection.execute(sa.insert(AttemptRow), attempts)
        for start in range(0, len(items), 10_000):
            connection.execute(sa.insert(QuarantinedItemRow), items[start : start + 10_000])
        connection.exec_driver_sql("ANALYZE")
    engine.dispose()


def best_of(repeat: int, call: Callable[[], object]) -> float:
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        timings.append(time.perf_counter() - began)
    return min(timings)


def database_arguments(description: str, *, quick: str) -> argparse.ArgumentParser:
    """The options of a benchmark over a filled scratch database (this one, ui_pages.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--server",
        default=os.environ.get(
            "SALVAGELANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="a PostgreSQL URL; a scratch database is created beside its database",
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--seed", type=int, default=20261121)
    return parser


def main() -> int:
    parser = database_arguments(__doc__.splitlines()[0], quick="3 repetitions, no plans")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat

    with scratch_database(args.server, "salvagelane_bench") as url:
        upgrade(url)
        began = time.perf_counter()
        fill(url, args.rows, args.seed)
        print(f"filled {args.rows:,} quarantined items in {time.perf_counter() - began:.1f} s")
        run_queries(url, repeat, plans=not args.quick)
    return 0


def run_queries(url: str, repeat: int, *, plans: bool) -> None:
    cases = {
        "newest 50": QuarantineFilter(limit=50),
        "--instruction": QuarantineFilter(instruction_id="weekly-digest", limit=50),
        "--reason": QuarantineFilter(reason="allow_list", limit=50),
        "--status pending": QuarantineFilter(review_status="pending", limit=50),
        "--since 7 days": QuarantineFilter(since=NOW - timedelta(days=7), limit=50),
        "--instruction --reason": QuarantineFilter(
            instruction_id="sla-audit", reason="schema", limit=50
        ),
    }
    with Store.open(url, auto_upgrade=False) as store:
        lane = store.quarantine
        total = len(lane.list_quarantine(QuarantineFilter(review_status=None, limit=None)))
        print(f"listable (not superseded): {total:,}\n")
        print(f"{'query':<24} {'rows':>5} {'indexed ms':>11} {'no index ms':>12} {'ratio':>7}")
        engine = sa.create_engine(url)
        for label, where in cases.items():
            found = lane.list_quarantine(where)
            indexed = best_of(repeat, lambda w=where: lane.list_quarantine(w))
            baseline = best_of(repeat, lambda w=where: without_index_scans(engine, w))
            print(
                f"{label:<24} {len(found):>5} {indexed * 1000:>11.2f} "
                f"{baseline * 1000:>12.2f} {baseline / indexed:>6.1f}x"
            )
        if plans:
            for label, where in cases.items():
                print(f"\n-- plan: {label}")
                print(explain(engine, where))
        engine.dispose()


def _statement(where: QuarantineFilter) -> sa.Select[tuple[QuarantinedItemRow]]:
    from salvagelane.store.quarantine_lane import _matching

    return _matching(where).add_columns(AttemptRow.number)


def without_index_scans(engine: sa.Engine, where: QuarantineFilter) -> None:
    with engine.connect() as connection:
        connection.exec_driver_sql("SET enable_indexscan = off")
        connection.exec_driver_sql("SET enable_bitmapscan = off")
        connection.execute(_statement(where)).all()
        connection.rollback()


def explain(engine: sa.Engine, where: QuarantineFilter) -> str:
    compiled = _statement(where).compile(engine, compile_kwargs={"literal_binds": True})
    with engine.connect() as connection:
        rows = connection.exec_driver_sql(f"EXPLAIN (ANALYZE, COSTS OFF) {compiled}").all()
    return "\n".join(row[0] for row in rows)


if __name__ == "__main__":
    raise SystemExit(main())
