"""Items a follow-up request mended: where their text is, and the link from the quarantine.

``report_items.attempt`` is the attempt whose raw output holds a re-asked item's span
(NULL for every other item: the report's own attempt). ``quarantined_items.resolution``
links a record whose item a follow-up mended (review status ``reasked``) to the report
item that replaced it (``{"by": "reask", "attempt": 2, "position": 6}``); NULL for every
other record, which every record stored before this revision was.

Plain ADD COLUMN only: see 0002 for why a rebuild of a referenced table fails on SQLite.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("report_items", sa.Column("attempt", sa.Integer(), nullable=True))
    op.add_column("quarantined_items", sa.Column("resolution", sa.Text(), nullable=True))


def downgrade() -> None:
    reasked = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM report_items WHERE attempt IS NOT NULL"))
        .scalar_one()
    )
    if reasked:
        # Without the column a re-asked item's span would point into the wrong output.
        raise RuntimeError(
            f"cannot downgrade below 0009: {reasked} report item(s) came from a follow-up "
            "request, and 0008 cannot record where their text is"
        )
    with op.batch_alter_table("quarantined_items", recreate="never") as batch:
        batch.drop_column("resolution")
    with op.batch_alter_table("report_items", recreate="never") as batch:
        batch.drop_column("attempt")
