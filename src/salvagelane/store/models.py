"""The ORM tables of the store, and the column types that make them portable.

Only the store's modules touch these classes: they turn rows into the dataclasses of
:mod:`salvagelane.store.values` before a session closes, so no caller ever holds an
ORM object or a session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.expression import false
from sqlalchemy.types import TypeDecorator

from salvagelane.errors import StoreError
from salvagelane.vocabulary import (
    DeliveryStatus,
    ItemOrigin,
    ReviewAction,
    ReviewStatus,
    RunStatus,
    Trigger,
)

# Explicit constraint names, so the migration and the models agree on every backend and
# a later migration can drop a constraint by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

FIRE_CONSTRAINT = "uq_runs_instruction_fire"
"""The unique index on runs (instruction_id, scheduled_for): one run per fire."""

NUL_STANDIN = "\u2400"
"""SYMBOL FOR NULL: what a NUL character in model text becomes in a plain text column."""

_SURROGATES = re.compile("[\ud800-\udfff]")

W = TypeVar("W", bound=StrEnum)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite has no timezone type: SQLAlchemy stores the wall-clock digits and reads back a
    naive value. Converting to UTC on the way in and attaching UTC on the way out makes
    both backends return the same aware value. Naive datetimes are refused, because
    guessing their zone would silently shift times.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware one")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _json_default(value: object) -> object:
    # Records hold read-only Mappings (e.g. MappingProxyType); JSON wants dicts.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dump_json(value: Any) -> str:
    """Canonical JSON text: compact, key order kept, no NaN/Infinity.

    Control characters, NUL included, are escaped (``\\u0000``), which is what makes JSON
    safe in PostgreSQL text (that cannot hold NUL). Lone surrogates (from text decoded with
    ``surrogateescape``) cannot be encoded as UTF-8, so such values are written with ASCII
    escapes instead; either form loads back to the same value.
    """
    text = json.dumps(
        value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_json_default
    )
    if _SURROGATES.search(text):
        text = json.dumps(
            value, ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=_json_default
        )
    return text


class JSONText(TypeDecorator[Any]):
    """JSON stored as canonical text, identically on SQLite and PostgreSQL.

    Not the native JSON/JSONB types: jsonb rejects ``\\u0000`` and reorders keys, and the
    store must keep model output as it was. Python ``None`` is stored as SQL NULL.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else dump_json(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


def safe_text(value: str) -> str:
    """``value`` with NUL replaced by U+2400 and lone surrogates by U+FFFD.

    PostgreSQL text cannot hold NUL (the statement fails and aborts the transaction) and
    UTF-8 cannot encode lone surrogates. The exact model bytes stay in
    ``attempts.raw_output``; these columns are for people reading.
    """
    return _SURROGATES.sub("\ufffd", value.replace("\x00", NUL_STANDIN))


class SafeText(TypeDecorator[str]):
    """Text that may carry model output: made storable by :func:`safe_text` on every backend."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else safe_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return value


class Word(TypeDecorator[W]):
    """A word of one of the :mod:`salvagelane.vocabulary` StrEnums, stored as its text.

    The column stays plain text (the values are the ones stored before the enums were);
    what goes in must be one of the words (a member or its string), and what comes out is
    the member, so every record read holds the enum.
    """

    impl = Text
    cache_ok = True

    def __init__(self, words: type[W]) -> None:
        super().__init__()
        self.words = words  # named as the argument: SQLAlchemy's cache key reads it

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        # The plain string: a driver must not see an Enum (psycopg would dump its name).
        return None if value is None else self.words(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> W | None:
        if value is None:
            return None
        try:
            return self.words(value)
        except ValueError as exc:
            # Not a word this version knows: a newer salvagelane wrote it, or a hand.
            known = ", ".join(word.value for word in self.words)
            raise StoreError(
                f"the database holds {value!r} where a {self.words.__name__} is expected "
                f"({known}): written by a newer salvagelane, or edited by hand?"
            ) from exc


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class RunRow(Base):
    """One execution of an instruction, from start to final status."""

    __tablename__ = "runs"
    __table_args__ = (
        Index(None, "instruction_id", "created_at"),
        Index(None, "status"),
        # A scheduled fire is claimed by inserting its run row: a second claim of the same
        # fire (and fire_attempt: the one retry of an interrupted fire is claimed the same
        # way), from any process, violates this. Manual runs (NULL scheduled_for) are
        # unconstrained: NULLs are distinct in a unique index on both backends. A unique
        # index rather than a table constraint: SQLite can add one to a table that has
        # rows referenced by other tables without rebuilding it (see migration 0002).
        Index(FIRE_CONSTRAINT, "instruction_id", "scheduled_for", "fire_attempt", unique=True),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    instruction_id: Mapped[str] = mapped_column(Text)
    definition_sha256: Mapped[str] = mapped_column(Text)
    # The stored version of the definition the run used (definition_versions.sha256);
    # None for runs stored before migration 0006 and for missed fires.
    definition_version: Mapped[str | None] = mapped_column(String(64))
    trigger: Mapped[Trigger] = mapped_column(Word(Trigger))
    scheduled_for: Mapped[datetime | None] = mapped_column(UTCDateTime)
    fire_attempt: Mapped[int] = mapped_column(Integer, server_default="1")
    retry_of: Mapped[str | None] = mapped_column(String(36))
    status: Mapped[RunStatus] = mapped_column(Word(RunStatus))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(SafeText)
    # use_alter: runs and attempts reference each other; the constraint is added after
    # both tables exist (SQLite, which cannot ALTER constraints, gets it inline).
    best_attempt_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("attempts.id", use_alter=True)
    )
    sink_status: Mapped[DeliveryStatus | None] = mapped_column(Word(DeliveryStatus))
    # ``run --scheduled-for T --force``: T is not a fire time of the schedule.
    forced: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # The task queue's job executing a queued run (``serve --dispatch queue``, migration
    # 0008); None for a run executed in-process.
    job_id: Mapped[int | None] = mapped_column(BigInteger)


class DefinitionVersionRow(Base):
    """A definition as a run used it (its YAML text and the files it names), stored once
    per version: ``sha256`` names the content (see ``definitions/snapshot.py``)."""

    __tablename__ = "definition_versions"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    instruction_id: Mapped[str] = mapped_column(Text)
    definition_sha256: Mapped[str] = mapped_column(Text)
    content: Mapped[Any] = mapped_column(JSONText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ScheduleStateRow(Base):
    """The schedule the scheduler last ran an instruction with, and since when.

    Catch-up only looks for unrun fires after ``effective_since``: fires from before the
    instruction was scheduled, or before its schedule last changed, were never due.
    """

    __tablename__ = "schedules"

    instruction_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cron: Mapped[str] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text)
    effective_since: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AttemptRow(Base):
    """One call to the model within a run, stored before its output is parsed."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("run_id", "number"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("runs.id"))
    number: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    request: Mapped[Any] = mapped_column(JSONText)
    raw_output: Mapped[bytes | None] = mapped_column(LargeBinary)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    native_finish_reason: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[Any] = mapped_column(JSONText, nullable=True)
    model: Mapped[str | None] = mapped_column(Text)
    request_id: Mapped[str | None] = mapped_column(Text)
    latency_seconds: Mapped[float | None] = mapped_column(Float)
    http_status: Mapped[int | None] = mapped_column(Integer)
    provider_error: Mapped[str | None] = mapped_column(SafeText)
    stream_error: Mapped[str | None] = mapped_column(SafeText)
    outcome: Mapped[Any] = mapped_column(JSONText, nullable=True)
    # The output as the provider sent it: its length in bytes and SHA-256. ``raw_output``
    # holds all of it, or its first bytes when it was over the definition's byte cap.
    raw_length: Mapped[int | None] = mapped_column(Integer)
    raw_sha256: Mapped[str | None] = mapped_column(Text)


class ReportRow(Base):
    """The salvaged report of a run (at most one per run)."""

    __tablename__ = "reports"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("runs.id"), unique=True)
    attempt_id: Mapped[str] = mapped_column(String(36), ForeignKey("attempts.id"))
    envelope: Mapped[Any] = mapped_column(JSONText, nullable=True)
    partial: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[RunStatus] = mapped_column(Word(RunStatus))
    document_valid: Mapped[bool] = mapped_column(Boolean)
    truncated: Mapped[bool] = mapped_column(Boolean)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    counts: Mapped[Any] = mapped_column(JSONText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ReportItemRow(Base):
    """A kept item of a report, in report order."""

    __tablename__ = "report_items"
    __table_args__ = (UniqueConstraint("report_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    report_id: Mapped[str] = mapped_column(String(36), ForeignKey("reports.id"))
    position: Mapped[int] = mapped_column(Integer)
    source_index: Mapped[int | None] = mapped_column(Integer)
    data: Mapped[Any] = mapped_column(JSONText)
    span_start: Mapped[int | None] = mapped_column(Integer)
    span_end: Mapped[int | None] = mapped_column(Integer)
    coercions: Mapped[Any] = mapped_column(JSONText, nullable=True)
    origin: Mapped[ItemOrigin] = mapped_column(Word(ItemOrigin))
    # The lossless repairs the item was accepted with (migration 0007); NULL: none.
    repairs: Mapped[Any] = mapped_column(JSONText, nullable=True)
    # The attempt whose output holds the span, when not the report's (a re-asked item;
    # migration 0009); NULL: the report's attempt.
    attempt: Mapped[int | None] = mapped_column(Integer)


class QuarantinedItemRow(Base):
    """A rejected candidate, with the correction signal and provenance operators need."""

    __tablename__ = "quarantined_items"
    __table_args__ = (
        Index(None, "run_id"),
        Index(None, "instruction_id", "created_at"),
        Index(None, "reason", "created_at"),
        Index(None, "review_status", "created_at"),
        Index(None, "created_at"),  # unfiltered listing, newest first (migration 0004)
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("runs.id"))
    attempt_id: Mapped[str] = mapped_column(String(36), ForeignKey("attempts.id"))
    instruction_id: Mapped[str] = mapped_column(Text)
    source_index: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    error: Mapped[Any] = mapped_column(JSONText)
    span_start: Mapped[int | None] = mapped_column(Integer)
    span_end: Mapped[int | None] = mapped_column(Integer)
    snippet: Mapped[str | None] = mapped_column(SafeText)
    sha256: Mapped[str | None] = mapped_column(Text)
    repaired: Mapped[Any] = mapped_column(JSONText, nullable=True)
    provenance: Mapped[Any] = mapped_column(JSONText)
    review_status: Mapped[ReviewStatus] = mapped_column(Word(ReviewStatus))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The last review decision (approve or reject); the full trail is quarantine_reviews.
    reviewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reviewed_by: Mapped[str | None] = mapped_column(Text)
    review_note: Mapped[str | None] = mapped_column(SafeText)
    # How a follow-up mended the item (migration 0009): attempt and report position.
    resolution: Mapped[Any] = mapped_column(JSONText, nullable=True)


class QuarantineReviewRow(Base):
    """One operator action on a quarantined item: the audit trail, never updated.

    ``before`` and ``after`` hold the values the action changed (or would have: a refused
    approval keeps the operator's candidate in ``after`` and the correction signal in
    ``error``).
    """

    __tablename__ = "quarantine_reviews"
    __table_args__ = (Index(None, "quarantine_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    quarantine_id: Mapped[int] = mapped_column(Integer, ForeignKey("quarantined_items.id"))
    action: Mapped[ReviewAction] = mapped_column(Word(ReviewAction))
    actor: Mapped[str] = mapped_column(SafeText)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    note: Mapped[str | None] = mapped_column(SafeText)
    before: Mapped[Any] = mapped_column(JSONText, nullable=True)
    after: Mapped[Any] = mapped_column(JSONText, nullable=True)
    error: Mapped[Any] = mapped_column(JSONText, nullable=True)


class SinkDeliveryRow(Base):
    """The outbox: a delivery of a run's report to one sink target.

    Written ``pending`` with the report, then updated to ``delivered`` or ``failed``;
    ``attempts`` counts the tries, ``next_attempt_at`` is when it may be tried again.
    """

    __tablename__ = "sink_deliveries"
    __table_args__ = (Index(None, "run_id"), Index(None, "status"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36), ForeignKey("runs.id"))
    target: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    status: Mapped[DeliveryStatus] = mapped_column(Word(DeliveryStatus))
    error: Mapped[str | None] = mapped_column(SafeText)
    attempted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, server_default="1")
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class EvalRow(Base):
    """One ``salvagelane eval``: the candidate, how many fixtures, the totals and the
    verdict (as :class:`salvagelane.core.evaluation.Verdict` writes them; migration 0010)."""

    __tablename__ = "evals"
    __table_args__ = (Index(None, "created_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    candidate: Mapped[str] = mapped_column(SafeText)
    fixtures: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[Any] = mapped_column(JSONText)


class EvalResultRow(Base):
    """One fixture of an evaluation: both sides' figures, or why it was skipped."""

    __tablename__ = "eval_results"
    __table_args__ = (UniqueConstraint("eval_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    eval_id: Mapped[str] = mapped_column(String(36), ForeignKey("evals.id"))
    position: Mapped[int] = mapped_column(Integer)
    fixture: Mapped[str] = mapped_column(SafeText)
    instruction_id: Mapped[str | None] = mapped_column(Text)
    result: Mapped[Any] = mapped_column(JSONText)
