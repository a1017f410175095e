"""Stored evaluations (``salvagelane eval``): what was tried, on which fixtures, and how
each side did, so the review page can show them.

Reached through :attr:`Store.evals <salvagelane.store.Store.evals>`. The figures are kept
as the JSON :mod:`salvagelane.core.evaluation` writes (one row per fixture, the totals
and the verdict on the evaluation's row): data for people, never read back into a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from salvagelane.errors import NotFoundError
from salvagelane.store._rows import Transactions, new_id
from salvagelane.store.models import EvalResultRow, EvalRow


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalSummary:
    """One stored evaluation: when, what candidate, how many fixtures, the verdict."""

    id: str
    created_at: datetime
    candidate: str
    fixtures: int
    verdict: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalDetail(EvalSummary):
    """A stored evaluation with each fixture's comparison, in the order evaluated."""

    comparisons: list[Mapping[str, Any]]


class Evaluations:
    """Stored evaluations, on the store's database."""

    def __init__(self, transaction: Transactions, url: str) -> None:
        self._transaction = transaction
        self._url = url

    def add(
        self,
        *,
        candidate: str,
        comparisons: Sequence[Mapping[str, Any]],
        verdict: Mapping[str, Any],
        created_at: datetime,
    ) -> str:
        """Store one evaluation (its comparisons as ``Comparison.to_json`` writes them);
        its id."""
        eval_id = new_id()
        with self._transaction("store an evaluation") as session:
            session.add(
                EvalRow(
                    id=eval_id,
                    created_at=created_at,
                    candidate=candidate,
                    fixtures=len(comparisons),
                    verdict=dict(verdict),
                )
            )
            session.flush()
            session.add_all(
                EvalResultRow(
                    eval_id=eval_id,
                    position=position,
                    fixture=str(comparison.get("fixture")),
                    instruction_id=comparison.get("instruction"),
                    result=dict(comparison),
                )
                for position, comparison in enumerate(comparisons)
            )
        return eval_id

    def list(self, *, limit: int = 50) -> list[EvalSummary]:
        """The newest evaluations first."""
        with self._transaction("list evaluations") as session:
            rows = session.scalars(
                sa.select(EvalRow).order_by(EvalRow.created_at.desc(), EvalRow.id).limit(limit)
            )
            return [_summary(row) for row in rows]

    def get(self, eval_id: str) -> EvalDetail:
        """One evaluation with its comparisons; NotFoundError for an unknown id."""
        with self._transaction("read an evaluation") as session:
            row = session.get(EvalRow, eval_id)
            if row is None:
                raise NotFoundError(f"{self._url}: no evaluation {eval_id!r}")
            results = session.scalars(
                sa.select(EvalResultRow)
                .where(EvalResultRow.eval_id == eval_id)
                .order_by(EvalResultRow.position)
            )
            summary = _summary(row)
            return EvalDetail(
                id=summary.id,
                created_at=summary.created_at,
                candidate=summary.candidate,
                fixtures=summary.fixtures,
                verdict=summary.verdict,
                comparisons=[dict(r.result) for r in results],
            )


def _summary(row: EvalRow) -> EvalSummary:
    return EvalSummary(
        id=row.id,
        created_at=row.created_at,
        candidate=row.candidate,
        fixtures=row.fixtures,
        verdict=row.verdict if isinstance(row.verdict, Mapping) else {},
    )
