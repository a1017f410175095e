"""A fire may be retried once after an interruption; the scheduler remembers its schedules.

``runs.fire_attempt`` numbers the runs of one fire (1 for the fire itself, 2 for the
retry of an interrupted one) and joins the fire claim's unique index, so a retry is
claimed exactly once too. ``runs.retry_of`` names the interrupted run a retry repeats.

``schedules`` holds, per instruction, the cron expression and time zone the scheduler
last ran it with and since when: catch-up looks for unrun fires only after that moment,
so changing a schedule never turns the new schedule's past fires into "missed" ones.

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIRE_INDEX = "uq_runs_instruction_fire"


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild): see 0002 for why a rebuild of runs fails on
    # SQLite once other tables reference it.
    op.add_column(
        "runs", sa.Column("fire_attempt", sa.Integer(), nullable=False, server_default="1")
    )
    op.add_column("runs", sa.Column("retry_of", sa.String(36), nullable=True))
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_index(FIRE_INDEX)
        batch.create_index(
            FIRE_INDEX, ["instruction_id", "scheduled_for", "fire_attempt"], unique=True
        )
    op.create_table(
        "schedules",
        sa.Column("instruction_id", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("effective_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("instruction_id", name=op.f("pk_schedules")),
    )


def downgrade() -> None:
    retries = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM runs WHERE fire_attempt > 1"))
        .scalar_one()
    )
    if retries:
        # A retry shares its fire's time: 0002's index cannot hold both rows, and deleting
        # a run (with its raw outputs) is not a schema change's call to make.
        raise RuntimeError(
            f"cannot downgrade below 0003: {retries} run(s) retry an interrupted fire; "
            "0002 allows one run per fire (delete or keep them, then downgrade)"
        )
    op.drop_table("schedules")
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_index(FIRE_INDEX)
        batch.create_index(FIRE_INDEX, ["instruction_id", "scheduled_for"], unique=True)
    # SQLite 3.35+ drops a column in place; a rebuild would fail as 0002 explains.
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_column("retry_of")
        batch.drop_column("fire_attempt")
