"""Regression fixtures: a recorded raw model output and the outcome it must keep giving.

A fixture is a directory holding:

``raw.txt``
    The model's text exactly as received: UTF-8, written and read without newline
    translation; bytes that were not UTF-8 survive (``surrogateescape``, as the store
    keeps them).
``meta.json``
    What the call reported, as ``salvagelane run --replay`` reads it: ``instruction``
    (the definition's id), ``finish_reason``, ``native_finish_reason``, ``model``,
    ``usage`` (``prompt_tokens``, ``completion_tokens``), and ``source``: where the output
    came from. A captured fixture's ``source`` is an object with ``run_id``, ``attempt``,
    ``trigger``, ``run_created_at``, ``captured_at``, ``definition_sha256`` (the version of
    the definition the run used) and ``prompt_sha256``; a hand-made one may say so in a
    string. Nothing else of the request is kept: not the prompt (its context may be
    confidential), never a key (the store only ever held the key's variable name).
``expected.json``
    The outcome salvage must give (see :mod:`salvagelane.core.outcome`): ``format``,
    ``status``, ``envelope_keys``, the accepted ``items`` in report order (source
    ``index``, ``sha256`` of the data's canonical JSON, the ``data``, and ``repairs``
    for an item accepted after a lossless repair) and the ``quarantined`` candidates in
    order (source ``index``, ``reason``).
``definition.json``
    The definition the run was made with, as the store kept it
    (:class:`salvagelane.definitions.DefinitionSnapshot`: its YAML text and the files
    it names, schemas, allow-lists and context files), with ``sha256`` naming the
    version. Captured from a run stored before definitions were kept, and in a
    hand-made fixture, there is none.

Replaying a fixture salvages ``raw.txt`` with the definition its run was made with
(``definition.json``: schema, items path, guardrails, allow-lists), or with
``--use-current`` with today's definition of its instruction in the instructions
directory (saying what differs), and compares the outcome with ``expected.json``: no
provider is called and no database is opened. A fixture without ``definition.json``
is replayed only with ``--use-current``.

A fixture is data: it arrives attached to bug reports. ``instruction`` must be an
instruction id, and is looked up only among the definitions of the instructions
directory (:func:`salvagelane.definitions.ids.instruction_by_id`), never opened as a
path; its files must be regular files (no symbolic link, directory, FIFO or device)
of bounded size; ``source`` and fields not listed here are never interpreted.
``definition.json``
is rebuilt without touching the filesystem (:func:`salvagelane.definitions.load_stored`)
and must define the fixture's instruction; a context callable it names runs only when
the definition of the same id in the instructions directory names it too. A fixture
that breaks these rules is refused (verdict ``refused``): nothing of it is salvaged,
compared or written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from salvagelane.connectors.replay import (
    read_call_meta,
    read_fixture_bytes,
    read_fixture_json,
    read_fixture_text,
    recorded_finish_reason,
)
from salvagelane.core import SalvagePolicy, salvage
from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.numbering import item_label
from salvagelane.core.outcome import (
    Difference,
    ItemOutcome,
    Outcome,
    QuarantineOutcome,
    compare,
    outcome_of,
    repairs_from_json,
)
from salvagelane.errors import (
    DefinitionError,
    InputError,
    NotFoundError,
    SalvagelaneError,
    not_utf8,
)
from salvagelane.logs import MIN_SECRET_LENGTH, secret_field_name
from salvagelane.vocabulary import ItemOrigin

if TYPE_CHECKING:  # the store (SQLAlchemy) is only needed to capture
    from salvagelane.definitions import DefinitionSnapshot, Instruction
    from salvagelane.store import AttemptView, RunDetail, Store

RAW_FILE = "raw.txt"
META_FILE = "meta.json"
EXPECTED_FILE = "expected.json"
DEFINITION_FILE = "definition.json"  # salvagelane.definitions.DEFINITION_FILE

_T = TypeVar("_T")

Verdict = Literal["same", "differs", "error", "refused", "updated", "recorded"]


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FixtureMeta:
    """``meta.json``: what the call reported. ``source`` is informational only."""

    instruction: str
    finish_reason: str | None = None
    native_finish_reason: str | None = None
    model: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    source: Any = None

    @property
    def salvage_finish_reason(self) -> str:
        """The finish reason salvage is given: the one ``run --replay`` reports."""
        return str(recorded_finish_reason(self.finish_reason, self.native_finish_reason))

    def to_json(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction,
            "finish_reason": self.finish_reason,
            "native_finish_reason": self.native_finish_reason,
            "model": self.model,
            "usage": dict(self.usage),
            "source": self.source,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Fixture:
    """A fixture directory as read; ``expected`` is None when it has no ``expected.json``."""

    path: Path
    raw: str
    meta: FixtureMeta
    expected: Outcome | None


def is_fixture(directory: Path) -> bool:
    """Whether ``directory`` holds a recorded output (``raw.txt`` and ``meta.json``).

    Any entry of those names counts, so a fixture whose file is a link or a FIFO is
    found, and refused when replayed, rather than passed over in silence.
    """
    return all(_entry_exists(directory / name) for name in (RAW_FILE, META_FILE))


def _entry_exists(path: Path) -> bool:
    """Whether anything has that name; an entry that cannot even be looked at counts, so
    that reading it says why rather than the fixture being passed over."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def discover(paths: Iterable[Path]) -> list[Path]:
    """The fixture directories named by ``paths``: each is a fixture, or a directory
    searched recursively for fixtures. InputError for a path that is neither."""
    found: dict[Path, None] = {}
    for path in paths:
        if not path.is_dir():
            raise InputError(f"{path}: expected a fixture directory, got no such directory")
        if is_fixture(path):
            found[path] = None
            continue
        nested = sorted(
            p.parent
            for p in path.rglob(META_FILE)
            if is_fixture(p.parent) and not _in_capture_staging(p.parent.relative_to(path))
        )
        if not nested:
            raise InputError(
                f"{path}: no fixtures: expected a directory with {RAW_FILE} and {META_FILE}, "
                "or one containing such directories"
            )
        found.update(dict.fromkeys(nested))
    return list(found)


