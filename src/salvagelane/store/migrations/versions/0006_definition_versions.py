"""Runs remember their definition, and whether their fire time was forced.

``definition_versions`` keeps the definition each run used, by content: its YAML text and
the files it names (schemas, allow-lists, context files), once per version (``sha256``).
``runs.definition_version`` names the version a run used; runs stored before this
revision have none (``quarantine approve``, ``runs redeliver`` need ``--use-current`` for
them). ``runs.forced`` records ``run --scheduled-for T --force``: T was not a fire time of
the instruction's schedule.

Plain ADD COLUMN only: see 0002 for why a rebuild of a referenced table fails on SQLite.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUN_COLUMNS = ("definition_version", "forced")


def upgrade() -> None:
    op.create_table(
        "definition_versions",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("instruction_id", sa.Text(), nullable=False),
        sa.Column("definition_sha256", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_definition_versions")),
    )
    op.add_column("runs", sa.Column("definition_version", sa.String(length=64), nullable=True))
    op.add_column(
        "runs", sa.Column("forced", sa.Boolean(), nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    # The stored definitions and the forced flags go: runs keep their definition_sha256,
    # and approving or redelivering them needs --use-current again.
    with op.batch_alter_table("runs", recreate="never") as batch:
        for column in reversed(RUN_COLUMNS):
            batch.drop_column(column)
    op.drop_table("definition_versions")
