"""Report items remember the lossless repairs they were accepted with.

``report_items.repairs`` holds an item's repairs as JSON (``[{"kind": "trailing_comma",
"at": 57}]``), like ``coercions``; NULL for an item accepted as the model wrote it, which
every item stored before this revision was.

Plain ADD COLUMN only: see 0002 for why a rebuild of a referenced table fails on SQLite.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("report_items", sa.Column("repairs", sa.Text(), nullable=True))


def downgrade() -> None:
    repaired = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM report_items WHERE repairs IS NOT NULL"))
        .scalar_one()
    )
    if repaired:
        # Without the column a repaired item would read as the model's own text: a
        # repaired value is never passed off as original (ADR 0001).
        raise RuntimeError(
            f"cannot downgrade below 0007: {repaired} report item(s) were accepted with "
            "lossless repairs, and 0006 cannot record them"
        )
    # SQLite 3.35+ drops a column in place; a rebuild would fail as 0002 explains.
    with op.batch_alter_table("report_items", recreate="never") as batch:
        batch.drop_column("repairs")
