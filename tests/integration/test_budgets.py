"""Daily budgets against a real database (SQLite and PostgreSQL) and a real local provider.

The provider (a server on 127.0.0.1) reports usage with every answer; a fire after the
day's budget is spent must be stored ``failed`` with a ``budget: `` error, and the
provider must have seen no request for it (counted at the server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from salvagelane.cli.health_commands import health_text
from salvagelane.connectors import Connector
from salvagelane.definitions import Instruction, load_instruction, load_stored
from salvagelane.definitions.snapshot import DefinitionSnapshot
from salvagelane.errors import DefinitionError
from salvagelane.events import EventStream
from salvagelane.events.kinds import BudgetExhausted, Event, ModelCalled
from salvagelane.runtime.budget import budget_check, priced_healths
from salvagelane.runtime.executor import Executor
from salvagelane.runtime.metrics import Metrics
from salvagelane.runtime.notifications import Notifier, notifications_of
from salvagelane.store import Store
from salvagelane.store.health import BudgetToday
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.security import Access
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.cli import salvagelane_here
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import (
    Project,
    chat_answer,
    items,
    openai_connector_for,
    provider,
    replay_executor,
    store,
)

__all__ = ["provider", "store"]

KEY = "sk-budget-test-never-stored"
USAGE = {"prompt_tokens": 100, "completion_tokens": 50}  # 150 tokens a call
DAY = datetime(2026, 11, 28, 5, 20, tzinfo=UTC)
LATER = datetime(2026, 11, 28, 17, 20, tzinfo=UTC)  # the same day in Europe/Paris
NEXT_DAY = datetime(2026, 11, 28, 23, 20, tzinfo=UTC)  # 00:20 on the 29th in Paris

PRICES = {
    "currency": "USD",
    "as_of": "2026-11-01",
    "models": {
        # per million tokens: a call of 100 + 50 tokens costs 0.1 + 0.1 = 0.2
        "openai/gpt-4.1-mini": {"input_per_million": 1000, "output_per_million": 2000},
    },
}


def report() -> str:
    return json.dumps({"summary": "Two things matter today.", "recommendations": items(2)})


@pytest.fixture
def connector_for(provider: ScriptedServer) -> Iterator[Callable[[Instruction], Connector]]:
    with httpx.Client() as client:
        yield openai_connector_for(
            client, provider.base_url, key=KEY, sleep=lambda seconds: None, max_attempts=1
        )


def budgeted(tmp_path: Path, budget: str, *, prices: bool = False) -> Instruction:
    """The daily-triage definition scheduled in Europe/Paris with ``budget`` (and, with
    ``prices``, the project-wide price table beside it)."""
    project = Project.create(tmp_path)
    if prices:
        (project.instructions / "prices.json").write_text(json.dumps(PRICES), encoding="utf-8")
    project.edit({"  timezone: UTC\n  misfire": "  timezone: Europe/Paris\n  misfire"})
    project.edit({}, append=budget)
    return load_instruction(project.definition)


def executor(
    store: Store,
    connector_for: Callable[[Instruction], Connector],
    seen: list[Event],
    events: EventStream | None = None,
) -> Executor:
    events = events or EventStream()
    events.subscribe(seen.append)
    return Executor(store, connector_for=connector_for, events=events)


def fire(ex: Executor, instruction: Instruction, when: datetime) -> tuple[str, RunStatus, str]:
    outcome = ex.run(instruction, trigger=Trigger.SCHEDULE, scheduled_for=when)
    return outcome.run_id, outcome.status, outcome.error or ""


def test_the_fire_after_the_token_budget_is_spent_fails_without_a_request(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = budgeted(tmp_path, "budget:\n  tokens_per_day: 150\n")
    assert instruction.budget.tokens_per_day == 150
    provider.script.extend(chat_answer(report(), usage=USAGE) for _ in range(3))
    seen: list[Event] = []
    ex = executor(store, connector_for, seen)

    _, status, _ = fire(ex, instruction, DAY)
    assert status == RunStatus.OK
    assert len(provider.requests) == 1

    run_id, status, error = fire(ex, instruction, LATER)
    assert status == RunStatus.FAILED
    assert error == (
        "budget: daily-triage spent 150 of 150 tokens on 2026-11-28 (Europe/Paris); "
        "no model call was made"
    )
    assert len(provider.requests) == 1  # the provider saw nothing of the second fire
    stored = store.get_run(run_id)
    assert (stored.status, stored.error, stored.attempts) == ("failed", error, [])
    (exhausted,) = [e for e in seen if isinstance(e, BudgetExhausted)]
    assert (exhausted.run_id, exhausted.limit_kind, exhausted.spent, exhausted.limit) == (
        run_id,
        "tokens",
        150,
        150,
    )
    assert (exhausted.day, exhausted.timezone, exhausted.attempt) == (
        "2026-11-28",
        "Europe/Paris",
        1,
    )

    # The next day in the schedule's time zone (still the 28th in UTC) has its own budget.
    _, status, _ = fire(ex, instruction, NEXT_DAY)
    assert status == RunStatus.OK
    assert len(provider.requests) == 2


def test_a_fire_refused_by_the_budget_notifies_as_a_failed_run(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    with ScriptedServer(then=Scripted(status=200, body={"ok": True})) as receiver:
        notify = f"notify:\n  - on: [failed]\n    webhook:\n      url: {receiver.origin}/hook\n"
        instruction = budgeted(tmp_path, "budget:\n  tokens_per_day: 150\n" + notify)
        provider.script.append(chat_answer(report(), usage=USAGE))
        events = EventStream()
        with httpx.Client() as client:
            Notifier(
                store,
                definitions=lambda: {instruction.id: instruction},
                notifications_for=lambda i: notifications_of(i, client),
            ).subscribe(events)
            ex = executor(store, connector_for, [], events)
            fire(ex, instruction, DAY)
            run_id, status, error = fire(ex, instruction, LATER)
        assert status == RunStatus.FAILED
        assert error.startswith("budget: ")
        assert len(provider.requests) == 1
        (sent,) = [r.body for r in receiver.requests]
    assert (sent["event"], sent["run_id"], sent["error"]) == ("failed", run_id, error)
    assert str(sent["text"]) == (
        f"daily-triage: run {run_id[:8]} (fire 2026-11-28T17:20:00Z) failed\nerror: {error}"
    )


def test_a_replay_calls_no_model_so_it_neither_counts_nor_is_refused(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = budgeted(tmp_path, "budget:\n  tokens_per_day: 150\n")
    replays = replay_executor(store)
    for _ in range(2):  # the fixture reports 2874 + 1400 tokens each time
        outcome = replays.run(instruction, trigger=Trigger.REPLAY)
        assert (outcome.status, outcome.error) == (RunStatus.PARTIAL, None)
    provider.script.append(chat_answer(report(), usage=USAGE))
    _, status, _ = fire(executor(store, connector_for, []), instruction, datetime.now(UTC))
    assert status == RunStatus.OK
    assert len(provider.requests) == 1


def test_a_retry_does_not_overspend_the_day(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = budgeted(tmp_path, "budget:\n  tokens_per_day: 100\n")
    # Nothing salvageable: the definition asks again, but the first call spent the day.
    provider.script.extend(
        [chat_answer("no json here", usage=USAGE), chat_answer(report(), usage=USAGE)]
    )
    outcome = executor(store, connector_for, []).run(
        instruction, trigger=Trigger.SCHEDULE, scheduled_for=DAY
    )
    assert len(provider.requests) == 1
    assert outcome.status == RunStatus.FAILED
    assert (outcome.error or "").startswith(
        "budget: daily-triage spent 150 of 100 tokens on 2026-11-28 (Europe/Paris); "
        "no model call was made after attempt 1; the attempt(s) made ended: "
    )
    assert [a.number for a in store.get_run(outcome.run_id).attempts] == [1]


def test_the_cost_budget_counts_by_the_price_table_kept_with_the_run(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    instruction = budgeted(tmp_path, "budget:\n  cost_per_day: 0.2\n", prices=True)
    assert instruction.budget.prices is not None
    provider.script.extend(chat_answer(report(), usage=USAGE) for _ in range(2))
    seen: list[Event] = []
    metrics = Metrics(process=False)
    events = EventStream()
    metrics.subscribe(events)
    ex = executor(store, connector_for, seen, events)

    first, status, _ = fire(ex, instruction, DAY)
    assert status == RunStatus.OK
    (called,) = [e for e in seen if isinstance(e, ModelCalled)]
    # The provider reports "test/model", which the table does not price: counted at the
    # definition's model's price.
    assert (called.cost, called.currency) == (pytest.approx(0.2), "USD")
    sample = metrics.registry.get_sample_value(
        "salvagelane_cost_total", {"instruction": "daily-triage", "currency": "USD"}
    )
    assert sample == pytest.approx(0.2)

    stops = {"instruction": "daily-triage", "limit": "cost"}
    assert metrics.registry.get_sample_value("salvagelane_budget_exhausted_total", stops) is None

    _, status, error = fire(ex, instruction, LATER)
    assert metrics.registry.get_sample_value("salvagelane_budget_exhausted_total", stops) == 1
    assert status == RunStatus.FAILED
    assert error == (
        "budget: daily-triage spent 0.2000 of 0.2000 USD on 2026-11-28 (Europe/Paris) "
        "(test/model counted at the price of openai/gpt-4.1-mini); no model call was made"
    )
    assert len(provider.requests) == 1

    # The run's stored definition keeps the price table it used.
    record = store.get_definition(first)
    assert record is not None
    kept = DefinitionSnapshot.from_json(record.content, where="test")
    assert json.loads(kept.files["prices.json"]) == PRICES
    assert load_stored(kept).budget.prices == instruction.budget.prices

    # health prints the cost per day beside the tokens (UTC days).
    done = salvagelane_here("health", database=store.url)
    assert done.returncode == 0, done.stderr
    assert "tokens per day, every trigger (prompt + completion = total, cost in USD)" in (
        done.stdout
    )
    # The health view's days are UTC days of the calls (made now), not fire times.
    today = datetime.now(UTC).date().isoformat()
    assert f"  {today}  100 + 50 = 150 (1 calls)  0.2000 USD" in done.stdout
    assert "test/model counted at the price of openai/gpt-4.1-mini" in done.stdout
    as_json = salvagelane_here("health", "--json", database=store.url)
    (figures,) = json.loads(as_json.stdout)
    assert figures["cost_by_day"] == {
        "currency": "USD",
        "days": {today: 0.2},
        "note": "test/model counted at the price of openai/gpt-4.1-mini",
    }

    # So does the review page's health view, from the same figures.
    settings = Settings(
        store=store,
        access=Access(token="budget-page-token", loopback=True),
        instructions_dir=tmp_path / "instructions",
        actor="alice",
    )
    client = TestClient(create_app(settings), base_url="http://127.0.0.1:8765")
    page = client.get("/health").text
    assert f'<span data-day="{today}">{today} 0.2000 USD</span>' in page
    assert client.get("/health.json").json()[0]["cost_by_day"] == figures["cost_by_day"]


def test_health_shows_today_s_budget_and_when_it_is_reached(
    tmp_path: Path,
    store: Store,
    provider: ScriptedServer,
    connector_for: Callable[[Instruction], Connector],
) -> None:
    budget = "budget:\n  tokens_per_day: 150\n  cost_per_day: 1.0\n"
    instruction = budgeted(tmp_path, budget, prices=True)
    provider.script.append(chat_answer(report(), usage=USAGE))
    fire(executor(store, connector_for, []), instruction, DAY)

    def budget_at(now: datetime) -> BudgetToday | None:
        (health,) = priced_healths(store, store.health.healths([instruction.id], now=now), now=now)
        return health.budget

    today = budget_at(LATER)
    assert today is not None
    assert today.cost == pytest.approx(0.2)
    assert replace(today, cost=None) == BudgetToday(
        day=date(2026, 11, 28),
        timezone="Europe/Paris",
        tokens=150,
        tokens_per_day=150,
        cost=None,
        cost_per_day=1.0,
        currency="USD",
        reached="tokens",
    )
    # The same answer as the check a run makes before calling the model.
    check = budget_check(store, instruction, LATER, trigger=Trigger.SCHEDULE)
    assert check is not None
    stop = check()
    assert stop is not None
    assert stop.what == today.reached
    (health,) = priced_healths(store, store.health.healths([instruction.id], now=LATER), now=LATER)
    assert (
        "budget       today (2026-11-28, Europe/Paris): 150 of 150 tokens; 0.2000 of 1.0000 "
        "USD; tokens limit reached: its runs call no model until the day ends"
    ) in health_text(health).splitlines()

    # The next day in Paris (still the 28th in UTC) starts from nothing.
    tomorrow = budget_at(NEXT_DAY)
    assert tomorrow is not None
    assert (tomorrow.day, tomorrow.tokens, tomorrow.cost, tomorrow.reached) == (
        date(2026, 11, 29),
        0,
        0.0,
        None,
    )

    settings = Settings(
        store=store,
        access=Access(token="budget-page-token", loopback=True),
        instructions_dir=tmp_path / "instructions",
        actor="alice",
        clock=lambda: LATER,
    )
    client = TestClient(create_app(settings), base_url="http://127.0.0.1:8765")
    page = client.get("/health").text
    assert "<dt>budget today (2026-11-28, Europe/Paris)</dt>" in page
    assert '<dd data-figure="budget" data-reached="tokens">150 of 150 tokens; 0.2000 of' in page
    assert client.get("/health.json").json()[0]["budget"] == {
        "day": "2026-11-28",
        "timezone": "Europe/Paris",
        "tokens": 150,
        "tokens_per_day": 150,
        "cost": pytest.approx(0.2),
        "cost_per_day": 1.0,
        "currency": "USD",
        "reached": "tokens",
    }


# --- what check refuses ---------------------------------------------------------------------


def refused(tmp_path: Path, budget: str, prices: str | None = None) -> str:
    project = Project.create(tmp_path)
    if prices is not None:
        (project.instructions / "prices.json").write_text(prices, encoding="utf-8")
    project.edit({}, append=budget)
    with pytest.raises(DefinitionError) as caught:
        load_instruction(project.definition)
    return str(caught.value)


def test_a_cost_limit_needs_a_price_for_the_definitions_model(tmp_path: Path) -> None:
    assert (
        "budget.cost_per_day: expected a price table alongside a cost limit (budget.prices, "
        "or prices.json in the definition's directory), got none"
    ) in refused(tmp_path / "none", "budget:\n  cost_per_day: 1\n")
    other = json.dumps(
        {"currency": "USD", "models": {"other": PRICES["models"]["openai/gpt-4.1-mini"]}}
    )
    assert (
        'budget.cost_per_day: expected a price for connector.model "openai/gpt-4.1-mini" in '
    ) in refused(tmp_path / "other", "budget:\n  cost_per_day: 1\n", other)
    # Without a cost limit the same table is fine: tokens of other models cost nothing known.
    project = Project.create(tmp_path / "tokens")
    (project.instructions / "prices.json").write_text(other, encoding="utf-8")
    project.edit({}, append="budget:\n  tokens_per_day: 10\n")
    assert load_instruction(project.definition).budget.prices is not None


def test_a_named_price_table_must_exist_and_be_one(tmp_path: Path) -> None:
    message = refused(tmp_path / "missing", "budget:\n  prices: ../costs.yaml\n")
    assert "budget.prices: expected an existing file" in message
    assert '"../costs.yaml"' in message
    project = Project.create(tmp_path / "broken")
    (project.root / "costs.yaml").write_text(
        "currency: USD\nmodels:\n  m: {input_per_million: 1}\n", encoding="utf-8"
    )
    project.edit({}, append="budget:\n  prices: ../costs.yaml\n")
    with pytest.raises(DefinitionError) as caught:
        load_instruction(project.definition)
    assert (
        f"budget.prices: expected a price table, got a problem in "
        f"{(project.root / 'costs.yaml').resolve()} line 3: models.m: expected the field(s) "
        "output_per_million, got nothing"
    ) in str(caught.value)


def test_a_broken_default_price_table_is_refused_for_every_definition(tmp_path: Path) -> None:
    # Beside the definitions, it applies to each of them: broken, it is said, not skipped.
    assert (
        "budget.prices: expected a price table (the default prices.json), got a problem in "
    ) in refused(tmp_path, "", '{"currency": "USD"}')
