"""Every regression fixture under tests/fixtures/ replays to its recorded outcome.

A change to salvage, the guardrails or a bundled definition that alters any recorded
outcome fails here until the fixture is updated on purpose
(``salvagelane replay tests/fixtures --use-current --update``, reviewed in the diff of
expected.json). The suite replays with the repository's current definitions
(``--use-current``), whatever definition a fixture carries: they are what ships.
Fixtures are found by their files (raw.txt and meta.json), so the provider and schema
fixtures beside them are not taken for ones.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from salvagelane.cli.fixture_commands import replayer_for
from salvagelane.fixtures.format import EXPECTED_FILE, discover

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
INSTRUCTIONS = ROOT / "instructions"
SUITE = discover([FIXTURES])


def test_the_suite_is_found_by_files_not_names() -> None:
    names = {path.relative_to(FIXTURES).as_posix() for path in SUITE}
    assert "daily-triage-truncated" in names
    assert not any(name.startswith(("providers", "schemas")) for name in names)


@pytest.mark.parametrize("fixture", SUITE, ids=[p.relative_to(FIXTURES).as_posix() for p in SUITE])
def test_fixture_replays_to_its_recorded_outcome(fixture: Path) -> None:
    replay = replayer_for(INSTRUCTIONS, use_current=True).replay(fixture)
    assert replay.verdict == "same", "\n".join(
        [replay.error or ""] + [d.message for d in replay.differences]
    )


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: d.update(status="ok"), "status changed: ok -> partial"),
        (lambda d: d["items"].pop(), "item 7 gained: was not a candidate, now accepted"),
        (
            lambda d: d["quarantined"][0].update(reason="schema"),
            "item 8 reason changed: schema -> truncated",
        ),
        (lambda d: d["items"][0]["data"].update(rank=9), "items[0].sha256: expected"),
    ],
    ids=["status", "item", "reason", "data"],
)
def test_a_tampered_expected_outcome_fails(tmp_path: Path, tamper: object, message: str) -> None:
    fixture = tmp_path / "daily-triage-truncated"
    shutil.copytree(FIXTURES / "daily-triage-truncated", fixture)
    path = fixture / EXPECTED_FILE
    document = json.loads(path.read_text(encoding="utf-8"))
    tamper(document)  # type: ignore[operator]
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")

    replay = replayer_for(INSTRUCTIONS, use_current=True).replay(fixture)

    assert replay.verdict in {"differs", "error"}
    assert message in "\n".join([replay.error or ""] + [d.message for d in replay.differences])
