"""Server time of each page of ``salvagelane ui`` on the 100,000-item benchmark database.

Run from the project root against a PostgreSQL server (a scratch database is created
and dropped; nothing else is touched):

    .venv/bin/python benchmarks/ui_pages.py
    .venv/bin/python benchmarks/ui_pages.py --rows 20000 --quick

The database is the one ``benchmarks/quarantine_list.py`` fills (100,000 quarantined
items of 5,000 runs over 5 instructions, 6 reasons, mixed review states and 90 days),
plus a daily scheduled run of every instruction over those 90 days with token usage, so
the health view has a streak and a window to read. Each page is requested through the
application in process (Starlette's test client: routing, the store's queries, the
template; no network) and timed from request to response; every figure is the best of
several repetitions, against the target of 200 ms per page.
"""

from __future__ import annotations

import random
import secrets
import sys
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
# The checkout's src/, its root (the scratch database comes from the tests' support) and
# this directory (the database is quarantine_list.py's).
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import warnings  # noqa: E402

from tests.support.postgres import scratch_database  # noqa: E402

from quarantine_list import INSTRUCTIONS, NOW, database_arguments, fill  # noqa: E402
from salvagelane.store import QuarantineFilter, Store, upgrade  # noqa: E402
from salvagelane.store.models import AttemptRow, QuarantinedItemRow, RunRow  # noqa: E402
from salvagelane.ui.app import Settings, create_app  # noqa: E402
from salvagelane.ui.security import Access  # noqa: E402
from salvagelane.vocabulary import ReviewStatus  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from starlette.testclient import TestClient

TARGET_MS = 200.0
STATUSES = ("ok",) * 7 + ("partial", "failed", "interrupted", "missed")


def fill_schedule(url: str, seed: int) -> None:
    """A daily fire of every instruction for 90 days: runs with one attempt and usage."""
    rng = random.Random(seed)
    runs, attempts = [], []
    for number, instruction in enumerate(INSTRUCTIONS):
        for day in range(90):
            fire = (NOW - timedelta(days=day)).replace(hour=5, minute=20)
            status = "ok" if day < 3 else rng.choice(STATUSES)
            run_id = f"{number:04d}{day:04d}-0000-4000-8000-00000000f000"
            runs.append(
                {
                    "id": run_id,
                    "instruction_id": instruction,
                    "definition_sha256": "d" * 64,
                    "trigger": "schedule",
                    "scheduled_for": fire,
                    "fire_attempt": 1,
                    "status": status,
                    "created_at": fire,
                    "started_at": fire,
                    "finished_at": fire,
                }
            )
            if status != "missed":
                attempts.append(
                    {
                        "id": f"{number:04d}{day:04d}-0000-4000-8000-00000000f001",
                        "run_id": run_id,
                        "number": 1,
                        "started_at": fire,
                        "request": {},
                        "raw_output": b'{"items": []}',
                        "finish_reason": "stop",
                        "usage": {
                            "prompt_tokens": rng.randrange(2000, 4000),
                            "completion_tokens": rng.randrange(500, 2000),
                        },
                    }
                )
    big = big_output(runs[0], attempts[0])
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.insert(RunRow), runs)
        connection.execute(sa.insert(AttemptRow), attempts)
        connection.execute(sa.insert(QuarantinedItemRow), [big])
        connection.exec_driver_sql("ANALYZE")
    engine.dispose()


BIG_RUN = "big-output-run"


def big_output(run: dict[str, object], attempt: dict[str, object]) -> dict[str, object]:
    """Give the newest scheduled run an output at the default byte cap (256 KiB, about
    3,200 lines) with an item quarantined in its middle: the item view's largest page."""
    line = '    {"rank": 1, "candidate": "billing-migration", "why": "<b>escaped</b> & kept"},\n'
    raw = ('{"recommendations": [\n' + line * (262_144 // len(line)))[:262_144]
    attempt["raw_output"] = raw.encode()
    middle = raw.index("{", len(raw) // 2)
    return {
        "run_id": run["id"],
        "attempt_id": attempt["id"],
        "instruction_id": run["instruction_id"],
        "source_index": 1500,
        "reason": "schema",
        "error": {"code": "schema", "path": "$.rank", "message": "schema at $.rank"},
        "span_start": middle,
        "span_end": raw.index("\n", middle),
        "snippet": raw[middle : middle + 80],
        "sha256": "0" * 64,
        "repaired": None,
        "provenance": {"instruction": run["instruction_id"], "model": "m"},
        "review_status": "pending",
        "created_at": run["created_at"],
    }


def best_ms(client: TestClient, path: str, repeat: int) -> tuple[float, int, int]:
    timings = []
    status = size = 0
    for _ in range(repeat):
        began = time.perf_counter()
        answer = client.get(path)
        timings.append(time.perf_counter() - began)
        status, size = answer.status_code, len(answer.content)
    return min(timings) * 1000, status, size


def measure(url: str, repeat: int) -> bool:
    with Store.open(url, auto_upgrade=False) as store:
        newest = store.quarantine.list_quarantine(QuarantineFilter(reason="truncated"))[0]
        [big] = store.quarantine.list_quarantine(
            QuarantineFilter(
                instruction_id=INSTRUCTIONS[0],
                review_status=ReviewStatus.PENDING,
                reason="schema",
                since=NOW - timedelta(hours=1),
            )
        )
        settings = Settings(
            store=store,
            access=Access(token=secrets.token_hex(8), loopback=True),
            instructions_dir=Path("instructions"),
            actor="bench",
            clock=lambda: NOW,
        )
        client = TestClient(create_app(settings), base_url="http://127.0.0.1:8765")
        pages = {
            "queue": "/",
            "queue --reason": "/?reason=schema",
            "queue --instruction --status": "/?instruction=sla-audit&status=pending",
            "queue page 20": "/?page=20",
            "item view": f"/items/{newest.id}",
            "item view, filtered": f"/items/{newest.id}?reason={newest.reason}",
            "item view, 256 KiB output": f"/items/{big.id}",
            "run view": f"/runs/{newest.run_id}",
            "health, one instruction": "/health?instruction=daily-triage",
            "health, all 5": "/health",
            "health.json, all 5": "/health.json",
        }
        target = f"verdict (target {TARGET_MS:.0f} ms)"
        print(f"{'page':<30} {'status':>6} {'KB':>7} {'best ms':>9}  {target}")
        passed = True
        for label, path in pages.items():
            best_ms(client, path, 1)  # warm: templates compiled, statements cached
            ms, status, size = best_ms(client, path, repeat)
            ok = status == 200 and ms < TARGET_MS
            passed &= ok
            print(
                f"{label:<30} {status:>6} {size / 1024:>7.1f} {ms:>9.1f}  {'ok' if ok else 'MISS'}"
            )
        client.close()
    return passed


def main() -> int:
    parser = database_arguments(__doc__.splitlines()[0], quick="3 repetitions")
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    with scratch_database(args.server, "salvagelane_bench") as url:
        upgrade(url)
        began = time.perf_counter()
        fill(url, args.rows, args.seed)
        fill_schedule(url, args.seed)
        took = time.perf_counter() - began
        print(f"filled {args.rows:,} quarantined items in {took:.1f} s\n")
        passed = measure(url, repeat)
    print("\nevery page under the target" if passed else "\nsome page missed the target")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
