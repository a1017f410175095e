"""check_item: one item's text (an operator's correction) through salvage's guardrail chain."""

from __future__ import annotations

import json

import pytest

from salvagelane.core import (
    AcceptedItem,
    Guardrails,
    QuarantinedItem,
    Reason,
    SalvagePolicy,
    check_item,
    salvage,
)

POLICY = SalvagePolicy(
    guardrails=Guardrails(
        max_items=2, max_depth=3, max_string_length=20, allow_lists={"c": frozenset({"ok"})}
    )
)


@pytest.mark.parametrize(
    ("text", "reason", "path"),
    [
        ('{"c": "ok"', Reason.TRUNCATED, "$"),
        ('{"c": "ok"} trailing', Reason.MALFORMED, "$"),
        ('{"c": "ok", "c": "ok"}', Reason.MALFORMED, "$"),
        ("", Reason.MALFORMED, "$"),
        ('["ok"]', Reason.NOT_OBJECT, "$"),
        ('{"c": "nope"}', Reason.ALLOW_LIST, "$.c"),
        ('{"c": "ok", "d": [[[1]]]}', Reason.TOO_DEEP, "$"),
        ('{"c": "' + "x" * 30 + '"}', Reason.TOO_LONG, "$"),
    ],
)
def test_a_bad_item_is_refused_with_the_reason_salvage_gives(
    text: str, reason: Reason, path: str
) -> None:
    verdict = check_item(text, POLICY)

    assert isinstance(verdict, QuarantinedItem)
    assert (verdict.reason, verdict.error.path) == (reason, path)
    # The same text as a model's only item is quarantined for the same reason (a cut-off
    # item, or nothing, cannot be wrapped in an array as it is).
    if text and reason is not Reason.TRUNCATED:
        (model,) = salvage("[" + text + "]", POLICY).quarantined
        assert model.reason == reason


def test_a_good_item_is_accepted_whitespace_around_it_ignored() -> None:
    verdict = check_item('\n  {"c": "ok", "n": 1}\n', POLICY, kept=1, index=4)

    assert isinstance(verdict, AcceptedItem)
    assert (verdict.data, verdict.index) == ({"c": "ok", "n": 1}, 4)


def test_the_item_count_counts_the_items_already_kept() -> None:
    verdict = check_item(json.dumps({"c": "ok"}), POLICY, kept=2)

    assert isinstance(verdict, QuarantinedItem)
    assert verdict.reason is Reason.OVER_LIMIT
    assert verdict.error.expected == "at most 2 items in the report"
    assert verdict.error.received == "3 items with this one: the report already holds 2"


def test_the_byte_cap_applies() -> None:
    policy = SalvagePolicy(guardrails=Guardrails(max_bytes=8))

    verdict = check_item('{"c": "ok"}', policy)

    assert isinstance(verdict, QuarantinedItem)
    assert verdict.reason is Reason.OVERSIZE
