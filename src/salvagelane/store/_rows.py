"""What the store's modules share: the raw text as stored, run rows, and rows made records.

Private to :mod:`salvagelane.store`. The repository, the quarantine lane, the delivery
outbox and the fire bookkeeping all build on it, and it on none of them, so the store's
modules import each other in one direction only.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from salvagelane.errors import NotFoundError, StoreError
from salvagelane.store.engine import masked_url
from salvagelane.store.figures import RunFigures, figures_of, report_counts
from salvagelane.store.models import (
    AttemptRow,
    DefinitionVersionRow,
    ReportItemRow,
    ReportRow,
    RunRow,
    SinkDeliveryRow,
)
from salvagelane.store.values import (
    AttemptView,
    DefinitionRecord,
    ReportItemView,
    ReportView,
    RunSummary,
)
from salvagelane.vocabulary import RunStatus

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

V = TypeVar("V", bound="DataclassInstance")

Transactions = Callable[[str], AbstractContextManager[Session]]
"""The store's transactions: a session in one transaction, for the operation named."""


def new_id() -> str:
    return str(uuid.uuid4())


# --- the raw text ---------------------------------------------------------------------------


def encode_raw(text: str) -> bytes:
    """The model's text as stored: UTF-8, undecodable input bytes restored by
    ``surrogateescape``. A lone surrogate that did not come from bytes (rare: a provider's
    JSON escape) is written as its UTF-8 form rather than refused, so nothing is lost."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def decode_raw(data: bytes) -> str:
    """The inverse of :func:`encode_raw` for every text that came from bytes."""
    return data.decode("utf-8", "surrogateescape")


@dataclass(frozen=True, kw_only=True, slots=True)
class BoundedRaw:
    """A model output as stored: ``data`` is all of it, or its first ``cap`` bytes when it
    was longer; ``length`` and ``sha256`` describe all of it (UTF-8 as
    :func:`encode_raw` writes it)."""

    data: bytes
    length: int
    sha256: str

    @property
    def clipped(self) -> bool:
        return len(self.data) < self.length


def bound_raw(text: str, max_bytes: int | None) -> BoundedRaw:
    """``text`` as stored under a cap of ``max_bytes`` bytes (None: no cap)."""
    data = encode_raw(text)
    stored = data if max_bytes is None or len(data) <= max_bytes else data[:max_bytes]
    return BoundedRaw(data=stored, length=len(data), sha256=hashlib.sha256(data).hexdigest())


# --- run rows -------------------------------------------------------------------------------


def get_run(session: Session, run_id: str, *, for_update: bool = False) -> RunRow:
    run = session.get(RunRow, run_id, with_for_update=for_update)
    if run is None:
        raise NotFoundError(f"{masked_url(session.get_bind().engine.url)}: no run with id {run_id}")
    return run


def running_run(session: Session, run_id: str) -> RunRow:
    """The run, which must still be running: a run is finished exactly once."""
    run = get_run(session, run_id)
    if run.status != RunStatus.RUNNING:
        raise StoreError(
            f"{masked_url(session.get_bind().engine.url)}: run {run_id} is already {run.status}"
        )
    return run


def close_run(run: RunRow, *, status: RunStatus, finished_at: datetime, error: str | None) -> None:
    run.status = status
    run.finished_at = finished_at
    run.heartbeat_at = finished_at
    run.error = error


def interrupt(run: RunRow, *, now: datetime, noticed: str = "") -> None:
    """End ``run``, whose heartbeat stopped, as ``interrupted``; ``noticed``: by what."""
    since = run.heartbeat_at or run.started_at
    close_run(
        run,
        status=RunStatus.INTERRUPTED,
        finished_at=now,
        error=f"no heartbeat since {since.isoformat()}: the process running it stopped{noticed}",
    )


def last_sign_of_life() -> sa.ColumnElement[datetime]:
    """A run's last heartbeat, or its start without one."""
    return sa.func.coalesce(RunRow.heartbeat_at, RunRow.started_at)


def insert_definition(session: Session, definition: DefinitionRecord, now: datetime) -> None:
    """Store ``definition`` unless its version is stored already (by any process: the
    insert does nothing on a conflict, so concurrent runs of one version never fail)."""
    values = {
        "sha256": definition.sha256,
        "instruction_id": definition.instruction_id,
        "definition_sha256": definition.definition_sha256,
        "content": definition.content,
        "created_at": now,
    }
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        statement: Any = pg_insert(DefinitionVersionRow).values(values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        statement = sqlite_insert(DefinitionVersionRow).values(values)
    session.execute(statement.on_conflict_do_nothing(index_elements=["sha256"]))


def deliveries_of(session: Session, run_id: str) -> list[SinkDeliveryRow]:
    """The run's sink deliveries, first written first (a row is updated in place as its
    delivery is tried again, so its id, not its time, places it)."""
    return list(
        session.scalars(
            sa.select(SinkDeliveryRow)
            .where(SinkDeliveryRow.run_id == run_id)
            .order_by(SinkDeliveryRow.id)
        )
    )


# --- rows made records ----------------------------------------------------------------------


def columns_of(record: DataclassInstance, *, omit: Collection[str] = ()) -> dict[str, Any]:
    """``record``'s fields by name but those in ``omit``: the keyword arguments for the
    ORM row (or the record) whose columns carry the same names."""
    return {f.name: getattr(record, f.name) for f in fields(record) if f.name not in omit}


def view(cls: type[V], row: object, **computed: Any) -> V:
    """A ``cls`` whose fields copy ``row``'s attributes of the same names, but those in
    ``computed``: fields the row has no column for, or holds in another form."""
    copied = {f.name: getattr(row, f.name) for f in fields(cls) if f.name not in computed}
    return cls(**copied, **computed)


def summaries(session: Session, runs: list[RunRow]) -> list[RunSummary]:
    """Summaries of ``runs`` (in order), their figures from :func:`figures_of`."""
    figures = figures_of(session, runs)
    return [summary(run, figures[run.id]) for run in runs]


def summary(run: RunRow, figures: RunFigures) -> RunSummary:
    return view(
        RunSummary,
        run,
        status=figures.status,
        partial=figures.partial,
        kept_count=figures.kept,
        operator_approved=figures.operator_approved,
        reasked=figures.reasked,
        quarantined_count=figures.quarantined,
        quarantined_by_reason=dict(figures.quarantined_by_reason),
        folded=figures.folded,
        folded_by_reason=dict(figures.folded_by_reason),
        candidates=figures.candidates,
        output_cut=figures.output_cut,
        finish_reason=figures.finish_reason,
        native_finish_reason=figures.native_finish_reason,
    )


def attempt_view(row: AttemptRow) -> AttemptView:
    raw = None if row.raw_output is None else decode_raw(row.raw_output)
    stored = None if row.raw_output is None else len(row.raw_output)
    return view(AttemptView, row, raw_output=raw, stored_length=stored)


def report_view(session: Session, run_id: str, figures: RunFigures) -> ReportView | None:
    """The run's report; its status, partial flag and counts are the run's figures."""
    report = session.scalars(sa.select(ReportRow).where(ReportRow.run_id == run_id)).one_or_none()
    if report is None:
        return None
    items = session.scalars(
        sa.select(ReportItemRow)
        .where(ReportItemRow.report_id == report.id)
        .order_by(ReportItemRow.position)
    )
    return view(
        ReportView,
        report,
        status=figures.status,
        partial=figures.partial,
        counts=report_counts(report.counts, figures),
        items=[view(ReportItemView, item) for item in items],
    )