def load_fixture(directory: Path) -> Fixture:
    """The fixture in ``directory``; InputError naming the file and what was wrong."""
    raw = read_fixture_text(directory / RAW_FILE)
    meta = read_meta(directory / META_FILE)
    return Fixture(path=directory, raw=raw, meta=meta, expected=read_expected(directory))


def read_expected(directory: Path) -> Outcome | None:
    """The fixture's ``expected.json``, or None when there is none."""
    path = directory / EXPECTED_FILE
    if not _entry_exists(path):
        return None
    return _outcome(path, read_fixture_json(path))


def _outcome(path: Path, document: Any) -> Outcome:
    try:
        return Outcome.from_json(document)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from exc


def read_meta(path: Path) -> FixtureMeta:
    """``meta.json``; InputError when it is unreadable or its ``instruction`` is not an
    instruction id (a path, however it is spelled, is refused here)."""
    from salvagelane.definitions.ids import require_instruction_id

    document = read_call_meta(path)
    instruction = require_instruction_id(document.get("instruction"), where=f"{path}: instruction")
    usage = document["usage"]
    return FixtureMeta(
        instruction=instruction,
        finish_reason=document.get("finish_reason"),
        native_finish_reason=document.get("native_finish_reason"),
        model=document.get("model"),
        usage=usage,
        source=document.get("source"),
    )


# --- writing ---------------------------------------------------------------------------------


def write_expected(directory: Path, outcome: Outcome) -> None:
    """Record ``outcome`` as the fixture's ``expected.json``."""
    _write_text(directory / EXPECTED_FILE, _json_text(outcome.to_json()))


