"""Daily budgets: what an instruction spent on a day, what it cost, and whether a run
may call the model (``budget`` in a definition, docs/adr/0020-budgets.md).

The day is the calendar day of the run's fire time (its start time for an unscheduled
run) in the schedule's time zone. What was spent is read from the store (every attempt
of the instruction's runs of that day, per model) and priced here with the definition's
price table: a model the table does not price is counted at the price of the
definition's ``connector.model``, and the figures say so. The arithmetic is pure; only
:func:`budget_check`'s check reads the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from salvagelane.definitions import Instruction
from salvagelane.definitions.model import Budget
from salvagelane.definitions.prices import PriceTable
from salvagelane.store import ModelSpend, Store
from salvagelane.store.health import BudgetToday, InstructionHealth
from salvagelane.vocabulary import Trigger


@dataclass(frozen=True, kw_only=True, slots=True)
class Cost:
    """What tokens cost by a price table. ``estimated``: models the table does not
    price, counted at the definition's model's price; ``unpriced``: models with no price
    at all (not counted: ``amount`` is then a lower bound)."""

    amount: float
    currency: str
    estimated: tuple[str, ...] = ()
    unpriced: tuple[str, ...] = ()

    def note(self, model: str) -> str:
        """What the amount does not say by itself: '' when every model was priced."""
        parts = []
        if self.estimated:
            parts.append(f"{', '.join(self.estimated)} counted at the price of {model}")
        if self.unpriced:
            parts.append(f"{', '.join(self.unpriced)} not priced (not counted)")
        return "; ".join(parts)


def cost_of(spends: Sequence[ModelSpend], prices: PriceTable, *, model: str) -> Cost:
    """What ``spends`` cost by ``prices``; ``model`` is the definition's, whose price
    counts for a model the table does not know (a dated name a provider reports)."""
    fallback = prices.price(model)
    amount = 0.0
    estimated: list[str] = []
    unpriced: list[str] = []
    for spend in spends:
        if spend.tokens == 0:
            continue
        price = prices.price(spend.model)
        name = spend.model or "an unreported model"
        if price is None:
            price = fallback
            (estimated if price is not None else unpriced).append(name)
        if price is not None:
            amount += price.cost(spend.prompt_tokens, spend.completion_tokens)
    return Cost(
        amount=amount,
        currency=prices.currency,
        estimated=tuple(estimated),
        unpriced=tuple(unpriced),
    )


def day_of(moment: datetime, timezone: str) -> tuple[date, datetime, datetime]:
    """The calendar day of ``moment`` in ``timezone``, with its start and the next day's
    start (aware: a day of a daylight-saving change is 23 or 25 hours long)."""
    zone = ZoneInfo(timezone)
    day = moment.astimezone(zone).date()
    start = datetime.combine(day, time(0), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
    return day, start, end


@dataclass(frozen=True, kw_only=True, slots=True)
class DaySpend:
    """An instruction's spend on one day: tokens, and cost when a price table applies."""

    day: date
    timezone: str
    tokens: int
    cost: Cost | None


def day_spend(
    spends: Sequence[ModelSpend], budget: Budget, *, day: date, timezone: str, model: str
) -> DaySpend:
    return DaySpend(
        day=day,
        timezone=timezone,
        tokens=sum(spend.tokens for spend in spends),
        cost=None if budget.prices is None else cost_of(spends, budget.prices, model=model),
    )


def spent_of_limit(
    what: str, spent: float | None, limit: float, *, currency: str | None = None
) -> str:
    """``10,432 of 10,000 tokens`` (``what`` ``tokens``) or ``1.2345 of 1.0000 USD``
    (``cost``; ``-`` spent when no price table gives one)."""
    if what == "tokens":
        return f"{int(spent or 0):,} of {int(limit):,} tokens"
    amount = "-" if spent is None else f"{spent:,.4f}"
    return f"{amount} of {limit:,.4f} {currency or ''}".rstrip()


def today_amounts(budget: BudgetToday) -> str:
    """What the day of ``budget`` spent of each of its limits:
    ``150 of 150 tokens; 0.2000 of 1.0000 USD``."""
    spent = []
    if budget.tokens_per_day is not None:
        spent.append(spent_of_limit("tokens", budget.tokens, budget.tokens_per_day))
    if budget.cost_per_day is not None:
        spent.append(
            spent_of_limit("cost", budget.cost, budget.cost_per_day, currency=budget.currency)
        )
    return "; ".join(spent)


@dataclass(frozen=True, kw_only=True, slots=True)
class Exhausted:
    """A limit the day's spend reached: ``what`` is ``tokens`` or ``cost``."""

    what: str
    spent: float
    limit: float
    spend: DaySpend
    note: str = ""

    def amounts(self) -> str:
        """``10,432 of 10,000 tokens`` or ``1.2345 of 1.0000 USD``."""
        currency = self.spend.cost.currency if self.spend.cost is not None else None
        return spent_of_limit(self.what, self.spent, self.limit, currency=currency)

    def message(self, instruction_id: str, *, attempts_made: int = 0) -> str:
        """The run's error: starts with ``budget: `` (what a search for budget stops finds)."""
        spend = self.spend
        made = (
            "no model call was made"
            if attempts_made == 0
            else f"no model call was made after attempt {attempts_made}"
        )
        note = f" ({self.note})" if self.note else ""
        return (
            f"budget: {instruction_id} spent {self.amounts()} on {spend.day.isoformat()} "
            f"({spend.timezone}){note}; {made}"
        )


