"""Fire claims: one run row per (instruction, scheduled fire time).

A scheduler claims a fire by inserting its run row; the unique index makes a second claim
of the same fire fail, across processes. Manual runs have no fire time (NULL) and stay
unconstrained: NULLs are distinct in a unique index on SQLite and PostgreSQL. The
``missed`` run status needs no schema change (status is text).

Why a unique index and not a table constraint added in batch mode: on SQLite, batch mode
rebuilds ``runs`` (copy, DROP, rename). With foreign keys on (they are, and PRAGMA
foreign_keys cannot change inside the migration's transaction) the DROP counts every
attempt, report and delivery row pointing at a run as a violation, and the rename does
not undo the count, so the upgrade of any database that has runs fails at COMMIT with
"FOREIGN KEY constraint failed". CREATE UNIQUE INDEX needs no rebuild on either backend
and enforces the same rule. ``batch_alter_table`` is still used, so that a later change to
this index keeps working on SQLite; for an index it emits plain CREATE/DROP INDEX.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIRE_INDEX = "uq_runs_instruction_fire"


def upgrade() -> None:
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.create_index(FIRE_INDEX, ["instruction_id", "scheduled_for"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_index(FIRE_INDEX)
