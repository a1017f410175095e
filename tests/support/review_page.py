"""What the review page's tests share: a database with runs to review (one made by the
real ``salvagelane run`` from a fixture whose 2nd recommendation is wrong, one whose
raw output carries HTML and script), and the page's access token."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from salvagelane.store import Store, upgrade
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import FIXTURE, salvagelane
from tests.support.history import seed

TOKEN = "test-token-for-the-review-page"
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
HOSTILE_RAW = (
    '{"items": [{"a": 1}, {"a": "' + SCRIPT + '"}, {"a": "' + IMG.replace('"', '\\"') + '", "b"'
)
"""A raw output whose 2nd item holds a script and whose cut-off 3rd an img tag."""
HOSTILE_SPAN = (HOSTILE_RAW.index('{"a": "<script>'), len(HOSTILE_RAW))
"""The quarantined span: the script's item to the end (the img tag's cut-off item)."""
COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))


def schema_fixture(directory: Path) -> Path:
    """A complete answer of three recommendations; the 2nd has action "panic"."""
    items = [dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:3], 1)]
    items[1]["action"] = "panic"
    directory.mkdir(parents=True, exist_ok=True)
    document = {"summary": "Three things matter today.", "recommendations": items}
    (directory / "raw.txt").write_text(json.dumps(document, indent=2), encoding="utf-8")
    meta = {"finish_reason": "stop", "native_finish_reason": "stop", "model": "crafted"}
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return directory


@dataclass(frozen=True, kw_only=True)
class Reviewed:
    """The database the page tests review: ``schema_run`` (by ``salvagelane run``; its
    held item ``schema_item`` can be approved), ``hostile_item`` (its span holds
    :data:`SCRIPT`), and a scheduled history of ``daily`` for the health view."""

    url: str
    schema_run: str
    schema_item: int
    hostile_item: int
    fixed_item: dict[str, object]


def reviewed_database(url: str, scratch: Path) -> Reviewed:
    upgrade(url)
    proc = salvagelane(
        "run",
        "daily-triage",
        "--replay",
        str(schema_fixture(scratch / "schema-reject")),
        "--json",
        database=url,
    )
    assert proc.returncode == 0, proc.stderr
    schema_run = json.loads(proc.stdout)["run_id"]
    now = datetime.now(UTC)
    with Store.open(url) as store:
        for back in (4, 3, 2, 1):
            seed(store, at=now - timedelta(days=back), status=RunStatus.OK)
        seed(store, at=now - timedelta(days=5), status=RunStatus.MISSED)
        hostile = seed(
            store,
            at=now - timedelta(hours=1),
            status=RunStatus.PARTIAL,
            trigger=Trigger.MANUAL,
            instruction_id="hostile",
            reasons=("malformed",),
            raw=HOSTILE_RAW,
            span=HOSTILE_SPAN,
        )
        [hostile_item] = [q.id for q in store.get_run(hostile).quarantined]
        [schema_item] = [q.id for q in store.get_run(schema_run).quarantined]
    fixed = dict(COMPLETE["recommendations"][1], rank=2)
    return Reviewed(
        url=url,
        schema_run=schema_run,
        schema_item=schema_item,
        hostile_item=hostile_item,
        fixed_item=fixed,
    )


CSRF = re.compile(r'name="csrf" value="([0-9a-f]*)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a page."""
    found = CSRF.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)
