"""A sink writing the report as a pretty-printed JSON file, atomically."""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from salvagelane.errors import ConfigurationError, SinkError

PLACEHOLDERS = ("run_id", "instruction")
"""The names a path template may hold, as ``{run_id}`` and ``{instruction}``."""


class JsonFileSink:
    """Writes the payload to ``path_template`` with its placeholders filled in.

    ``{run_id}`` is filled from the payload field ``run_id_field``, ``{instruction}``
    from ``instruction``. A reader never sees a half-written file: the report goes to
    a temporary file in the same directory, is flushed to disk, then renamed over the
    destination. Missing parent directories are created.
    """

    kind: ClassVar[str] = "json_file"

    __slots__ = ("_path_template", "_run_id_field", "_template")

    def __init__(self, path_template: Path, *, run_id_field: str = "run_id") -> None:
        self._path_template = path_template
        self._template = str(path_template)
        self._run_id_field = run_id_field
        _check_template(self._template)

    @property
    def target(self) -> str:
        return self._template

    def target_for(self, payload: Mapping[str, Any]) -> str:
        """The file this payload goes to, as text: the target its delivery is recorded,
        logged and shown under. SinkError when the payload's values are unusable."""
        return str(self.path_for(payload))

    def path_for(self, payload: Mapping[str, Any]) -> Path:
        """The file a payload is written to; SinkError when its values are unusable."""
        values = {
            "run_id": _path_part(payload, self._run_id_field, self._template),
            "instruction": _path_part(payload, "instruction", self._template),
        }
        return Path(self._template.format_map(values))

    def deliver(self, payload: Mapping[str, Any]) -> None:
        path = self.path_for(payload)
        try:
            text = json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        except (TypeError, ValueError) as exc:
            raise SinkError(
                f"{path}: expected a JSON-ready payload, got {type(exc).__name__}: {exc}",
                target=str(path),
            ) from exc
        try:
            _write_atomically(path, text.encode("utf-8"))
        except OSError as exc:
            raise SinkError(
                f"{path}: could not write the report ({type(exc).__name__}: {exc})",
                target=str(path),
            ) from exc

    def __repr__(self) -> str:
        return f"JsonFileSink({self._path_template!r}, run_id_field={self._run_id_field!r})"


def _check_template(template: str) -> None:
    """ConfigurationError unless every replacement field is a bare known placeholder."""
    expected = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
    try:
        fields = [
            (name, conversion, spec)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as exc:
        raise ConfigurationError(
            f"json_file sink path {template!r}: expected only the placeholders {expected} "
            f"(write braces as {{{{ and }}}}), got a malformed template: {exc}"
        ) from exc
    for name, conversion, spec in fields:
        if name not in PLACEHOLDERS or conversion or spec:
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += (f":{spec}" if spec else "") + "}"
            raise ConfigurationError(
                f"json_file sink path {template!r}: expected only the placeholders "
                f"{expected}, got {shown}"
            )


def _path_part(payload: Mapping[str, Any], field: str, template: str) -> str:
    """A payload value fit to be one path component: no separator, no ``..``."""
    value = payload.get(field)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SinkError(
            f"json_file sink {template!r}: expected the payload's {field!r} to be a string "
            f"or an integer, got {type(value).__name__}",
            target=template,
        )
    text = str(value)
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    # Refused, not cleaned: a run id that looks like a path is a bug or an attack, and
    # a rewritten name would be hard to find.
    if not text or ".." in text or "\0" in text or separators.intersection(text):
        raise SinkError(
            f"json_file sink {template!r}: expected the payload's {field!r} to be a plain "
            f"file name part (no path separator, no '..'), got {text!r}",
            target=template,
        )
    return text


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so it holds either the old or the whole new content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same directory, so os.replace is a rename within one file system. Created with
    # os.open rather than tempfile so the umask, not 0600, decides the permissions.
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make the rename survive a crash, where the platform allows it.

    Best effort: the report is already complete under its name, so a file system that
    cannot sync directories (or Windows, which cannot open them) is not a failure.
    """
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
