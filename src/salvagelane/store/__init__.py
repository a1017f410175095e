"""Persistence of runs, attempts (with raw model output), reports and the quarantine lane.

SQLite or PostgreSQL, through SQLAlchemy 2 and Alembic migrations shipped in the package.
Open a :class:`Store`; it hands back the dataclasses of :mod:`salvagelane.store.records`.
"""

from __future__ import annotations

from salvagelane.store.engine import (
    current_revision,
    database_url,
    downgrade,
    head_revision,
    make_engine,
    masked_url,
    upgrade,
)
from salvagelane.store.leadership import (
    SCHEDULER_LOCK_KEY,
    LeaderLock,
    PostgresLeaderLock,
    SqliteServeLock,
    leader_lock_for,
)
from salvagelane.store.records import (
    AttemptView,
    DeliveryStatus,
    FailureStatus,
    FinalRunStatus,
    ItemOrigin,
    QuarantineRecord,
    QuarantineView,
    ReportItemRecord,
    ReportItemView,
    ReportRecord,
    ReportView,
    RunDetail,
    RunStatus,
    RunSummary,
    SinkDeliveryView,
    Trigger,
)
from salvagelane.store.repository import Store

__all__ = [
    "SCHEDULER_LOCK_KEY",
    "AttemptView",
    "DeliveryStatus",
    "FailureStatus",
    "FinalRunStatus",
    "ItemOrigin",
    "LeaderLock",
    "PostgresLeaderLock",
    "QuarantineRecord",
    "QuarantineView",
    "ReportItemRecord",
    "ReportItemView",
    "ReportRecord",
    "ReportView",
    "RunDetail",
    "RunStatus",
    "RunSummary",
    "SinkDeliveryView",
    "SqliteServeLock",
    "Store",
    "Trigger",
    "current_revision",
    "database_url",
    "downgrade",
    "head_revision",
    "leader_lock_for",
    "make_engine",
    "masked_url",
    "upgrade",
]