def _json_text(document: Any) -> str:
    text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate from a JSON escape in the model's text: escape everything
        # non-ASCII so the file stays UTF-8 and reads back to the same value.
        text = json.dumps(document, indent=2, ensure_ascii=True, allow_nan=False)
    return text + "\n"


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8, no newline translation) atomically: a reader never sees half."""
    data = text.encode("utf-8", "surrogateescape")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# --- replaying -------------------------------------------------------------------------------


def replay_outcome(fixture: Fixture, policy: SalvagePolicy) -> Outcome:
    """What salvage makes of the fixture's raw output under ``policy``."""
    return outcome_of(
        salvage(fixture.raw, policy, finish_reason=fixture.meta.salvage_finish_reason)
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FixtureReplay:
    """The verdict on one fixture: ``same``, ``differs``, ``error`` (it could not be
    compared) or ``refused`` (its files are not a fixture salvagelane accepts: a file that
    is not a regular one, a ``meta.json`` whose ``instruction`` is not the id of a
    definition in the instructions directory) and, with update, ``updated`` or
    ``recorded`` when ``expected.json`` was rewritten or written."""

    path: Path
    verdict: Verdict
    instruction: str | None = None
    differences: tuple[Difference, ...] = ()
    expected: Outcome | None = None
    actual: Outcome | None = None
    error: str | None = None
    definition: str | None = None
    """The definition replayed with: ``stored <version>`` (the fixture's own) or
    ``current``."""
    note: str | None = None
    """With ``--use-current``: which files of the current definition differ from the
    fixture's."""

    def to_json(self) -> dict[str, Any]:
        return {
            "fixture": str(self.path),
            "verdict": self.verdict,
            "instruction": self.instruction,
            "status": None if self.actual is None else self.actual.status,
            "differences": [d.to_json() for d in self.differences],
            "error": self.error,
            "definition": self.definition,
            "note": self.note,
        }


def _remembered(cache: dict[str, _T | SalvagelaneError], key: str, compute: Callable[[], _T]) -> _T:
    """``compute()`` once per ``key``; a failure is remembered too and raised again, so a
    broken definition is reported for every fixture that names it but loaded once."""
    if key not in cache:
        try:
            cache[key] = compute()
        except SalvagelaneError as exc:
            cache[key] = exc
    found = cache[key]
    if isinstance(found, SalvagelaneError):
        raise found
    return found


class Replayer:
    """Replays fixtures with the definition each one's run was made with (its
    ``definition.json``), or with ``use_current`` with today's definitions in
    ``instructions_dir``; each definition loaded and resolved once.

    A fixture's ``instruction`` is only ever an id, looked up among the definitions of
    ``instructions_dir`` (never a path), so nothing outside the operator's own
    definitions is loaded or run: a fixture's own definition is rebuilt without touching
    the filesystem, and the context callables it names run only when the operator's
    definition of that id names them too. Context is resolved only when an allow-list
    needs it, so a definition whose prompt context calls out to a service replays
    offline.
    """

    def __init__(self, instructions_dir: Path, *, use_current: bool = False) -> None:
        self._directory = instructions_dir
        self._use_current = use_current
        self._policies: dict[str, SalvagePolicy | SalvagelaneError] = {}
        self._current: dict[str, Instruction | SalvagelaneError] = {}

    def current(self, instruction_id: str) -> Instruction:
        """The definition with id ``instruction_id`` in the instructions directory;
        InputError for anything but an id, NotFoundError when no definition has it."""
        from salvagelane.definitions.ids import instruction_by_id

        return _remembered(
            self._current,
            instruction_id,
            lambda: instruction_by_id(instruction_id, self._directory, where="instruction"),
        )

    def policy_for(self, instruction_id: str) -> SalvagePolicy:
        """The salvage policy of the current definition with id ``instruction_id``;
        InputError for anything but an id, NotFoundError when no definition has it."""
        from salvagelane.definitions import salvage_policy_for

        return _remembered(
            self._policies, instruction_id, lambda: salvage_policy_for(self.current(instruction_id))
        )

    def stored_policy(self, snapshot: DefinitionSnapshot, instruction_id: str) -> SalvagePolicy:
        """The salvage policy of the fixture's own definition ``snapshot``, which must
        define ``instruction_id``. DefinitionError when it does not load, or names a
        context callable an allow-list needs that the operator's definition does not."""
        from salvagelane.definitions import load_stored, salvage_policy_for

        def load() -> SalvagePolicy:
            stored = load_stored(snapshot)
            if stored.id != instruction_id:
                raise InputError(
                    f"{DEFINITION_FILE}: defines {stored.id!r}, but {META_FILE} names "
                    f"{instruction_id!r}: expected the definition of the fixture's instruction"
                )
            return salvage_policy_for(stored, trusted=lambda: self.current(instruction_id))

        return _remembered(self._policies, f"stored:{snapshot.sha256}", load)

    def replay(self, directory: Path, *, update: bool = False) -> FixtureReplay:
        """Replay the fixture in ``directory``; with ``update``, record the outcome in
        ``expected.json`` when it is missing, unreadable or different (never in a
        refused fixture)."""
        try:
            raw = read_fixture_text(directory / RAW_FILE)
            meta = read_meta(directory / META_FILE)
            snapshot = read_definition(directory)
        except InputError as exc:
            return _verdict(directory, "refused", None, exc)
        instruction = meta.instruction
        note = None
        try:
            if self._use_current:
                policy = self.policy_for(instruction)
                definition = "current"
                note = self._note(instruction, snapshot, directory)
            elif snapshot is None:
                raise _NoDefinition(
                    f"{directory}: no {DEFINITION_FILE}: the fixture does not carry the "
                    "definition its run was made with (it is hand-made, or was captured "
                    "from a run stored before salvagelane kept definitions); replay it "
                    f"with --use-current to use the definition in {self._directory}/"
                )
            else:
                policy = self.stored_policy(snapshot, instruction)
                definition = f"stored {snapshot.sha256[:12]}"
        except _NoDefinition as exc:
            return _verdict(directory, "refused", instruction, exc)
        except (InputError, NotFoundError) as exc:
            # Said once per id, so the fixture's meta.json is named here.
            where = directory / META_FILE if snapshot is None or self._use_current else None
            where = where or directory / DEFINITION_FILE
            return _verdict(directory, "refused", instruction, exc, where=where)
        except DefinitionError as exc:
            if snapshot is not None and not self._use_current:
                return _verdict(
                    directory, "refused", instruction, exc, where=directory / DEFINITION_FILE
                )
            return _verdict(directory, "error", instruction, exc)
        except SalvagelaneError as exc:
            return _verdict(directory, "error", instruction, exc)
        found = self._compare(directory, raw, meta, policy, update=update)
        return replace(found, definition=definition, note=note)

    def _note(
        self, instruction: str, snapshot: DefinitionSnapshot | None, directory: Path
    ) -> str | None:
        """What ``--use-current`` says about a fixture that carries its own definition."""
        from salvagelane.definitions.versions import what_differs

        if snapshot is None:
            return None
        return what_differs(
            self.current(instruction), snapshot, whose=f"the fixture's run ({directory.name})"
        )

    def _compare(
        self,
        directory: Path,
        raw: str,
        meta: FixtureMeta,
        policy: SalvagePolicy,
        *,
        update: bool,
    ) -> FixtureReplay:
        instruction = meta.instruction
        try:
            expected = _expected_for_replay(directory)
        except _UnusableExpected as exc:
            if not update:
                return _verdict(directory, "error", instruction, exc)
            expected = None  # --update records it again
        except InputError as exc:
            return _verdict(directory, "refused", instruction, exc)
        fixture = Fixture(path=directory, raw=raw, meta=meta, expected=expected)
        try:
            actual = replay_outcome(fixture, policy)
        except SalvagelaneError as exc:
            return _verdict(directory, "error", instruction, exc)
        if expected is None:
            if update:
                write_expected(directory, actual)
                return FixtureReplay(
                    path=directory, verdict="recorded", instruction=instruction, actual=actual
                )
            return FixtureReplay(
                path=directory,
                verdict="error",
                instruction=instruction,
                actual=actual,
                error=f"{directory / EXPECTED_FILE}: no expected outcome recorded: "
                f"run salvagelane replay {directory} --update to record it",
            )
        differences = tuple(compare(expected, actual))
        if not differences:
            verdict: Verdict = "same"
        elif update:
            write_expected(directory, actual)
            verdict = "updated"
        else:
            verdict = "differs"
        return FixtureReplay(
            path=directory,
            verdict=verdict,
            instruction=instruction,
            differences=differences,
            expected=expected,
            actual=actual,
        )


class _NoDefinition(InputError):
    """The fixture carries no definition and ``--use-current`` was not given."""


def read_definition(directory: Path) -> DefinitionSnapshot | None:
    """The fixture's ``definition.json`` (None when it has none); InputError when it is
    not a regular file of bounded size, not a stored definition, or not the version its
    ``sha256`` names."""
    from salvagelane.definitions.snapshot import MAX_SNAPSHOT_BYTES
    from salvagelane.definitions.versions import checked_snapshot

    path = directory / DEFINITION_FILE
    if not _entry_exists(path):
        return None
    # JSON escapes may take six bytes for one: the file's cap allows for them.
    document = read_fixture_json(path, limit=6 * MAX_SNAPSHOT_BYTES + 65536)
    if not isinstance(document, Mapping) or not isinstance(document.get("sha256"), str):
        raise InputError(f"{path}: expected a stored definition with its sha256")
    try:
        return checked_snapshot(document.get("definition"), document["sha256"], where=str(path))
    except ValueError as exc:
        raise InputError(str(exc)) from exc


class _UnusableExpected(InputError):
    """``expected.json`` exists but cannot be read as an outcome; ``--update`` replaces it."""


def _expected_for_replay(directory: Path) -> Outcome | None:
    """``expected.json`` as an outcome, or None when there is none. InputError when the
    file itself is refused (a link, not a regular file, too large); _UnusableExpected
    when its content is not an outcome."""
    path = directory / EXPECTED_FILE
    if not _entry_exists(path):
        return None
    data = read_fixture_bytes(path)
    hint = f"(run salvagelane replay {directory} --update to record it again)"
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _UnusableExpected(
            f"fixture file {path}: not UTF-8 text: {not_utf8(exc)} {hint}"
        ) from exc
    except json.JSONDecodeError as exc:
        raise _UnusableExpected(
            f"fixture file {path}: not valid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg} {hint}"
        ) from exc
    except RecursionError as exc:
        raise _UnusableExpected(f"fixture file {path}: nested too deeply to read {hint}") from exc
    try:
        return Outcome.from_json(document)
    except ValueError as exc:
        raise _UnusableExpected(f"{path}: {exc} {hint}") from exc


def _verdict(
    directory: Path,
    verdict: Verdict,
    instruction: str | None,
    exc: SalvagelaneError,
    *,
    where: Path | None = None,
) -> FixtureReplay:
    message = " ".join(str(exc).split())
    if where is not None:
        message = f"{where}: {message}"
    return FixtureReplay(path=directory, verdict=verdict, instruction=instruction, error=message)


# --- capturing -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CapturedFixture:
    """What :func:`capture_run` wrote. ``expected`` is None when the attempt's outcome was
    not stored as the run's report (another attempt was chosen, or none was)."""

    path: Path
    run_id: str
    attempt: int
    meta: FixtureMeta
    expected: Outcome | None
    definition: str | None = None
    """The version of the definition written to ``definition.json``; None when the run's
    was not kept (stored before salvagelane kept definitions)."""


def capture_run(
    store: Store,
    run_id: str,
    attempt: int | None,
    to: Path,
    *,
    force: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> CapturedFixture:
    """Write a fixture of attempt ``attempt`` of run ``run_id`` (a unique prefix will do)
    into directory ``to``.

    ``attempt`` None takes the attempt the run's report came from, else the last one
    with raw output. ``expected.json`` is the outcome the run stored (its report's model
    items and that attempt's quarantine), so a replay checks today's definition against
    what really happened; it is left out for an attempt without a stored report.
    ``definition.json`` is the definition the run was made with, as stored (left out for
    a run stored before definitions were kept). Refuses a non-empty ``to`` unless
    ``force``, a run whose stored instruction is not an instruction id, and to write any
    value of a secret environment variable (``*_API_KEY``, ``*_TOKEN``...).
    """
    from salvagelane.definitions.ids import require_instruction_id

    detail = store.get_run(run_id)
    # Read back from the database: written into meta.json only if replay will take it.
    instruction_id = require_instruction_id(
        detail.instruction_id, where=f"run {detail.id}: instruction"
    )
    chosen = _chosen_attempt(detail, attempt)
    raw = chosen.raw_output
    assert raw is not None  # _chosen_attempt only returns attempts with raw output
    if chosen.clipped:
        # Replayed, the first bytes alone would pass for what the model said.
        raise InputError(
            f"run {detail.id}: attempt {chosen.number}'s output is stored clipped (first "
            f"{chosen.stored_length} of {chosen.raw_length} bytes): it cannot be a fixture"
        )
    source: dict[str, Any] = {
        "run_id": detail.id,
        "attempt": chosen.number,
        "trigger": detail.trigger,
        "run_created_at": detail.created_at.isoformat(),
        "captured_at": now().isoformat(),
        "definition_sha256": detail.definition_sha256,
        "prompt_sha256": chosen.request.get("prompt_sha256"),
    }
    usage = chosen.usage or {}
    meta = FixtureMeta(
        instruction=instruction_id,
        finish_reason=chosen.finish_reason,
        native_finish_reason=chosen.native_finish_reason,
        model=chosen.model,
        usage={key: usage.get(key) for key in ("prompt_tokens", "completion_tokens")},
        source=source,
    )
    expected = _stored_outcome(detail, chosen)
    files = {RAW_FILE: raw, META_FILE: _json_text(meta.to_json())}
    if expected is not None:
        files[EXPECTED_FILE] = _json_text(expected.to_json())
    version = _stored_definition(store, detail.id, instruction_id)
    if version is not None:
        files[DEFINITION_FILE] = _json_text(version)
    _refuse_secrets(files)
    write_fixture(to, files, force=force)
    return CapturedFixture(
        path=to,
        run_id=detail.id,
        attempt=chosen.number,
        meta=meta,
        expected=expected,
        definition=None if version is None else str(version["sha256"]),
    )


def _stored_definition(store: Store, run_id: str, instruction_id: str) -> dict[str, Any] | None:
    """``definition.json`` for run ``run_id``: the stored definition it was made with,
    checked against its version; None when the run has none."""
    from salvagelane.definitions.versions import checked_snapshot

    record = store.get_definition(run_id)
    if record is None:
        return None
    try:
        snapshot = checked_snapshot(record.content, record.sha256, where=f"run {run_id}")
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    return {
        "sha256": snapshot.sha256,
        "instruction": instruction_id,
        "definition_sha256": record.definition_sha256,
        "definition": snapshot.to_json(),
    }


def _chosen_attempt(detail: RunDetail, number: int | None) -> AttemptView:
    if number is not None:
        attempt = detail.attempt(number)
        if attempt.raw_output is None:
            raise InputError(
                f"run {detail.id}: attempt {number} has no raw output to capture "
                f"(the call failed: {attempt.provider_error or 'no answer'})"
            )
        return attempt
    with_raw = [a for a in detail.attempts if a.raw_output is not None]
    best = next((a for a in with_raw if a.id == detail.best_attempt_id), None)
    if best is None and detail.report is not None:
        best = next((a for a in with_raw if a.id == detail.report.attempt_id), None)
    if best is not None:
        return best
    if not with_raw:
        raise InputError(
            f"run {detail.id}: no attempt has raw output to capture "
            f"({len(detail.attempts)} attempt(s), status {detail.status})"
        )
    return with_raw[-1]


def _stored_outcome(detail: RunDetail, attempt: AttemptView) -> Outcome | None:
    """The outcome the run stored for ``attempt``, or None when it stored no report of it.

    Operator-added report items are left out: the fixture records what salvage did.
    """
    report = detail.report
    status = (attempt.outcome or {}).get("status")
    if report is None or report.attempt_id != attempt.id or not isinstance(status, str):
        return None
    items = tuple(
        ItemOutcome(
            index=item.source_index,
            sha256=canonical_sha256(item.data),
            data=item.data,
            repairs=repairs_from_json(
                item.repairs or [], f"the stored repairs of {item_label(item.source_index)}"
            ),
        )
        for item in sorted(report.items, key=lambda item: item.position)
        if item.origin == ItemOrigin.MODEL and item.source_index is not None
    )
    quarantined = tuple(
        QuarantineOutcome(index=record.source_index, reason=record.reason)
        for record in sorted(detail.quarantined, key=lambda record: record.id)
        if record.attempt_id == attempt.id
    )
    envelope = report.envelope if isinstance(report.envelope, Mapping) else {}
    return Outcome(
        status=status, items=items, quarantined=quarantined, envelope_keys=tuple(envelope)
    )


def _refuse_secrets(files: Mapping[str, str]) -> None:
    secrets = [
        name
        for name, value in os.environ.items()
        if secret_field_name(name)
        and len(value.strip()) >= MIN_SECRET_LENGTH
        and any(value.strip() in text for text in files.values())
    ]
    if secrets:
        raise InputError(
            "refusing to write the fixture: the value of "
            f"{', '.join(sorted(secrets))} appears in the captured output or metadata "
            "(expected no secret in a fixture; remove it from the run's output first)"
        )


# --- writing a fixture whole ------------------------------------------------------------------

FIXTURE_FILES = (RAW_FILE, META_FILE, EXPECTED_FILE, DEFINITION_FILE)

_STAGING = re.compile(r"\..+\.capture-(new|old)-(\d+)-[0-9a-f]{8}")
"""The name of a capture's directory beside its target: ``new`` holds the fixture being
written, ``old`` the fixture it replaces (``--force``); with the writer's process id."""


def _in_capture_staging(relative: Path) -> bool:
    return any(_STAGING.fullmatch(part) for part in relative.parts)


def write_fixture(to: Path, files: Mapping[str, str], *, force: bool = False) -> None:
    """Make directory ``to`` the fixture ``files`` (name: text), whole or not at all.

    The files are written into a new directory beside ``to``, each fsynced, the directory
    fsynced, then renamed into place and the parent fsynced: killed at any point, ``to``
    is absent, or the fixture it was, or the whole new one; never a mix. With ``force`` a
    fixture in ``to`` is replaced (moved aside, then removed) and other files in it are
    kept. A capture killed midway leaves its directories behind; the next one into
    ``to`` tidies them (puts back a replaced fixture that was not replaced yet) before
    it starts, when the process that left them is gone. InputError when ``to`` is a
    file, a non-empty directory without ``force``, or cannot be written.
    """
    target = Path(os.path.realpath(to))  # the operator's own path: a link to a directory is fine
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _tidy_leftovers(target)
    except OSError as exc:
        raise InputError(f"{to}: cannot create: {exc.strerror or exc}") from exc
    replacing = _replaces_a_fixture(to, target, force=force)
    try:
        staging = _staging_directory(target, "new")
        replaced = None
        try:
            for name, text in files.items():
                _write_synced(staging / name, text.encode("utf-8", "surrogateescape"))
            _fsync_directory(staging)
            if replacing:
                replaced = _swap(staging, target)
            else:
                # Replaces an empty directory in one step; fails on a non-empty one.
                os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_directory(target.parent)
        if replaced is not None:
            _restore_extras(replaced, target)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise InputError(f"{to}: cannot write the fixture: {exc.strerror or exc}{where}") from exc


def _swap(staging: Path, target: Path) -> Path:
    """Move the directory ``target`` aside and ``staging`` into its place; the path it
    was moved to. Killed between the two, the next capture puts it back."""
    replaced = _staging_directory(target, "old", create=False)
    os.rename(target, replaced)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(replaced, target)
        raise
    return replaced


def _replaces_a_fixture(to: Path, target: Path, *, force: bool) -> bool:
    """Whether ``target`` is a non-empty directory to replace (``force``). InputError
    for a file, or a non-empty directory without ``force``."""
    if not os.path.lexists(target):
        return False
    if not target.is_dir():
        raise InputError(f"{to}: expected a directory for the fixture, got a file")
    try:
        with os.scandir(target) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        raise InputError(f"{to}: cannot read: {exc.strerror or exc}") from exc
    if empty:
        return False
    if not force:
        raise InputError(
            f"{to}: not empty: expected a new or empty directory "
            "(pass --force to overwrite its fixture files)"
        )
    return True


def _staging_directory(target: Path, role: str, *, create: bool = True) -> Path:
    """A new name (``create``: a new directory) beside ``target`` for ``role``."""
    stem = _stem(target)
    while True:
        path = target.with_name(f".{stem}.capture-{role}-{os.getpid()}-{secrets.token_hex(4)}")
        if not create:
            if not os.path.lexists(path):
                return path
            continue
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


def _stem(target: Path) -> str:
    """``target``'s name as its staging directories carry it: a long one shortened, so the
    staging name stays within the file system's limit."""
    name = target.name
    if len(name) <= 100:
        return name
    return name[:64] + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _write_synced(path: Path, data: bytes) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view) :]
        os.fsync(handle)
    finally:
        os.close(handle)


