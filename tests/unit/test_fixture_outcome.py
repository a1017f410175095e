"""The recorded outcome of a salvage and its comparison (``salvagelane.core.outcome``)."""

from __future__ import annotations

import pytest

from salvagelane.core import SalvagePolicy, salvage
from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.outcome import (
    Difference,
    ItemOutcome,
    Outcome,
    QuarantineOutcome,
    compare,
    outcome_of,
)


def item(index: int, data: object = None) -> ItemOutcome:
    value = {"n": index} if data is None else data
    return ItemOutcome(index=index, sha256=canonical_sha256(value), data=value)


def quarantined(index: int | None, reason: str) -> QuarantineOutcome:
    return QuarantineOutcome(index=index, reason=reason)


BASE = Outcome(
    status="partial",
    items=(item(0), item(1), item(2)),
    quarantined=(quarantined(3, "truncated"),),
    envelope_keys=("summary",),
)


def variant(**changes: object) -> Outcome:
    fields = {
        "status": BASE.status,
        "items": BASE.items,
        "quarantined": BASE.quarantined,
        "envelope_keys": BASE.envelope_keys,
        **changes,
    }
    return Outcome(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("actual", "expected_differences"),
    [
        pytest.param(BASE, [], id="same"),
        pytest.param(
            variant(
                items=(item(0), item(1)),
                quarantined=(quarantined(2, "over_limit"), quarantined(3, "truncated")),
            ),
            [("item_lost", 2, "accepted", "quarantined: over_limit")],
            id="item lost to a quarantine",
        ),
        pytest.param(
            variant(items=(item(0), item(1))),
            [("item_lost", 2, "accepted", "not a candidate")],
            id="item lost altogether",
        ),
        pytest.param(
            variant(status="ok", items=(*BASE.items, item(3)), quarantined=()),
            [
                ("status", None, "partial", "ok"),
                ("item_gained", 3, "quarantined: truncated", "accepted"),
            ],
            id="item gained, status changed",
        ),
        pytest.param(
            variant(quarantined=(quarantined(3, "schema"),)),
            [("reason_changed", 3, "truncated", "schema")],
            id="reason changed",
        ),
        pytest.param(
            variant(status="failed"),
            [("status", None, "partial", "failed")],
            id="status changed",
        ),
        pytest.param(
            variant(items=(item(0), item(1, {"n": 99}), item(2))),
            [
                (
                    "item_changed",
                    1,
                    f"sha256 {item(1).sha256[:12]}",
                    f"sha256 {item(1, {'n': 99}).sha256[:12]}",
                )
            ],
            id="item data changed",
        ),
        pytest.param(
            variant(quarantined=(*BASE.quarantined, quarantined(4, "malformed"))),
            [("quarantine_gained", 4, "not a candidate", "quarantined: malformed")],
            id="new quarantined candidate",
        ),
        pytest.param(
            variant(items=(item(1), item(0), item(2))),
            [("order", None, "items [1, 2, 3]", "items [2, 1, 3]")],
            id="order changed",
        ),
        pytest.param(
            variant(envelope_keys=()),
            [("envelope_keys", None, "[summary]", "none")],
            id="envelope lost",
        ),
    ],
)
def test_compare(
    actual: Outcome, expected_differences: list[tuple[str, int | None, str, str]]
) -> None:
    differences = compare(BASE, actual)
    assert [(d.kind, d.index, d.expected, d.actual) for d in differences] == expected_differences


def test_messages_say_what_changed_where() -> None:
    lost = Difference(kind="item_lost", index=6, expected="accepted", actual="quarantined: x")
    assert lost.message == "item 7 lost: was accepted, now quarantined: x"  # 1-based
    status = Difference(kind="status", expected="ok", actual="partial")
    assert status.message == "status changed: ok -> partial"
    whole = Difference(kind="reason_changed", index=None, expected="oversize", actual="x")
    assert whole.message == "output reason changed: oversize -> x"


def test_json_round_trip_and_hash_is_key_order_free() -> None:
    assert Outcome.from_json(BASE.to_json()) == BASE
    assert canonical_sha256({"a": 1, "b": [1.5, "é"]}) == canonical_sha256(
        {"b": [1.5, "é"], "a": 1}
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format=2), "format: expected 1"),
        (lambda d: d.pop("status"), "status: expected a string"),
        (lambda d: d["items"][0].update(data={"n": 7}), r"items\[0\]\.sha256: expected"),
        (lambda d: d["items"][0].update(index=-1), r"items\[0\]\.index: expected a source index"),
        (lambda d: d["quarantined"][0].pop("reason"), r"quarantined\[0\]\.reason"),
    ],
)
def test_from_json_names_the_field_at_fault(edit: object, message: str) -> None:
    document = BASE.to_json()
    edit(document)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        Outcome.from_json(document)


def test_outcome_of_a_salvage() -> None:
    raw = '{"summary": "s", "items": [{"a": 1}, {"b": 2}, {"c": '
    result = salvage(raw, SalvagePolicy(items_path=("items",)), finish_reason="length")
    outcome = outcome_of(result)
    assert outcome.status == "partial"
    assert [(i.index, i.data) for i in outcome.items] == [(0, {"a": 1}), (1, {"b": 2})]
    assert outcome.quarantined == (quarantined(2, "truncated"),)
    assert outcome.envelope_keys == ("summary",)
    assert compare(outcome, outcome_of(result)) == []
