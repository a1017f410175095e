"""Which version of a definition a command about a stored run uses.

``quarantine approve`` and ``runs redeliver`` act on a run made with some version of its
instruction's definition, which the store kept (the YAML text and the files it names).
They use that version, rebuilt from the stored copy without touching the filesystem; the
definitions directory's current one only with ``--use-current``, and then they say what
differs. A run stored before definitions were kept has no version to use: the command
asks for ``--use-current`` (ConfigurationError, exit 2).

A stored copy is data from the database: it decides how an item is checked, never which
code runs or where a report goes (see docs/adr/0004-instruction-definitions.md). This
module reads the store, so it sits above it; comparing versions is
:mod:`salvagelane.definitions.versions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from salvagelane.definitions import Instruction
from salvagelane.definitions.ids import instruction_by_id, require_instruction_id
from salvagelane.definitions.loading import load_stored
from salvagelane.definitions.snapshot import DefinitionSnapshot
from salvagelane.definitions.versions import checked_snapshot, what_differs
from salvagelane.errors import ConfigurationError, InputError
from salvagelane.safe_text import line
from salvagelane.store import DefinitionRecord, Store


@dataclass(frozen=True, kw_only=True, slots=True)
class ChosenDefinition:
    """The definition a command uses for a run: ``instruction``, rebuilt from the stored
    ``snapshot`` (None with ``--use-current``). ``trusted`` looks up the operator's
    definition of the same id in the definitions directory (for what a stored copy may
    only name: code and destinations); ``note`` says what ``--use-current`` changed.
    ``definition_sha256`` is the used definition's hash as runs record it (for a stored
    copy, the run's: the copy itself holds no secret, so it may hash otherwise)."""

    instruction: Instruction
    snapshot: DefinitionSnapshot | None
    trusted: Callable[[], Instruction]
    definition_sha256: str
    note: str | None = None

    @property
    def version(self) -> str | None:
        return None if self.snapshot is None else self.snapshot.sha256


def snapshot_of(record: DefinitionRecord, *, where: str) -> DefinitionSnapshot:
    """The snapshot a stored definition holds, checked against the version that names it;
    InputError (exit 2) otherwise: the database was changed by something else."""
    try:
        return checked_snapshot(record.content, record.sha256, where=where)
    except ValueError as exc:
        raise InputError(f"{exc}; use --use-current") from exc


def choose_definition(
    store: Store,
    run_id: str,
    instruction_id: str,
    instructions_dir: Path,
    *,
    use_current: bool,
    where: str,
) -> ChosenDefinition:
    """The definition to use for run ``run_id`` of ``instruction_id`` (read from the
    database: an id, looked up only among the definitions in ``instructions_dir``)."""
    valid = require_instruction_id(instruction_id, where=where, directory=instructions_dir)
    found: list[Instruction] = []

    def trusted() -> Instruction:
        if not found:
            found.append(instruction_by_id(valid, instructions_dir, where=where))
        return found[0]

    record = store.get_definition(run_id)
    snapshot = None
    if use_current:
        if record is not None:
            try:
                snapshot = snapshot_of(record, where=f"run {run_id[:8]}")
            except InputError:
                snapshot = None  # not used: it only says what differs
        current = trusted()
        return ChosenDefinition(
            instruction=current,
            snapshot=None,
            trusted=trusted,
            definition_sha256=current.definition_sha256,
            note=line(what_differs(current, snapshot, whose=f"run {run_id[:8]}")),
        )
    if record is not None:
        snapshot = snapshot_of(record, where=f"run {run_id[:8]}")
    if snapshot is None:
        raise ConfigurationError(
            f"run {run_id[:8]} was stored before salvagelane kept the definition each run "
            f"uses (database revision 0006), so the version of {valid} it was made with is "
            f"unknown: pass --use-current to use the current one in {instructions_dir}/"
        )
    stored = load_stored(snapshot)
    if stored.id != valid:
        raise InputError(
            f"{where}: the stored definition of run {run_id[:8]} defines "
            f"{stored.id!r}, not {valid!r}: it was changed in the database; "
            "use --use-current"
        )
    assert record is not None
    return ChosenDefinition(
        instruction=stored,
        snapshot=snapshot,
        trusted=trusted,
        definition_sha256=record.definition_sha256,
    )