def exhausted(budget: Budget, spend: DaySpend, *, model: str) -> Exhausted | None:
    """The first limit of ``budget`` that ``spend`` reached (tokens first), or None."""
    if budget.tokens_per_day is not None and spend.tokens >= budget.tokens_per_day:
        return Exhausted(
            what="tokens", spent=spend.tokens, limit=budget.tokens_per_day, spend=spend
        )
    cost = spend.cost
    if budget.cost_per_day is not None and cost is not None and cost.amount >= budget.cost_per_day:
        return Exhausted(
            what="cost",
            spent=cost.amount,
            limit=budget.cost_per_day,
            spend=spend,
            note=cost.note(model),
        )
    return None


BudgetCheck = Callable[[], "Exhausted | None"]
"""Asked before each model call of a run: the limit its day's spend reached, or None."""


def budget_check(
    store: Store, instruction: Instruction, moment: datetime, *, trigger: Trigger
) -> BudgetCheck | None:
    """The check of ``instruction``'s budget for a run whose fire time (or start) is
    ``moment``; None when the definition sets no limit, and for a replay (``run
    --replay`` answers from a fixture: no model is called, nothing is spent)."""
    budget = instruction.budget
    if not budget.limited or trigger is Trigger.REPLAY:
        return None

    def check() -> Exhausted | None:
        spend = spend_on_day_of(store, instruction, moment)
        return exhausted(budget, spend, model=instruction.connector.model)

    return check


def spend_on_day_of(store: Store, instruction: Instruction, moment: datetime) -> DaySpend:
    """What ``instruction``'s runs of the day of ``moment`` (in its schedule's time zone)
    spent, read from the store's attempts."""
    timezone = instruction.schedule.timezone
    day, since, until = day_of(moment, timezone)
    return day_spend(
        store.spend.between(instruction.id, since=since, until=until),
        instruction.budget,
        day=day,
        timezone=timezone,
        model=instruction.connector.model,
    )


def call_cost(
    prices: PriceTable | None, *, model: str | None, fallback: str, prompt: int, completion: int
) -> float | None:
    """What one model call cost (None without a price table or a price for either model)."""
    if prices is None:
        return None
    price = prices.price(model) or prices.price(fallback)
    return None if price is None else price.cost(prompt, completion)


def with_cost(
    health: InstructionHealth, prices: PriceTable | None, *, model: str
) -> InstructionHealth:
    """``health`` with its cost per day (the days of its tokens), by ``prices``."""
    if prices is None:
        return health
    costs = {
        day: cost_of(usage.models, prices, model=model)
        for day, usage in health.tokens_by_day.items()
    }
    notes = sorted({cost.note(model) for cost in costs.values() if cost.note(model)})
    return replace(
        health,
        currency=prices.currency,
        cost_by_day={day: cost.amount for day, cost in costs.items()},
        cost_note="; ".join(notes) or None,
    )


def budget_today(store: Store, instruction: Instruction, now: datetime) -> BudgetToday | None:
    """``instruction``'s daily limits and what the day of ``now`` (in its schedule's time
    zone) has spent, read as a run's budget check reads it; None when no limit is set."""
    budget = instruction.budget
    if not budget.limited:
        return None
    spend = spend_on_day_of(store, instruction, now)
    reached = exhausted(budget, spend, model=instruction.connector.model)
    return BudgetToday(
        day=spend.day,
        timezone=spend.timezone,
        tokens=spend.tokens,
        tokens_per_day=budget.tokens_per_day,
        cost=None if spend.cost is None else spend.cost.amount,
        cost_per_day=budget.cost_per_day,
        currency=None if spend.cost is None else spend.cost.currency,
        reached=None if reached is None else reached.what,
    )


def priced_healths(
    store: Store, healths: Sequence[InstructionHealth], *, now: datetime
) -> list[InstructionHealth]:
    """``healths`` with cost per day, each by the price table of its instruction's newest
    stored definition (the table a run used is kept with it), and that definition's
    budget with what the day of ``now`` spent; unchanged without them."""
    from salvagelane.definitions import DefinitionSnapshot, load_stored
    from salvagelane.errors import SalvagelaneError

    priced = []
    for health in healths:
        record = store.spend.newest_definition(health.instruction_id)
        if record is not None:
            try:
                snapshot = DefinitionSnapshot.from_json(
                    record.content, where=f"definition {record.sha256[:12]}"
                )
                instruction = load_stored(snapshot)
            except (ValueError, SalvagelaneError):
                pass  # a stored copy this version cannot read: the tokens still show
            else:
                health = with_cost(
                    health, instruction.budget.prices, model=instruction.connector.model
                )
                health = replace(health, budget=budget_today(store, instruction, now))
        priced.append(health)
    return priced
