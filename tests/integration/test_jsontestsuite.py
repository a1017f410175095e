"""Conformance against JSONTestSuite (Nicolas Seriot's parsing tests).

The suite lives beside the repository, at ``<repo>/../shared/jsontestsuite/test_parsing``:
``y_`` files must be accepted by a JSON parser, ``n_`` files rejected, ``i_`` files are
implementation-defined. Absent, the module is skipped, unless
``SALVAGELANE_REQUIRE_JSONTESTSUITE=1`` (set by CI), in which case it fails.

For every file: salvage never crashes (whole document with items path ``""`` and
``"items"``, and embedded as an item), ``document_valid`` is True for every ``y_`` file
without duplicate keys and False for every ``n_`` file, and the real CLI in ``--batch``
mode gives the same answers, in order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from salvagelane.core import ItemSchema, Reason, SalvagePolicy, SalvageResult, salvage
from tests.support.guards import time_limit

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITE = REPO_ROOT.parent / "shared" / "jsontestsuite" / "test_parsing"
REQUIRED = os.environ.get("SALVAGELANE_REQUIRE_JSONTESTSUITE") == "1"
EXPECTED_FILES = 318
PER_FILE_SECONDS = 10
ITEM_SCHEMA = REPO_ROOT / "schemas" / "daily-triage-item.schema.json"

if not SUITE.is_dir() and not REQUIRED:
    pytest.skip(
        f"JSONTestSuite not found at {SUITE}; clone it there "
        "(git clone https://github.com/nst/JSONTestSuite ../shared/jsontestsuite) "
        "or set SALVAGELANE_REQUIRE_JSONTESTSUITE=1 to make its absence a failure",
        allow_module_level=True,
    )

pytestmark = pytest.mark.jsontestsuite

FILES: list[Path] = sorted(SUITE.iterdir()) if SUITE.is_dir() else []


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """The file as the CLI reads it: bytes that are not UTF-8 become lone surrogates."""
    return path.read_bytes().decode("utf-8", "surrogateescape")


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise _Duplicate
    return dict(pairs)


def has_duplicate_keys(text: str) -> bool:
    try:
        json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate:
        return True
    return False


# The strict parse refuses these in items, on purpose (ADR 0001), even in valid JSON.
POLICY_CODES = {"nul_character", "lone_surrogate", "invalid_utf8", "non_finite", "number_too_long"}


def check_result(result: SalvageResult, raw: str) -> None:
    """Whatever the input: accounted for, serialisable, accepted data is the text's own."""
    counts = result.counts()
    assert counts["accepted"] == len(result.items)
    assert counts["quarantined"] == len(result.quarantined)
    for item in result.items:
        assert isinstance(item.data, dict)
        assert json.loads(item.span.text(raw)) == item.data
    json.dumps(result.to_json(), ensure_ascii=True, allow_nan=False)


def salvage_three_ways(raw: str) -> tuple[SalvageResult, SalvageResult, SalvageResult, str]:
    embedded = '{"items": [' + raw + "]}"
    whole = salvage(raw, SalvagePolicy(items_path=()))
    under_items = salvage(raw, SalvagePolicy(items_path=("items",)))
    as_item = salvage(embedded, SalvagePolicy(items_path=("items",)))
    check_result(whole, raw)
    check_result(under_items, raw)
    check_result(as_item, embedded)
    return whole, under_items, as_item, embedded


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_the_suite_is_present_and_complete() -> None:
    assert SUITE.is_dir(), (
        f"JSONTestSuite is required (SALVAGELANE_REQUIRE_JSONTESTSUITE=1) at {SUITE}"
    )
    assert len(FILES) == EXPECTED_FILES
    assert {path.name[:2] for path in FILES} == {"y_", "n_", "i_"}


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_jsontestsuite_file(path: Path) -> None:
    raw = read_text(path)
    kind = path.name[:2]
    with time_limit(PER_FILE_SECONDS, path.name):
        whole, under_items, as_item, _ = salvage_three_ways(raw)

    # Validity is a property of the text, not of the items path.
    assert whole.document_valid == under_items.document_valid
    if kind == "n_":
        assert whole.document_valid is False
        return
    if kind == "i_":
        return

    duplicates = has_duplicate_keys(raw)
    assert whole.document_valid is not duplicates
    assert as_item.document_valid is not duplicates
    value = json.loads(raw)

    # Embedded as the one item: an object is accepted as it is, unless the strict item
    # parse refuses it by policy; anything else is never accepted.
    if isinstance(value, dict) and not duplicates:
        if as_item.items:
            assert [item.data for item in as_item.items] == [value]
        else:
            assert [q.error.code for q in as_item.quarantined] in [[c] for c in POLICY_CODES]
    else:
        assert not as_item.items
        assert len(as_item.quarantined) == 1
        assert as_item.quarantined[0].reason in (Reason.NOT_OBJECT, Reason.MALFORMED)

    # As the whole document, an array is the items list: one candidate per element.
    if isinstance(value, list) and not duplicates:
        assert whole.counts()["candidates"] == len(value)
        for item in whole.items:
            assert item.data in value


def test_every_file_through_the_cli_batch_mode(tmp_path: Path) -> None:
    assert FILES, f"no JSONTestSuite files at {SUITE}"
    texts = [read_text(path) for path in FILES]
    # Lone surrogates (from bytes that were not UTF-8) travel as \udcXX escapes.
    request = "".join(json.dumps({"raw": text}, ensure_ascii=True) + "\n" for text in texts)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "salvagelane",
            "salvage",
            "--batch",
            "--schema",
            str(ITEM_SCHEMA),
            "--items",
            "",
        ],
        input=request.encode("ascii"),
        capture_output=True,
        cwd=REPO_ROOT,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode("utf-8", "replace")
    lines = completed.stdout.decode("ascii").splitlines()
    assert len(lines) == len(FILES)

    schema = ItemSchema.compile(json.loads(ITEM_SCHEMA.read_text(encoding="utf-8")))
    for path, text, line in zip(FILES, texts, lines, strict=True):
        with time_limit(PER_FILE_SECONDS, path.name):
            expected = salvage(text, SalvagePolicy(items_path=(), item_schema=schema))
        record = json.loads(line)
        assert record["document_valid"] == expected.document_valid, path.name
        # Same record, so the lines are the inputs' answers in the inputs' order.
        as_written = json.loads(json.dumps(expected.to_json(), ensure_ascii=True))
        assert record == as_written, path.name
