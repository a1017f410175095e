"""The pure halves of budgets: price tables (definitions/prices.py), the day a run counts
towards, and the spend arithmetic (runtime/budget.py, store/spend.py's sums)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from salvagelane.definitions.model import Budget
from salvagelane.definitions.prices import (
    ModelPrice,
    PriceTable,
    PriceTableProblem,
    parse_price_table,
)
from salvagelane.runtime.budget import (
    DaySpend,
    call_cost,
    cost_of,
    day_of,
    day_spend,
    exhausted,
)
from salvagelane.store.spend import ModelSpend, spend_of

TABLE = PriceTable(
    currency="EUR",
    models={
        "big": ModelPrice(input_per_million=3.0, output_per_million=15.0),
        "small": ModelPrice(input_per_million=0.25, output_per_million=1.0),
    },
    reference="prices.json",
)


def spend(model: str | None, prompt: int, completion: int, attempts: int = 1) -> ModelSpend:
    return ModelSpend(
        model=model, prompt_tokens=prompt, completion_tokens=completion, attempts=attempts
    )


# --- the price table --------------------------------------------------------------------------


def test_a_price_table_in_yaml_or_json_loads() -> None:
    yaml_text = (
        "currency: EUR  # every price in it\n"
        "as_of: '2026-11-01'\n"
        "models:\n"
        "  big: {input_per_million: 3, output_per_million: 15}\n"
        "  small: {input_per_million: 0.25, output_per_million: 1}\n"
    )
    json_text = (
        '{"currency": "EUR", "models": {"big": {"input_per_million": 3, '
        '"output_per_million": 15}, "small": {"input_per_million": 0.25, '
        '"output_per_million": 1}}}'
    )
    for text in (yaml_text, json_text):
        assert parse_price_table(text, reference="prices.json") == TABLE


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("", "expected a mapping with currency and models, got an empty file", None),
        ("[1]", "(top level): expected a mapping, got a list", 1),
        ("models: {a: {input_per_million: 1, output_per_million: 1}}\n",
         "(top level): expected the field(s) currency, got nothing", 1),
        ("currency: ''\nmodels: {a: {input_per_million: 1, output_per_million: 1}}\n",
         'currency: expected a non-empty string, got ""', 1),
        ("currency: USD\nmodels: {}\n", "models: expected at least one model, got none", 2),
        ("currency: USD\nmodels:\n  a: {input_per_million: '1', output_per_million: 1}\n",
         'models.a.input_per_million: expected a number (a price per million tokens), got "1"',
         3),
        ("currency: USD\nmodels:\n  a: {input_per_million: -1, output_per_million: 1}\n",
         "models.a.input_per_million: expected a number of at least 0, got -1", 3),
        ("currency: USD\nmodels:\n  a: {input_per_million: 1, output_per_million: true}\n",
         "models.a.output_per_million: expected a number (a price per million tokens), got true",
         3),
        ("currency: USD\nmodels:\n  a: {input_per_million: 1, output_per_million: 1, x: 2}\n",
         'models.a: expected only the fields input_per_million, output_per_million, got "x"',
         3),
        ('{"currency": "USD",', "expected valid YAML, got a syntax error", 1),
    ],
)  # fmt: skip
def test_a_broken_price_table_says_where_what_was_expected_and_what_came(
    text: str, message: str, line: int | None
) -> None:
    with pytest.raises(PriceTableProblem) as caught:
        parse_price_table(text, reference="prices.json")
    assert caught.value.message.startswith(message)
    assert caught.value.line == line
    shown = f"prices.json line {line}" if line else "prices.json"
    assert caught.value.at("prices.json") == f"{shown}: {caught.value.message}"


# --- the day a run counts towards -------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "zone", "day", "start", "end"),
    [
        # 23:20 UTC on the 28th is already the 29th in Paris (UTC+1 in November).
        (datetime(2026, 11, 28, 23, 20, tzinfo=UTC), "Europe/Paris", date(2026, 11, 29),
         datetime(2026, 11, 28, 23, 0, tzinfo=UTC), datetime(2026, 11, 29, 23, 0, tzinfo=UTC)),
        (datetime(2026, 11, 28, 5, 20, tzinfo=UTC), "UTC", date(2026, 11, 28),
         datetime(2026, 11, 28, tzinfo=UTC), datetime(2026, 11, 29, tzinfo=UTC)),
        # Still the 27th in New York (UTC-5).
        (datetime(2026, 11, 28, 3, 0, tzinfo=UTC), "America/New_York", date(2026, 11, 27),
         datetime(2026, 11, 27, 5, 0, tzinfo=UTC), datetime(2026, 11, 28, 5, 0, tzinfo=UTC)),
        # The day clocks go forward in Paris is 23 hours long.
        (datetime(2026, 3, 29, 12, 0, tzinfo=UTC), "Europe/Paris", date(2026, 3, 29),
         datetime(2026, 3, 28, 23, 0, tzinfo=UTC), datetime(2026, 3, 29, 22, 0, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_a_run_counts_towards_its_day_in_the_schedules_time_zone(
    moment: datetime, zone: str, day: date, start: datetime, end: datetime
) -> None:
    assert day_of(moment, zone) == (day, start, end)


# --- the spend arithmetic ---------------------------------------------------------------------


def test_calls_are_summed_per_model_and_a_failed_call_counts_no_tokens() -> None:
    usage: list[tuple[str | None, Any]] = [
        ("big", {"prompt_tokens": 100, "completion_tokens": 20}),
        ("small", {"prompt_tokens": 10, "completion_tokens": 5}),
        ("big", {"prompt_tokens": 1, "completion_tokens": 2}),
        (None, None),  # a failed call
        ("big", {"prompt_tokens": True, "completion_tokens": -4}),  # not counts
    ]
    assert spend_of(usage) == (
        spend("big", 101, 22, attempts=3),
        spend("small", 10, 5),
        spend(None, 0, 0),
    )


@pytest.mark.parametrize(
    ("spends", "model", "amount", "estimated", "unpriced"),
    [
        ([], "big", 0.0, (), ()),
        # 1M prompt tokens of big: 3; 1M completion tokens: 15.
        ([spend("big", 1_000_000, 0)], "big", 3.0, (), ()),
        ([spend("big", 0, 1_000_000)], "big", 15.0, (), ()),
        ([spend("big", 1000, 200), spend("small", 4000, 1000)], "big",
         (1000 * 3 + 200 * 15 + 4000 * 0.25 + 1000 * 1) / 1e6, (), ()),
        # A model the table does not price costs the definition's model's price, and says so.
        ([spend("big-2026-11-01", 1000, 0)], "big", 0.003, ("big-2026-11-01",), ()),
        ([spend(None, 1000, 0)], "small", 0.00025, ("an unreported model",), ()),
        # Neither priced (no cost limit can be set then): left out, and said.
        ([spend("odd", 1000, 0), spend("big", 1000, 0)], "unknown", 0.003, (), ("odd",)),
        # A call of no tokens costs nothing and is not a model to mention.
        ([spend("odd", 0, 0)], "unknown", 0.0, (), ()),
    ],
)  # fmt: skip
def test_what_tokens_cost_by_the_table(
    spends: list[ModelSpend],
    model: str,
    amount: float,
    estimated: tuple[str, ...],
    unpriced: tuple[str, ...],
) -> None:
    cost = cost_of(spends, TABLE, model=model)
    assert cost.amount == pytest.approx(amount)
    assert (cost.currency, cost.estimated, cost.unpriced) == ("EUR", estimated, unpriced)


def test_one_calls_cost() -> None:
    assert call_cost(None, model="big", fallback="big", prompt=10, completion=10) is None
    assert call_cost(TABLE, model="big", fallback="small", prompt=10**6, completion=0) == 3.0
    assert call_cost(TABLE, model="dated", fallback="small", prompt=10**6, completion=0) == 0.25
    assert call_cost(TABLE, model="dated", fallback="odd", prompt=10**6, completion=0) is None


DAY = date(2026, 11, 28)


def today(spends: list[ModelSpend], budget: Budget) -> DaySpend:
    return day_spend(spends, budget, day=DAY, timezone="Europe/Paris", model="big")


@pytest.mark.parametrize(
    ("budget", "spends", "verdict"),
    [
        (Budget(), [spend("big", 10**6, 10**6)], None),
        (Budget(tokens_per_day=1000), [spend("big", 600, 399)], None),
        (Budget(tokens_per_day=1000), [spend("big", 600, 400)], ("tokens", 1000, 1000)),
        (Budget(tokens_per_day=1000), [spend("big", 600, 300), spend("small", 200, 0)],
         ("tokens", 1100, 1000)),
        # 1000 * 3 / 1M + 100 * 15 / 1M = 0.0045
        (Budget(cost_per_day=0.005, prices=TABLE), [spend("big", 1000, 100)], None),
        (Budget(cost_per_day=0.0045, prices=TABLE), [spend("big", 1000, 100)],
         ("cost", 0.0045, 0.0045)),
        # Tokens are checked first.
        (Budget(tokens_per_day=10, cost_per_day=0.0001, prices=TABLE), [spend("big", 1000, 100)],
         ("tokens", 1100, 10)),
    ],
)  # fmt: skip
def test_a_limit_is_reached_at_the_limit(
    budget: Budget, spends: list[ModelSpend], verdict: tuple[str, float, float] | None
) -> None:
    over = exhausted(budget, today(spends, budget), model="big")
    if verdict is None:
        assert over is None
        return
    assert over is not None
    assert (over.what, over.spent, over.limit) == (
        verdict[0],
        pytest.approx(verdict[1]),
        verdict[2],
    )


def test_the_budget_error_says_who_spent_what_on_which_day() -> None:
    budget = Budget(tokens_per_day=10_000)
    over = exhausted(budget, today([spend("big", 10_000, 432)], budget), model="big")
    assert over is not None
    assert over.message("daily-triage") == (
        "budget: daily-triage spent 10,432 of 10,000 tokens on 2026-11-28 (Europe/Paris); "
        "no model call was made"
    )
    assert over.message("daily-triage", attempts_made=1).endswith(
        "; no model call was made after attempt 1"
    )
    priced = Budget(cost_per_day=0.001, prices=TABLE)
    over = exhausted(priced, today([spend("big-dated", 1000, 0)], priced), model="big")
    assert over is not None
    assert over.message("daily-triage") == (
        "budget: daily-triage spent 0.0030 of 0.0010 EUR on 2026-11-28 (Europe/Paris) "
        "(big-dated counted at the price of big); no model call was made"
    )
