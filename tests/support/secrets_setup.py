"""Helpers for the secret-handling tests: a scan of every text column of every table, and
a leak detector written independently of the code under test (it decodes what it searches,
where the scrub encodes what it looks for).

The run helpers (``tests.support.cli``, ``.provider``, ``.run_setup``: the project, the
local provider) and the ``database_url`` fixture (SQLite and PostgreSQL, from
``tests.support.databases``) are re-exported here.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

import sqlalchemy as sa

from tests.support.cli import ROOT, salvagelane, upgraded
from tests.support.databases import _private_state_home, database_url, postgres_database
from tests.support.provider import SSE_HEADERS, Scripted, ScriptedServer, sse_event
from tests.support.run_setup import Project, chat_answer, provider

__all__ = [
    "ROOT",
    "SSE_HEADERS",
    "Project",
    "Scripted",
    "ScriptedServer",
    "_private_state_home",
    "chat_answer",
    "database_texts",
    "database_url",
    "leaks",
    "postgres_database",
    "provider",
    "report_text",
    "salvagelane",
    "sse_event",
    "stored_texts",
    "upgraded",
]


# --- model answers -------------------------------------------------------------------------------


def report_text(why: str = "Cut-over is on Friday.", *, broken: str | None = None) -> str:
    """A daily-triage report of two good items (``why`` in the first), and a third item
    ``broken`` (invalid JSON, quarantined) when given."""

    def item(rank: int, candidate: str, reason: str) -> dict[str, Any]:
        return {
            "rank": rank,
            "candidate": candidate,
            "action": "continue",
            "why": reason,
            "confidence": 0.9,
            "wsjf": {
                "business_value": 10,
                "time_criticality": 10,
                "risk_reduction": 10,
                "job_size": 5,
                "score": 6.0,
            },
        }

    items = [
        json.dumps(item(1, "billing-migration", why)),
        json.dumps(item(2, "auth-token-rotation", "Audit next week.")),
    ]
    if broken is not None:
        items.append(broken)
    return '{"summary": "Two streams matter today.", "recommendations": [' + ", ".join(items) + "]}"


# --- looking for secrets -------------------------------------------------------------------------

_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _b64_cores(secret: str) -> set[str]:
    """What base64 of any text holding ``secret`` must contain, in both alphabets: the
    encoding of the whole 3-byte groups of the secret, for each of its 3 alignments."""
    data = secret.encode()
    cores = set()
    for start in range(3):
        whole = (len(data) - start) // 3 * 3
        core = base64.b64encode(data[start : start + whole]).decode()
        cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def leaks(text: str, secret: str) -> list[str]:
    """How ``text`` gives ``secret`` away: as is (any case), percent-encoded, as JSON
    ``\\u`` escapes (full or partial), or base64-encoded (any alignment, either alphabet)."""
    found = []
    plain = secret.lower()
    if plain in text.lower():
        found.append("as is")
    if plain in unquote_plus(text).lower() and "as is" not in found:
        found.append("percent-encoded")
    unescaped = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    if plain in unescaped.lower() and "as is" not in found:
        found.append("\\u escapes")
    found.extend(f"base64 {core}" for core in sorted(_b64_cores(secret)) if core in text)
    return found


def database_texts(url: str) -> Iterator[tuple[str, str, str]]:
    """``(table, column, text)`` for every non-null value of every table: strings as they
    are, bytes decoded, anything else (JSON, numbers, times) as its text."""
    engine = sa.create_engine(url)
    try:
        metadata = sa.MetaData()
        metadata.reflect(engine)
        with engine.connect() as connection:
            for _, table in sorted(metadata.tables.items()):
                for row in connection.execute(sa.select(table)).mappings():
                    for column, value in row.items():
                        if value is None:
                            continue
                        if isinstance(value, bytes | memoryview):
                            text = bytes(value).decode("utf-8", "surrogateescape")
                        elif isinstance(value, str):
                            text = value
                        else:
                            text = json.dumps(value, default=str, ensure_ascii=False)
                        yield table.name, str(column), text
    finally:
        engine.dispose()


def stored_texts(url: str) -> dict[tuple[str, str], str]:
    """Every column's values (see :func:`database_texts`), one line per row."""
    texts: dict[tuple[str, str], list[str]] = {}
    for table, column, text in database_texts(url):
        texts.setdefault((table, column), []).append(text)
    return {where: "\n".join(values) for where, values in texts.items()}


def assert_nowhere(secret: str, *, database: str, outputs: dict[str, str]) -> None:
    """``secret`` (in any of its encodings) is in no output and no database column."""
    found = [f"{name}: {how}" for name, text in outputs.items() for how in leaks(text, secret)]
    found += [
        f"{table}.{column}: {how}"
        for table, column, text in database_texts(database)
        for how in leaks(text, secret)
    ]
    assert found == [], f"{secret!r} leaked: {found}"
