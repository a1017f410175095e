"""Answers from a recorded fixture: ``raw.txt`` plus ``meta.json``, in a directory or not."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError, InputError, not_utf8

MAX_FIXTURE_FILE_BYTES = 256 * 1024 * 1024
"""Largest ``raw.txt`` or ``expected.json`` a fixture may hold: what reading one costs is
bounded."""
MAX_META_BYTES = 1024 * 1024
"""Largest ``meta.json``: a few fields."""


class ReplayConnector:
    """Replays a recorded completion; the request is ignored.

    ``fixture`` is a directory holding ``raw.txt`` and an optional ``meta.json`` (what
    ``run --replay`` and a definition's ``connector.fixture`` name), or the raw output
    file itself, with an optional ``meta.json`` beside it. ``meta.json`` may hold ``finish_reason``,
    ``native_finish_reason``, ``usage`` (``prompt_tokens``, ``completion_tokens``) and
    ``model``. Both are read only as regular files (:func:`read_fixture_bytes`).
    """

    def __init__(self, fixture: Path | str):
        path = Path(fixture)
        # A path that does not exist is taken as a directory, so the error names raw.txt.
        self.raw_path = path if path.is_file() else path / "raw.txt"
        self.fixture_dir = self.raw_path.parent

    def __repr__(self) -> str:
        return f"ReplayConnector({str(self.raw_path)!r})"

    def check(self) -> None:
        """Read the fixture as :meth:`complete` will; InputError naming the file when it
        cannot be replayed (no ``raw.txt``, a link, a ``meta.json`` that is not JSON).

        For ``run --replay``: a fixture that cannot answer is the command's mistake, to
        refuse before a run is stored, not a failed run."""
        self._read()

    def _read(self) -> tuple[str, dict[str, Any]]:
        meta_path = self.fixture_dir / "meta.json"
        # Exactly as recorded: no newline translation, and bytes that are not UTF-8
        # survive, as the store keeps them. Fixture files are data from elsewhere:
        # regular files only, so a link in one cannot name a file of this machine.
        text = read_fixture_text(self.raw_path)
        present = meta_path.exists() or meta_path.is_symlink()
        return text, read_call_meta(meta_path) if present else {"usage": {}}

    def complete(self, request: CompletionRequest) -> Completion:
        try:
            text, meta = self._read()
        except InputError as exc:
            raise ConnectorError(f"replay: {exc}") from exc
        native, reported = meta.get("native_finish_reason"), meta.get("finish_reason")
        usage = meta["usage"]
        return Completion(
            text=text,
            finish_reason=recorded_finish_reason(reported, native),
            native_finish_reason=native if native is not None else reported,
            usage={
                "prompt_tokens": _optional_int(usage, "prompt_tokens"),
                "completion_tokens": _optional_int(usage, "completion_tokens"),
            },
            model=meta.get("model"),
            request_id=None,
            latency_seconds=0.0,
            http_status=None,
        )


def read_call_meta(path: Path) -> dict[str, Any]:
    """``meta.json`` as an object whose call fields are checked: ``finish_reason``,
    ``native_finish_reason`` and ``model`` strings or absent, ``usage`` an object or
    absent (``run --replay`` and ``salvagelane replay`` read it alike). InputError otherwise."""
    document = read_fixture_json(path, limit=MAX_META_BYTES)
    if not isinstance(document, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(document).__name__}")
    for key in ("finish_reason", "native_finish_reason", "model"):
        value = document.get(key)
        if value is not None and not isinstance(value, str):
            raise InputError(f"{path}: {key}: expected a string, got {type(value).__name__}")
    usage = document.get("usage") or {}
    if not isinstance(usage, dict):
        raise InputError(f"{path}: usage: expected an object, got {type(usage).__name__}")
    return {**document, "usage": usage}


def recorded_finish_reason(reported: str | None, native: str | None) -> FinishReason:
    """The canonical finish reason of a recorded call: the recorded one, else the
    provider's native one, mapped; UNKNOWN when neither maps."""
    canonical = canonical_finish_reason(reported if reported is not None else native)
    return canonical if canonical is not None else FinishReason.UNKNOWN


def _optional_int(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- files inside a fixture ----------------------------------------------------------------


def read_fixture_bytes(path: Path, *, limit: int = MAX_FIXTURE_FILE_BYTES) -> bytes:
    """The bytes of ``path``, a file inside a fixture directory; InputError unless it is a
    regular file (not a symbolic link, directory, FIFO or device) of at most ``limit``
    bytes.

    A fixture arrives from elsewhere (attached to a bug report): a link in it would let
    it name a file of this machine, a FIFO or device would block or never end, a
    directory cannot be read. What is not a regular file is refused before it is opened
    (opening a device may act on it); the open itself refuses a link and does not wait
    on a FIFO, should one be put in its place meanwhile, and the descriptor is closed on
    every path.
    """
    try:
        status = os.lstat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    _require_regular(path, status.st_mode)
    try:
        # O_NOFOLLOW refuses a link in the last component; O_NONBLOCK keeps a FIFO from
        # blocking the open (regular files ignore it).
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _require_regular(path, stat.S_IFLNK)
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        status = os.fstat(handle)
        _require_regular(path, status.st_mode)  # swapped since lstat
        if status.st_size > limit:
            raise InputError(
                f"{path}: expected at most {limit} bytes in a fixture file, got {status.st_size}"
            )
        return _read_bounded(handle, path, limit)
    finally:
        os.close(handle)


def _require_regular(path: Path, mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise InputError(
            f"{path}: expected a regular file inside the fixture, got a symbolic link "
            "(a fixture names no other file)"
        )
    if not stat.S_ISREG(mode):
        raise InputError(
            f"{path}: expected a regular file inside the fixture, got {_file_kind(mode)}"
        )


def _read_bounded(handle: int, path: Path, limit: int) -> bytes:
    """All of the file ``handle``, to its end (not to the size stat saw), never past ``limit``."""
    data = bytearray()
    try:
        while len(data) <= limit:
            chunk = os.read(handle, min(1 << 20, limit + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    raise InputError(f"{path}: expected at most {limit} bytes in a fixture file, got more")


def read_fixture_text(path: Path) -> str:
    """A fixture's raw output as text; bytes that are not UTF-8 survive as lone surrogates,
    as the store keeps them."""
    return read_fixture_bytes(path).decode("utf-8", "surrogateescape")


def read_fixture_json(path: Path, *, limit: int = MAX_FIXTURE_FILE_BYTES) -> Any:
    """The JSON document in ``path``, a file inside a fixture; InputError naming the file."""
    data = read_fixture_bytes(path, limit=limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"fixture file {path}: not UTF-8 text: {not_utf8(exc)}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"fixture file {path}: not valid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}"
        ) from exc
    except RecursionError as exc:
        raise InputError(f"fixture file {path}: nested too deeply to read") from exc


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "something else"
