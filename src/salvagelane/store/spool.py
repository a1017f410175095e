"""The raw-output spool: model calls the database could not take, kept on disk until it can.

A paid output must survive a database that refuses the write (locked, full, gone). The
executor then writes the attempt, every field it would have stored and the raw bytes
exactly, to one file in the spool directory; the next command that opens the database
(or ``salvagelane db recover``) imports it and removes the file only after the commit.

A file is written to a temporary name in the same directory, fsynced, renamed into place
and the directory fsynced: a crash leaves either no file or a whole one. Plain file I/O:
this module knows nothing of SQL; :func:`recover` imports through the small
:class:`AttemptImporter` protocol the store implements.

File layout: one line of JSON (the header: the attempt's fields, the database it was meant
for, and the length and SHA-256 of the body), a newline, then the stored output bytes (the
body; absent for a call that failed without output).
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from salvagelane.errors import SpoolError, StoreError

FORMAT = "salvagelane-spool/1"
SUFFIX = ".spool"
_TEMP_PREFIX = ".incoming-"
_HEADER_LIMIT = 64 * 1024 * 1024
"""Most bytes read looking for the header's end: a prompt is large, never this large."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SpooledAttempt:
    """One attempt as the store would have written it.

    ``raw_output`` is the stored bytes (the whole output, or its first bytes when it was
    over the definition's cap); ``raw_length`` and ``raw_sha256`` describe the output as
    received. ``database`` names the database it was meant for (password masked).
    """

    database: str
    run_id: str
    number: int
    started_at: datetime
    finished_at: datetime | None
    request: Mapping[str, Any]
    raw_output: bytes | None
    raw_length: int | None
    raw_sha256: str | None
    finish_reason: str | None
    native_finish_reason: str | None
    usage: Mapping[str, Any] | None
    model: str | None
    request_id: str | None
    latency_seconds: float | None
    http_status: int | None
    provider_error: str | None
    stream_error: str | None

    @property
    def file_name(self) -> str:
        return f"{self.run_id}.{self.number}{SUFFIX}"


class Imported(enum.StrEnum):
    """What importing one spooled attempt did."""

    IMPORTED = "imported"
    ALREADY_STORED = "already_stored"
    """The run already holds this attempt, with the same output: an import that committed
    and then lost its process before it removed the file."""
    NO_RUN = "no_run"
    CONFLICT = "conflict"
    """The run holds an attempt of this number with a different output: nothing is
    overwritten."""


class AttemptImporter(Protocol):
    """The store's side of :func:`recover`."""

    @property
    def identity(self) -> str:
        """This database, as :attr:`SpooledAttempt.database` names one."""
        ...

    def import_spooled_attempt(self, entry: SpooledAttempt) -> Imported:
        """Add ``entry`` to its run (whatever the run's status), committed; idempotent."""
        ...


