"""Runs dispatched through the task queue remember their job (``serve --dispatch queue``).

``runs.job_id`` is the id of the procrastinate job that executes a queued run (docs/adr/
0013): the leader writes it in the transaction that claims the fire, and ``runs cancel``
uses it to cancel the job or ask it to stop. NULL for a run executed in-process, which
every run stored before this revision was. The statuses ``queued`` and ``cancelled``
need no schema change: ``runs.status`` is plain text holding a word of RunStatus.

The task queue's own tables (``procrastinate_*``) are not created here: they are the
queue's, installed by ``salvagelane db upgrade`` on PostgreSQL (and by ``serve --dispatch
queue`` and ``worker`` when missing), so the store's migrations stay free of the queue.

Plain ADD COLUMN only: see 0002 for why a rebuild of a referenced table fails on SQLite.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("job_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    waiting = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM runs WHERE status IN ('queued', 'cancelled')"))
        .scalar_one()
    )
    if waiting:
        # 0007's code reads neither word: the runs would make every listing fail.
        raise RuntimeError(
            f"cannot downgrade below 0008: {waiting} run(s) are queued or cancelled, "
            "which 0007 does not know (let the workers drain the queue first)"
        )
    # SQLite 3.35+ drops a column in place; a rebuild would fail as 0002 explains.
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_column("job_id")
