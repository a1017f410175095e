"""A delivery outbox, and model outputs stored bounded with their full length and hash.

``sink_deliveries`` becomes an outbox: a row is written ``pending`` in the same
transaction as the report, then updated to ``delivered`` or ``failed`` once the sink was
tried. ``attempts`` counts the tries and ``next_attempt_at`` says when a pending or failed
delivery may be tried again (a pending row whose process died is taken over then).

``attempts.raw_length`` and ``attempts.raw_sha256`` describe the output as the provider
sent it (bytes, SHA-256), so an output over ``max_output_bytes`` can be stored clipped
without losing what it was.

Plain ADD COLUMN only: see 0002 for why a rebuild of a referenced table fails on SQLite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELIVERY_COLUMNS = ("attempts", "next_attempt_at")
ATTEMPT_COLUMNS = ("raw_length", "raw_sha256")


def upgrade() -> None:
    op.add_column(
        "sink_deliveries",
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"),
    )
    op.add_column(
        "sink_deliveries",
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(op.f("ix_sink_deliveries_status"), "sink_deliveries", ["status"])
    op.add_column("attempts", sa.Column("raw_length", sa.Integer(), nullable=True))
    op.add_column("attempts", sa.Column("raw_sha256", sa.Text(), nullable=True))


def downgrade() -> None:
    pending = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM sink_deliveries WHERE status = 'pending'"))
        .scalar_one()
    )
    if pending:
        # 0004 knows no pending delivery: dropping the outbox state would silently turn
        # an undelivered report into one nobody will ever deliver.
        raise RuntimeError(
            f"cannot downgrade below 0005: {pending} sink delivery(ies) are pending "
            "(deliver them with `salvagelane runs redeliver --pending` first)"
        )
    op.drop_index(op.f("ix_sink_deliveries_status"), table_name="sink_deliveries")
    # SQLite 3.35+ drops a column in place; a rebuild would fail as 0002 explains.
    with op.batch_alter_table("attempts", recreate="never") as batch:
        for column in reversed(ATTEMPT_COLUMNS):
            batch.drop_column(column)
    with op.batch_alter_table("sink_deliveries", recreate="never") as batch:
        for column in reversed(DELIVERY_COLUMNS):
            batch.drop_column(column)
