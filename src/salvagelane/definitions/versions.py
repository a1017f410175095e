"""Comparing a stored version of a definition with the operator's current one, and
checking that a stored copy is the version that names it. Which version a command about
a stored run uses is :mod:`salvagelane.review.run_definitions`, above the store.

A stored copy is data from the database: it decides how an item is checked, never which
code runs or where a report goes (see docs/adr/0004-instruction-definitions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from salvagelane.definitions.context_values import snapshot_for_run
from salvagelane.definitions.loading import load_stored
from salvagelane.definitions.model import Instruction
from salvagelane.definitions.snapshot import (
    DefinitionSnapshot,
    describe_differences,
    differences,
)
from salvagelane.errors import DefinitionError


def checked_snapshot(content: Any, sha256: str, *, where: str) -> DefinitionSnapshot:
    """The snapshot ``content`` holds, which must be the version ``sha256`` names (the
    database or a fixture said so). ValueError saying what was wrong otherwise: the
    content is not a snapshot, or it was changed after it was stored."""
    snapshot = DefinitionSnapshot.from_json(content, where=where)
    if snapshot.sha256 != sha256:
        raise ValueError(
            f"{where}: the stored definition is not the version {sha256[:12]} that names it "
            f"(its content hashes to {snapshot.sha256[:12]}): it was changed after it was "
            "stored"
        )
    return snapshot


def what_differs(current: Instruction, stored: DefinitionSnapshot | None, *, whose: str) -> str:
    """What a command using ``current`` instead of the ``stored`` version (None: not
    known) says: which current definition, and which of its files differ from the
    version ``whose`` (e.g. ``run 1a2b3c4d``) was made with."""
    using = f"using the current definition of {current.id} ({current.source})"
    if stored is None:
        return (
            f"{using}: the version {whose} was made with was not kept, so what differs "
            "from it is unknown"
        )
    old_document: Mapping[str, Any] | None
    try:
        old_document = load_stored(stored).definition
    except DefinitionError:
        old_document = None  # the files still compare; the fields cannot be named
    changes = differences(
        stored,
        snapshot_for_run(current),
        old_document=old_document,
        new_document=None if old_document is None else current.definition,
    )
    version = f"the version {whose} was made with (stored {stored.sha256[:12]})"
    if not changes:
        return f"{using}: the same as {version}"
    return f"{using}, not {version}: {describe_differences(changes)}"
