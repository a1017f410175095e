"""What one metrics scrape costs the database: ``Store.state.read()`` on a long history.

Run from the project root (a scratch PostgreSQL database is created and dropped, and a
SQLite file is made in a temporary directory; nothing else is touched):

    .venv/bin/python benchmarks/metrics_state.py
    .venv/bin/python benchmarks/metrics_state.py --rows 20000 --quick

It fills each database like ``quarantine_list.py`` (``--rows`` quarantined items, 20 per
run) plus as many scheduled runs again over 200 instructions with mixed statuses, then
times the state read every scrape of ``serve --metrics-port`` makes, and each of its
queries. With ``--with-indexes`` it first adds the two indexes ADR 0014 proposes
(runs by instruction and status; pending quarantine by instruction and reason), to show
what they would save. Every figure is the best of several repetitions.
"""

from __future__ import annotations

import random
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

# The checkout's src/ and its root, and the fill of quarantine_list.py beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.support.postgres import scratch_database

from quarantine_list import NOW, best_of, database_arguments, fill
from salvagelane.store import Store, upgrade
from salvagelane.store import state as state_module
from salvagelane.store.models import RunRow

INDEXES = (
    "CREATE INDEX ix_bench_runs_instruction_status ON runs (instruction_id, status)",
    "CREATE INDEX ix_bench_quarantine_pending "
    "ON quarantined_items (review_status, instruction_id, reason)",
)
QUERIES = ("_runs_by_status", "_pending_quarantine", "_open_deliveries", "_queue_jobs")


def scheduled_runs(url: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    statuses = ("ok", "ok", "ok", "partial", "failed", "missed", "interrupted")
    rows = []
    for number in range(count):
        at = NOW - timedelta(minutes=number)
        rows.append(
            {
                "id": f"{number:08d}-1111-4000-8000-000000000000",
                "instruction_id": f"instruction-{number % 200}",
                "definition_sha256": "d" * 64,
                "trigger": "schedule",
                "scheduled_for": at,
                "fire_attempt": 1,
                "status": rng.choice(statuses),
                "created_at": at,
                "started_at": at,
                "finished_at": at,
            }
        )
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        for start in range(0, len(rows), 10_000):
            connection.execute(sa.insert(RunRow), rows[start : start + 10_000])
    engine.dispose()


def prepare(url: str, rows: int, seed: int, *, indexes: bool) -> None:
    upgrade(url)
    fill(url, rows, seed)
    scheduled_runs(url, rows, seed)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        for statement in INDEXES if indexes else ():
            connection.exec_driver_sql(statement)
        connection.exec_driver_sql("ANALYZE")
    engine.dispose()


def measure(label: str, url: str, repeat: int) -> None:
    with Store.open(url, auto_upgrade=False) as store:
        state = store.state.read()
        whole = best_of(repeat, store.state.read)
        print(
            f"{label:<11} runs {sum(state.runs.values()):>7,}  pending "
            f"{sum(state.quarantine_pending.values()):>7,}  state read {whole * 1000:>7.1f} ms"
        )
        for name in (*QUERIES, "_last_clean"):
            query = getattr(state_module, name)

            def once(query: object = query) -> None:
                with store._transaction("benchmark") as session:
                    query(session)  # type: ignore[operator]

            print(f"{'':<11}   {name:<22} {best_of(repeat, once) * 1000:>7.1f} ms")


def main() -> int:
    parser = database_arguments(__doc__.splitlines()[0], quick="3 repetitions")
    parser.add_argument("--with-indexes", action="store_true", help="add the proposed indexes")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    print(
        f"{args.rows:,} quarantined items in {args.rows // 20:,} runs, plus {args.rows:,} "
        f"scheduled runs; indexes proposed in ADR 0014: {'yes' if args.with_indexes else 'no'}"
    )
    with scratch_database(args.server, "salvagelane_bench_metrics") as url:
        prepare(url, args.rows, args.seed, indexes=args.with_indexes)
        measure("postgresql", url, repeat)
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/metrics.db"
        prepare(url, args.rows, args.seed, indexes=args.with_indexes)
        measure("sqlite", url, repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
