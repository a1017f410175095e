"""The initial schema: runs, attempts, reports, report items, quarantine, sink deliveries.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# runs.best_attempt_id and attempts.run_id reference each other. PostgreSQL gets the
# first constraint by ALTER once both tables exist; SQLite cannot ALTER constraints but
# checks foreign keys only when rows change, so it takes the forward reference inline.
BEST_ATTEMPT_FK = "fk_runs_best_attempt_id_attempts"


def _id() -> sa.Column[str]:
    return sa.Column("id", sa.String(36), nullable=False)


def _serial_id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _text(name: str, *, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=nullable)


def _integer(name: str, *, nullable: bool = False) -> sa.Column[int]:
    return sa.Column(name, sa.Integer(), nullable=nullable)


def _ref(name: str, *, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.String(36), nullable=nullable)


def _fk(table: str, column: str, referred: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{referred}.id"], name=op.f(f"fk_{table}_{column}_{referred}")
    )


def upgrade() -> None:
    inline_best_attempt_fk = not op.get_context().dialect.supports_alter
    op.create_table(
        "runs",
        _id(),
        _text("instruction_id"),
        _text("definition_sha256"),
        _text("trigger"),
        _timestamp("scheduled_for", nullable=True),
        _text("status"),
        _timestamp("created_at"),
        _timestamp("started_at"),
        _timestamp("finished_at", nullable=True),
        _timestamp("heartbeat_at", nullable=True),
        _text("error", nullable=True),
        _ref("best_attempt_id", nullable=True),
        _text("sink_status", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        *([_fk("runs", "best_attempt_id", "attempts")] if inline_best_attempt_fk else []),
    )
    op.create_index(
        op.f("ix_runs_instruction_id_created_at"), "runs", ["instruction_id", "created_at"]
    )
    op.create_index(op.f("ix_runs_status"), "runs", ["status"])

    op.create_table(
        "attempts",
        _id(),
        _ref("run_id"),
        _integer("number"),
        _timestamp("started_at"),
        _timestamp("finished_at", nullable=True),
        _text("request"),
        sa.Column("raw_output", sa.LargeBinary(), nullable=True),
        _text("finish_reason", nullable=True),
        _text("native_finish_reason", nullable=True),
        _text("usage", nullable=True),
        _text("model", nullable=True),
        _text("request_id", nullable=True),
        sa.Column("latency_seconds", sa.Float(), nullable=True),
        _integer("http_status", nullable=True),
        _text("provider_error", nullable=True),
        _text("stream_error", nullable=True),
        _text("outcome", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        _fk("attempts", "run_id", "runs"),
        sa.UniqueConstraint("run_id", "number", name=op.f("uq_attempts_run_id_number")),
    )
    if not inline_best_attempt_fk:
        op.create_foreign_key(BEST_ATTEMPT_FK, "runs", "attempts", ["best_attempt_id"], ["id"])

    op.create_table(
        "reports",
        _id(),
        _ref("run_id"),
        _ref("attempt_id"),
        _text("envelope", nullable=True),
        sa.Column("partial", sa.Boolean(), nullable=False),
        _text("status"),
        sa.Column("document_valid", sa.Boolean(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        _text("finish_reason", nullable=True),
        _text("counts"),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reports")),
        _fk("reports", "run_id", "runs"),
        _fk("reports", "attempt_id", "attempts"),
        sa.UniqueConstraint("run_id", name=op.f("uq_reports_run_id")),
    )

    op.create_table(
        "report_items",
        _serial_id(),
        _ref("report_id"),
        _integer("position"),
        _integer("source_index", nullable=True),
        _text("data"),
        _integer("span_start", nullable=True),
        _integer("span_end", nullable=True),
        _text("coercions", nullable=True),
        _text("origin"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_report_items")),
        _fk("report_items", "report_id", "reports"),
        sa.UniqueConstraint(
            "report_id", "position", name=op.f("uq_report_items_report_id_position")
        ),
    )

    op.create_table(
        "quarantined_items",
        _serial_id(),
        _ref("run_id"),
        _ref("attempt_id"),
        _text("instruction_id"),
        _integer("source_index", nullable=True),
        _text("reason"),
        _text("error"),
        _integer("span_start", nullable=True),
        _integer("span_end", nullable=True),
        _text("snippet", nullable=True),
        _text("sha256", nullable=True),
        _text("repaired", nullable=True),
        _text("provenance"),
        _text("review_status"),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quarantined_items")),
        _fk("quarantined_items", "run_id", "runs"),
        _fk("quarantined_items", "attempt_id", "attempts"),
    )
    for columns in (
        ["run_id"],
        ["instruction_id", "created_at"],
        ["reason", "created_at"],
        ["review_status", "created_at"],
    ):
        name = op.f(f"ix_quarantined_items_{'_'.join(columns)}")
        op.create_index(name, "quarantined_items", columns)

    op.create_table(
        "sink_deliveries",
        _serial_id(),
        _ref("run_id"),
        _text("target"),
        _text("kind"),
        _text("status"),
        _text("error", nullable=True),
        _timestamp("attempted_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sink_deliveries")),
        _fk("sink_deliveries", "run_id", "runs"),
    )
    op.create_index(op.f("ix_sink_deliveries_run_id"), "sink_deliveries", ["run_id"])


def downgrade() -> None:
    # Break the runs <-> attempts cycle first, so the tables can go in reverse order.
    # SQLite deletes the rows of a dropped table, which would violate the inline foreign
    # key while runs still point at attempts.
    if op.get_context().dialect.supports_alter:
        op.drop_constraint(BEST_ATTEMPT_FK, "runs", type_="foreignkey")
    else:
        op.execute("UPDATE runs SET best_attempt_id = NULL")
    for table in ("sink_deliveries", "quarantined_items", "report_items", "reports", "attempts"):
        op.drop_table(table)
    op.drop_table("runs")
