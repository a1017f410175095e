"""Stored evaluations (``salvagelane eval``): one row per evaluation, one per fixture.

``evals`` holds the candidate (a description, never a secret), the number of fixtures
and the verdict with both sides' totals, as JSON; ``eval_results`` each fixture's
comparison (both sides' figures, or why it was skipped), in order.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "evals",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("candidate", sa.Text(), nullable=False),
        sa.Column("fixtures", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evals")),
    )
    op.create_index(op.f("ix_evals_created_at"), "evals", ["created_at"])
    op.create_table(
        "eval_results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("eval_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("fixture", sa.Text(), nullable=False),
        sa.Column("instruction_id", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_results")),
        sa.ForeignKeyConstraint(
            ["eval_id"], ["evals.id"], name=op.f("fk_eval_results_eval_id_evals")
        ),
        sa.UniqueConstraint("eval_id", "position", name=op.f("uq_eval_results_eval_id_position")),
    )


def downgrade() -> None:
    # Evaluations are a record for people, not part of any run: they go with the tables.
    op.drop_table("eval_results")
    op.drop_index(op.f("ix_evals_created_at"), table_name="evals")
    op.drop_table("evals")