def _fsync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    except OSError as exc:
        # Some file systems cannot sync a directory: the rename is as durable as they allow.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(handle)


def _restore_extras(replaced: Path, target: Path) -> None:
    """Move what ``replaced`` holds besides a fixture's files into ``target``, then
    remove it: ``--force`` overwrites the fixture, not the operator's notes beside it."""
    moved = False
    for name in os.listdir(replaced):
        if name not in FIXTURE_FILES and not os.path.lexists(target / name):
            os.rename(replaced / name, target / name)
            moved = True
    if moved:
        _fsync_directory(target)
    shutil.rmtree(replaced)


def _tidy_leftovers(target: Path) -> None:
    """Settle the directories a killed capture into ``target`` left: a fixture moved
    aside but not yet replaced goes back; every other is removed. Those of a process
    still alive (a capture under way) are left alone."""
    prefix = f".{_stem(target)}.capture-"
    try:
        names = [name for name in os.listdir(target.parent) if name.startswith(prefix)]
    except FileNotFoundError:
        return
    # The replaced ("old") first: it may have to go back before the rest is removed.
    for name in sorted(names, key=lambda name: (".capture-new-" in name, name)):
        found = _STAGING.fullmatch(name)
        if found is None or _alive(int(found.group(2))):
            continue
        leftover = target.parent / name
        if found.group(1) == "old":
            if not os.path.lexists(target):
                os.rename(leftover, target)
                _fsync_directory(target.parent)
                continue
            if target.is_dir() and not target.is_symlink():
                _restore_extras(leftover, target)
                continue
        shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False  # not a process: 0 would signal our own group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OverflowError:
        return False
    return True


def summarise(replays: Sequence[FixtureReplay]) -> dict[str, int]:
    """How many fixtures got each verdict, in a fixed order."""
    order: tuple[Verdict, ...] = ("same", "differs", "error", "refused", "updated", "recorded")
    return {verdict: sum(1 for r in replays if r.verdict == verdict) for verdict in order}
