"""docs/reference/events.md lists every run event the code defines, with its subscribers."""

from __future__ import annotations

from pathlib import Path

from salvagelane.events import EVENT_TYPES
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_the_events_reference_is_what_the_code_defines() -> None:
    reference = load_script("events_reference")
    written = (ROOT / "docs" / "reference" / "events.md").read_text(encoding="utf-8")
    assert written == reference.generated(), (
        "docs/reference/events.md differs from the events: run scripts/events_reference.py --write"
    )
    for kind in EVENT_TYPES:
        assert f"| `{kind.name}` |" in written
    assert "| `run.finished` | info |" in written
    assert "| log, metrics |" in written