class Spool:
    """The spool directory. Nothing is created until the first write."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __repr__(self) -> str:
        return f"Spool({str(self.directory)!r})"

    def write(self, entry: SpooledAttempt) -> Path:
        """Write ``entry`` durably; returns its file. SpoolError when it cannot be written."""
        body = entry.raw_output or b""
        header = _header(entry, body)
        final = self.directory / entry.file_name
        try:
            self._make_directory()
            # mkstemp: a fresh name (no writer can clobber another's) and mode 0600.
            handle, temporary = tempfile.mkstemp(
                dir=self.directory, prefix=_TEMP_PREFIX, suffix=".tmp"
            )
            try:
                with os.fdopen(handle, "wb") as file:
                    file.write(header)
                    file.write(b"\n")
                    file.write(body)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, final)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            _fsync_directory(self.directory)
        except OSError as exc:
            raise SpoolError(f"{final}: could not write the spool file: {_os_reason(exc)}") from exc
        return final

    def files(self) -> list[Path]:
        """The spool files, oldest first (by name within the same second); none when the
        directory does not exist. Temporary files of an interrupted write are left out."""
        try:
            found = [
                path
                for path in self.directory.iterdir()
                if path.name.endswith(SUFFIX) and not path.name.startswith(_TEMP_PREFIX)
            ]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SpoolError(
                f"{self.directory}: could not list the spool directory: {_os_reason(exc)}"
            ) from exc
        return sorted(found, key=_age_then_name)

    def read(self, path: Path) -> SpooledAttempt:
        """The attempt in ``path``; SpoolError when it cannot be read or is damaged."""
        try:
            with path.open("rb") as file:
                line = file.readline(_HEADER_LIMIT)
                body = file.read()
        except OSError as exc:
            raise SpoolError(f"{path}: could not read the spool file: {_os_reason(exc)}") from exc
        if not line.endswith(b"\n"):
            raise SpoolError(f"{path}: damaged spool file: no header line")
        try:
            header = json.loads(line)
            return _entry(header, body, path)
        except (ValueError, KeyError, TypeError) as exc:
            raise SpoolError(f"{path}: damaged spool file: {exc}") from exc

    def remove(self, path: Path) -> None:
        """Delete ``path`` durably (the caller has committed its attempt)."""
        try:
            path.unlink(missing_ok=True)
            _fsync_directory(self.directory)
        except OSError as exc:
            raise SpoolError(
                f"{path}: imported, but the spool file could not be removed: {_os_reason(exc)}"
            ) from exc

    def _make_directory(self) -> None:
        missing = [p for p in (self.directory, *self.directory.parents) if not p.exists()]
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A new directory's own entry must reach the disk too, or a crash loses the file.
        for created in reversed(missing):
            _fsync_directory(created.parent)


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovered:
    """One spool file and what became of it. ``entry`` is None when it could not be read;
    ``problem`` says why a file was kept."""

    path: Path
    entry: SpooledAttempt | None
    outcome: Imported | None
    problem: str | None = None
    other_database: bool = False

    @property
    def removed(self) -> bool:
        return self.outcome in (Imported.IMPORTED, Imported.ALREADY_STORED) and not self.problem


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovery:
    """What :func:`recover` did, file by file."""

    directory: Path
    files: tuple[Recovered, ...]

    @property
    def imported(self) -> tuple[Recovered, ...]:
        return tuple(f for f in self.files if f.outcome is Imported.IMPORTED)

    @property
    def failed(self) -> tuple[Recovered, ...]:
        """Files kept because they could not be imported into this database."""
        return tuple(f for f in self.files if not f.removed and not f.other_database)

    @property
    def elsewhere(self) -> tuple[Recovered, ...]:
        """Files kept because they were spooled for another database."""
        return tuple(f for f in self.files if f.other_database)


def recover(store: AttemptImporter, spool: Spool) -> Recovery:
    """Import every spool file into ``store``; remove each once its attempt is committed.

    A file whose run is not in this database is kept: when it was spooled for another
    database it is left for that one, else it is reported as a failure. A damaged file, a
    conflicting attempt or a database error keeps the file too, and the next file is
    still tried: a crash or an error at any point leaves every file not yet committed in
    place, and one committed but not yet removed is recognised the next time.
    """
    results: list[Recovered] = []
    for path in spool.files():
        results.append(_recover_one(store, spool, path))
    return Recovery(directory=spool.directory, files=tuple(results))


def _recover_one(store: AttemptImporter, spool: Spool, path: Path) -> Recovered:
    try:
        entry = spool.read(path)
    except SpoolError as exc:
        return Recovered(path=path, entry=None, outcome=None, problem=str(exc))
    try:
        outcome = store.import_spooled_attempt(entry)
    except StoreError as exc:
        return Recovered(path=path, entry=entry, outcome=None, problem=str(exc))
    where = f"attempt {entry.number} of run {entry.run_id}"
    if outcome is Imported.NO_RUN:
        if entry.database != store.identity:
            return Recovered(
                path=path,
                entry=entry,
                outcome=outcome,
                problem=f"{where} was spooled for {entry.database}, not this database",
                other_database=True,
            )
        return Recovered(
            path=path,
            entry=entry,
            outcome=outcome,
            problem=f"run {entry.run_id} is not in this database (was it replaced?)",
        )
    if outcome is Imported.CONFLICT:
        return Recovered(
            path=path,
            entry=entry,
            outcome=outcome,
            problem=f"run {entry.run_id} already has an attempt {entry.number} "
            "with another output: nothing was overwritten",
        )
    try:
        spool.remove(path)
    except SpoolError as exc:
        return Recovered(path=path, entry=entry, outcome=outcome, problem=str(exc))
    return Recovered(path=path, entry=entry, outcome=outcome)


# --- the file format ---------------------------------------------------------------------------


def _header(entry: SpooledAttempt, body: bytes) -> bytes:
    document = {
        "format": FORMAT,
        "database": entry.database,
        "run_id": entry.run_id,
        "number": entry.number,
        "started_at": entry.started_at.isoformat(),
        "finished_at": None if entry.finished_at is None else entry.finished_at.isoformat(),
        "request": entry.request,
        "has_output": entry.raw_output is not None,
        "raw_length": entry.raw_length,
        "raw_sha256": entry.raw_sha256,
        "finish_reason": entry.finish_reason,
        "native_finish_reason": entry.native_finish_reason,
        "usage": entry.usage,
        "model": entry.model,
        "request_id": entry.request_id,
        "latency_seconds": entry.latency_seconds,
        "http_status": entry.http_status,
        "provider_error": entry.provider_error,
        "stream_error": entry.stream_error,
        "body_length": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }
    # ASCII only: no raw newline can end the header early, and lone surrogates survive.
    return json.dumps(document, ensure_ascii=True, sort_keys=True, default=_plain).encode("ascii")


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _entry(header: dict[str, Any], body: bytes, path: Path) -> SpooledAttempt:
    if header.get("format") != FORMAT:
        raise ValueError(f"expected format {FORMAT!r}, got {header.get('format')!r}")
    if len(body) != header["body_length"]:
        raise ValueError(
            f"expected {header['body_length']} bytes of output, found {len(body)} (cut short?)"
        )
    if hashlib.sha256(body).hexdigest() != header["body_sha256"]:
        raise ValueError("the output does not match its SHA-256")
    entry = SpooledAttempt(
        database=str(header["database"]),
        run_id=str(header["run_id"]),
        number=int(header["number"]),
        started_at=_moment(header["started_at"]),
        finished_at=None if header["finished_at"] is None else _moment(header["finished_at"]),
        request=header["request"],
        raw_output=body if header["has_output"] else None,
        raw_length=header["raw_length"],
        raw_sha256=header["raw_sha256"],
        finish_reason=header["finish_reason"],
        native_finish_reason=header["native_finish_reason"],
        usage=header["usage"],
        model=header["model"],
        request_id=header["request_id"],
        latency_seconds=header["latency_seconds"],
        http_status=header["http_status"],
        provider_error=header["provider_error"],
        stream_error=header["stream_error"],
    )
    if path.name != entry.file_name:
        raise ValueError(f"the file holds attempt {entry.number} of run {entry.run_id}")
    return entry


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no zone")
    return moment


def _age_then_name(path: Path) -> tuple[float, str]:
    try:
        return (path.stat().st_mtime, path.name)
    except OSError:
        return (0.0, path.name)


def _fsync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


__all__ = [
    "FORMAT",
    "AttemptImporter",
    "Imported",
    "Recovered",
    "Recovery",
    "Spool",
    "SpooledAttempt",
    "recover",
]
