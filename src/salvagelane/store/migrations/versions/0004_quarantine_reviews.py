"""Operator review of the quarantine: who reviewed an item, when, and an audit of every action.

``quarantined_items`` gains ``reviewed_at``, ``reviewed_by`` and ``review_note`` (the last
decision). ``quarantine_reviews`` keeps every review action (approve, refused approval,
reject, note, bulk reject) with its actor, time, note and the values before and after.

Plain ADD COLUMN and a new table: no rebuild of ``quarantined_items`` (see 0002 for why a
rebuild of a referenced table fails on SQLite; nothing references quarantined_items yet,
but the new table does once it exists).

Revision ID: 0004
Revises: 0003
Create Date: 2025-01-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REVIEW_COLUMNS = ("reviewed_at", "reviewed_by", "review_note")


def upgrade() -> None:
    op.add_column(
        "quarantined_items", sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("quarantined_items", sa.Column("reviewed_by", sa.Text(), nullable=True))
    op.add_column("quarantined_items", sa.Column("review_note", sa.Text(), nullable=True))
    op.create_table(
        "quarantine_reviews",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("quarantine_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quarantine_reviews")),
        sa.ForeignKeyConstraint(
            ["quarantine_id"],
            ["quarantined_items.id"],
            name=op.f("fk_quarantine_reviews_quarantine_id_quarantined_items"),
        ),
    )
    op.create_index(
        op.f("ix_quarantine_reviews_quarantine_id"), "quarantine_reviews", ["quarantine_id"]
    )
    # `quarantine list` without a filter (or with --since only) walks this, newest first.
    op.create_index(op.f("ix_quarantined_items_created_at"), "quarantined_items", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_quarantined_items_created_at"), table_name="quarantined_items")
    # The audit trail goes with the table; approved items stay in their reports (they are
    # report rows with origin "operator", which 0003 already knows).
    op.drop_index(op.f("ix_quarantine_reviews_quarantine_id"), table_name="quarantine_reviews")
    op.drop_table("quarantine_reviews")
    # SQLite 3.35+ drops a column in place; a rebuild would fail as 0002 explains.
    with op.batch_alter_table("quarantined_items", recreate="never") as batch:
        for column in reversed(REVIEW_COLUMNS):
            batch.drop_column(column)
