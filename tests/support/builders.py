"""Shared helpers for the unit tables of the salvage core (scanner, guardrails, repair, schema)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from salvagelane.core.assembly import SalvagePolicy, salvage
from salvagelane.core.guardrails import Guardrails
from salvagelane.core.records import Reason, SalvageResult
from salvagelane.core.scanner import ItemsPath, ScanResult
from salvagelane.core.schema import ItemSchema

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
TRIAGE_FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"

VALID_TRIAGE_ITEM: dict[str, Any] = {
    "rank": 1,
    "candidate": "billing-migration",
    "action": "continue",
    "why": "Cut-over is on Friday and three reconciliation checks still fail.",
    "confidence": 0.9,
    "wsjf": {
        "business_value": 19,
        "time_criticality": 18,
        "risk_reduction": 13,
        "job_size": 4,
        "score": 12.5,
    },
}


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def triage_item_schema_dict() -> dict[str, Any]:
    data: dict[str, Any] = load_json(SCHEMAS / "daily-triage-item.schema.json")
    return data


@cache
def triage_schema() -> ItemSchema:
    """The compiled daily-triage item schema (compiled once; ItemSchema is immutable)."""
    path = SCHEMAS / "daily-triage-item.schema.json"
    return ItemSchema.compile(triage_item_schema_dict(), source=str(path))


def triage_item(**overrides: Any) -> dict[str, Any]:
    """A valid daily-triage item; ``wsjf`` overrides are merged into the nested object."""
    item = copy.deepcopy(VALID_TRIAGE_ITEM)
    wsjf_overrides = overrides.pop("wsjf", None)
    item.update(overrides)
    if isinstance(wsjf_overrides, Mapping):
        item["wsjf"].update(wsjf_overrides)
    elif wsjf_overrides is not None:
        item["wsjf"] = wsjf_overrides
    return item


def policy(
    items_path: ItemsPath = (),
    *,
    schema: ItemSchema | None = None,
    **limits: Any,
) -> SalvagePolicy:
    return SalvagePolicy(items_path=items_path, item_schema=schema, guardrails=Guardrails(**limits))


def run(
    raw: str,
    items_path: ItemsPath = (),
    *,
    schema: ItemSchema | None = None,
    finish_reason: str | None = None,
    **limits: Any,
) -> SalvageResult:
    return salvage(raw, policy(items_path, schema=schema, **limits), finish_reason=finish_reason)


def accepted_data(result: SalvageResult) -> list[Any]:
    return [item.data for item in result.items]


def quarantine_reasons(result: SalvageResult) -> list[tuple[int | None, Reason]]:
    return [(item.index, item.reason) for item in result.quarantined]


def assert_spans_reparse(raw: str, result: SalvageResult) -> None:
    """Every accepted item without coercions or repairs is exactly the JSON text its span
    covers."""
    for item in result.items:
        if item.coercions or item.repairs:
            continue
        text = raw[item.span.start : item.span.end]
        assert json.loads(text) == item.data, (item.index, text)


def assert_partition(result: SalvageResult) -> None:
    """Each candidate index is accepted or quarantined, never both, never twice."""
    accepted = [item.index for item in result.items]
    quarantined = [item.index for item in result.quarantined if item.index is not None]
    assert len(set(accepted)) == len(accepted)
    assert len(set(quarantined)) == len(quarantined)
    assert not set(accepted) & set(quarantined)


def assert_steps_bound(text: str, scanned: ScanResult) -> None:
    """The scanner's stated work bound: ``steps <= 2 * len(text) + 2``."""
    assert scanned.steps <= 2 * len(text) + 2, (scanned.steps, len(text))
