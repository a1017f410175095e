"""Persistence of runs, attempts (with raw model output), reports and the quarantine lane.

SQLite or PostgreSQL, through SQLAlchemy 2 and Alembic migrations shipped in the package.
Open a :class:`Store`; it hands back the dataclasses of :mod:`salvagelane.store.values`,
whose closed sets of words are the StrEnums of :mod:`salvagelane.vocabulary`.
"""

from __future__ import annotations

from salvagelane.store._rows import bound_raw, decode_raw, encode_raw
from salvagelane.store.backlog import QueueFigures
from salvagelane.store.deliveries import NOTIFICATION_KIND_PREFIX, DeliveryOutbox
from salvagelane.store.engine import (
    current_revision,
    database_url,
    downgrade,
    head_revision,
    make_engine,
    masked_url,
    unknown_revision,
    upgrade,
)
from salvagelane.store.fires import FireLedger
from salvagelane.store.health import HealthReader, InstructionHealth
from salvagelane.store.leadership import (
    SCHEDULER_LOCK_KEY,
    LeaderLock,
    PostgresLeaderLock,
    SqliteServeLock,
    leader_lock_for,
)
from salvagelane.store.quarantine_lane import QuarantineLane
from salvagelane.store.queued import QueuedRun, QueuedRuns, SettledRun
from salvagelane.store.repository import Store
from salvagelane.store.spend import ModelSpend, SpendReader
from salvagelane.store.state import StateReader, StoreState
from salvagelane.store.values import (
    ApprovalView,
    AttemptView,
    BulkSelection,
    ClaimedDelivery,
    DefinitionRecord,
    DeliveryRun,
    InputDigest,
    OpenDelivery,
    PendingDelivery,
    QuarantineDetail,
    QuarantineFilter,
    QuarantineRecord,
    QuarantineReviewView,
    QuarantineView,
    ReportItemRecord,
    ReportItemView,
    ReportRecord,
    ReportView,
    ReviewedItem,
    RunDetail,
    RunSummary,
    SinkDeliveryView,
)

__all__ = [
    "NOTIFICATION_KIND_PREFIX",
    "SCHEDULER_LOCK_KEY",
    "ApprovalView",
    "AttemptView",
    "BulkSelection",
    "ClaimedDelivery",
    "DefinitionRecord",
    "DeliveryOutbox",
    "DeliveryRun",
    "FireLedger",
    "HealthReader",
    "InputDigest",
    "InstructionHealth",
    "LeaderLock",
    "ModelSpend",
    "OpenDelivery",
    "PendingDelivery",
    "PostgresLeaderLock",
    "QuarantineDetail",
    "QuarantineFilter",
    "QuarantineLane",
    "QuarantineRecord",
    "QuarantineReviewView",
    "QuarantineView",
    "QueueFigures",
    "QueuedRun",
    "QueuedRuns",
    "ReportItemRecord",
    "ReportItemView",
    "ReportRecord",
    "ReportView",
    "ReviewedItem",
    "RunDetail",
    "RunSummary",
    "SettledRun",
    "SinkDeliveryView",
    "SpendReader",
    "SqliteServeLock",
    "StateReader",
    "Store",
    "StoreState",
    "bound_raw",
    "current_revision",
    "database_url",
    "decode_raw",
    "downgrade",
    "encode_raw",
    "head_revision",
    "leader_lock_for",
    "make_engine",
    "masked_url",
    "unknown_revision",
    "upgrade",
]
