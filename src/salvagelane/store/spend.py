"""What an instruction's runs spent: tokens per model over a span of fire times.

Reached through :attr:`Store.spend <salvagelane.store.Store.spend>`. Budgets
(``budget.tokens_per_day``, ``budget.cost_per_day``) are counted from what the store
already holds: each attempt's ``usage`` (``prompt_tokens``, ``completion_tokens``) and
``model``. A run counts towards the day of its fire time (``scheduled_for``), an
unscheduled run towards the day it started; a replay (``run --replay``) calls no model
and counts towards nothing. Prices are not the store's: the tokens come back per model,
and the caller prices them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from salvagelane.store._rows import Transactions
from salvagelane.store.models import AttemptRow, DefinitionVersionRow, RunRow
from salvagelane.store.values import DefinitionRecord
from salvagelane.vocabulary import Trigger


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpend:
    """Tokens one model used (``model`` as the provider reported it; None: not reported)
    over ``attempts`` model calls."""

    model: str | None
    prompt_tokens: int
    completion_tokens: int
    attempts: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _count(usage: Any, key: str) -> int:
    if not isinstance(usage, Mapping):
        return 0
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def spend_of(attempts: Iterable[tuple[str | None, Any]]) -> tuple[ModelSpend, ...]:
    """(model, usage) of model calls summed per model, in model order (None last). A
    failed call (no usage) counts as a call of no tokens."""
    sums: dict[str | None, list[int]] = {}
    for model, usage in attempts:
        bucket = sums.setdefault(model, [0, 0, 0])
        bucket[0] += _count(usage, "prompt_tokens")
        bucket[1] += _count(usage, "completion_tokens")
        bucket[2] += 1
    return tuple(
        ModelSpend(model=model, prompt_tokens=p, completion_tokens=c, attempts=n)
        for model, (p, c, n) in sorted(sums.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    )


class SpendReader:
    """Spend and the newest stored definition of an instruction (one transaction per call)."""

    def __init__(self, transaction: Transactions) -> None:
        self._transaction = transaction

    def between(
        self, instruction_id: str, *, since: datetime, until: datetime
    ) -> tuple[ModelSpend, ...]:
        """The tokens of every attempt of ``instruction_id``'s runs whose fire time (start
        time for an unscheduled run) is in [``since``, ``until``), per model; replays
        (which call no model) left out."""
        fired = sa.or_(
            sa.and_(
                RunRow.scheduled_for.is_not(None),
                RunRow.scheduled_for >= since,
                RunRow.scheduled_for < until,
            ),
            sa.and_(
                RunRow.scheduled_for.is_(None),
                RunRow.started_at >= since,
                RunRow.started_at < until,
            ),
        )
        with self._transaction(f"read the spend of {instruction_id}") as session:
            rows = session.execute(
                sa.select(AttemptRow.model, AttemptRow.usage)
                .join(RunRow, RunRow.id == AttemptRow.run_id)
                .where(
                    RunRow.instruction_id == instruction_id,
                    RunRow.trigger != Trigger.REPLAY,
                    fired,
                )
            ).tuples()
            return spend_of(rows)

    def newest_definition(self, instruction_id: str) -> DefinitionRecord | None:
        """The stored definition of ``instruction_id``'s newest run that kept one (the
        price table it names comes with it); None when no run did."""
        with self._transaction(f"read the newest definition of {instruction_id}") as session:
            row = session.scalars(
                sa.select(DefinitionVersionRow)
                .join(RunRow, RunRow.definition_version == DefinitionVersionRow.sha256)
                .where(RunRow.instruction_id == instruction_id)
                .order_by(RunRow.created_at.desc(), RunRow.id.desc())
                .limit(1)
            ).first()
            if row is None:
                return None
            return DefinitionRecord(
                sha256=row.sha256,
                instruction_id=row.instruction_id,
                definition_sha256=row.definition_sha256,
                content=row.content,
            )
