"""The definition a run used, kept by content: its YAML text and the files it names.

A :class:`DefinitionSnapshot` is what the store keeps for every run (one row per
:attr:`~DefinitionSnapshot.sha256`) and what a captured fixture carries
(``definition.json``), so that ``quarantine approve``, ``runs redeliver`` and
``replay`` use the version a run was made with, not whatever the working directory
holds today.

A snapshot is data: it comes back from a database or a fixture that anything may have
written. :func:`load_stored <salvagelane.definitions.loading.load_stored>` rebuilds a
definition from it without touching the filesystem (every file it names is read from
the snapshot, never from a path), and nothing named in it as code or as a destination
(context callables, sinks) is used on the snapshot's word alone: see
``docs/adr/0004-instruction-definitions.md``.

:class:`DefinitionFiles` is where a definition's files are read: next to it on disk
(:class:`DiskFiles`) or from a snapshot (:class:`StoredFiles`).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, Protocol

from salvagelane.core.canonical import canonical_sha256

SNAPSHOT_FORMAT = 1
MAX_SNAPSHOT_FILES = 256
"""Files one snapshot may hold (a definition names a few schemas, allow-lists and
context files)."""
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
"""All of a snapshot's text, the definition's included (UTF-8 bytes)."""

STORED_REDACTED = "REDACTED"
"""What a secret becomes in a stored definition (see :func:`without_secrets`)."""

DEFINITION_FILE = "definition.json"
"""The snapshot in a captured fixture directory."""


class DefinitionFiles(Protocol):
    """Where the files a definition names (by the relative path written in it) are read."""

    def read(self, reference: str, cap: int) -> str:
        """The file's text. OSError when it cannot be read (``ENOENT`` when there is no
        such file), UnicodeDecodeError when it is not UTF-8, ValueError when it is over
        ``cap`` bytes."""
        ...

    def shown(self, reference: str) -> str:
        """The file as a message names it."""
        ...

    def exists(self, reference: str) -> bool:
        """Whether ``reference`` names a file that can be read."""
        ...


@dataclass(frozen=True, slots=True)
class DiskFiles:
    """A definition's files on disk, relative to the definition's directory ``base``."""

    base: Path

    def path(self, reference: str) -> Path:
        return (self.base / reference).resolve()

    def read(self, reference: str, cap: int) -> str:
        with self.path(reference).open("rb") as handle:
            data = handle.read(cap + 1)
        if len(data) > cap:
            raise ValueError(f"larger than {cap} bytes")
        return data.decode("utf-8")

    def shown(self, reference: str) -> str:
        return str(self.path(reference))

    def exists(self, reference: str) -> bool:
        return self.path(reference).is_file()


@dataclass(frozen=True, slots=True)
class StoredFiles:
    """A definition's files as a snapshot holds them: read by the path written in the
    definition, never looked up on disk."""

    snapshot: DefinitionSnapshot

    def read(self, reference: str, cap: int) -> str:
        text = self.snapshot.files.get(reference)
        if text is None:
            raise FileNotFoundError(errno.ENOENT, "not in the stored definition")
        if len(text.encode("utf-8", "surrogatepass")) > cap:
            raise ValueError(f"larger than {cap} bytes")
        return text

    def shown(self, reference: str) -> str:
        return f"{reference} (stored {self.snapshot.sha256[:12]})"

    def exists(self, reference: str) -> bool:
        return reference in self.snapshot.files


@dataclass(frozen=True, kw_only=True, slots=True)
class DefinitionSnapshot:
    """A definition's YAML ``text`` as written (comments included), the ``name`` of its
    file, and the text of every file it names that shapes a run (``files``, by the path
    as written in the definition: schemas, allow-list files, context files).

    ``sha256`` names this content (the SHA-256 of :meth:`to_json` as canonical JSON):
    any change to any of it is another version. It is not the run's
    ``definition_sha256``, which names the parsed YAML document alone.
    """

    name: str
    text: str
    files: Mapping[str, str] = field(default_factory=dict)
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", MappingProxyType(dict(sorted(self.files.items()))))
        object.__setattr__(self, "sha256", canonical_sha256(self.to_json()))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "name": self.name,
            "text": self.text,
            "files": dict(self.files),
        }

    @classmethod
    def from_json(cls, document: Any, *, where: str) -> DefinitionSnapshot:
        """The snapshot ``document`` (as :meth:`to_json` wrote it) holds; ValueError
        saying ``where`` it came from and what was wrong otherwise."""
        if not isinstance(document, Mapping):
            raise ValueError(f"{where}: expected a stored definition (a JSON object)")
        if document.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(
                f"{where}: expected a stored definition of format {SNAPSHOT_FORMAT}, "
                f"got format {json.dumps(document.get('format'))}"
            )
        name, text, files = document.get("name"), document.get("text"), document.get("files")
        if not isinstance(name, str) or not isinstance(text, str):
            raise ValueError(f"{where}: expected the definition's name and text as strings")
        if not isinstance(files, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in files.items()
        ):
            raise ValueError(f"{where}: expected files as an object of texts by path")
        if len(files) > MAX_SNAPSHOT_FILES:
            raise ValueError(
                f"{where}: expected at most {MAX_SNAPSHOT_FILES} files, got {len(files)}"
            )
        size = sum(len(t.encode("utf-8", "surrogatepass")) for t in (text, *files.values()))
        if size > MAX_SNAPSHOT_BYTES:
            raise ValueError(
                f"{where}: expected at most {MAX_SNAPSHOT_BYTES} bytes of text, got {size}"
            )
        return cls(name=PurePosixPath(name).name or "definition.yaml", text=text, files=files)


@dataclass(frozen=True, kw_only=True, slots=True)
class FileChange:
    """One file that differs between two versions of a definition: ``change`` is
    ``changed``, ``added`` (only the newer has it) or ``removed``."""

    file: str
    change: str
    fields: tuple[str, ...] = ()
    """For the definition itself: its top-level fields that differ."""


def differences(
    old: DefinitionSnapshot,
    new: DefinitionSnapshot,
    *,
    old_document: Mapping[str, Any] | None = None,
    new_document: Mapping[str, Any] | None = None,
) -> list[FileChange]:
    """Which files differ between ``old`` and ``new``: the definition first (with the
    top-level fields that differ when both parsed documents are given), then the files
    it names, by path. Empty when they are the same version."""
    changes: list[FileChange] = []
    if old.text != new.text:
        fields: tuple[str, ...] = ()
        if old_document is not None and new_document is not None:
            keys = sorted(set(old_document) | set(new_document))
            fields = tuple(k for k in keys if old_document.get(k) != new_document.get(k))
        changes.append(
            FileChange(
                file=new.name if new.name == old.name else f"{old.name} -> {new.name}",
                change="changed" if fields or old_document is None else "comments or layout",
                fields=fields,
            )
        )
    for reference in sorted(set(old.files) | set(new.files)):
        before, after = old.files.get(reference), new.files.get(reference)
        if before == after:
            continue
        change = "added" if before is None else "removed" if after is None else "changed"
        changes.append(FileChange(file=reference, change=change))
    return changes


def describe_differences(changes: list[FileChange]) -> str:
    """``changes`` in one line, e.g. ``daily-triage.yaml changed (guardrails, sinks),
    ../schemas/item.json changed``."""
    parts = []
    for change in changes:
        fields = f" ({', '.join(change.fields)})" if change.fields else ""
        parts.append(f"{change.file} {change.change}{fields}")
    return ", ".join(parts)


def without_secrets(
    snapshot: DefinitionSnapshot, document: Mapping[str, Any]
) -> DefinitionSnapshot | None:
    """``snapshot`` as it may be stored: the credentials a URL of the definition
    (``document``, parsed) carries (its userinfo, query values named like secrets) and
    every registered secret replaced by ``REDACTED``, in the text and in every file.
    Secrets never reach the database (ADR 0005); a stored copy never builds a connector
    or a sink, so nothing it is used for needs them.

    None when a secret would survive in the parsed definition (written in a form the
    scrub does not know, such as a YAML ``\\x`` escape): then nothing is stored.
    """
    from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml
    from salvagelane.logs import (
        MIN_SECRET_LENGTH,
        redact_text,
        secret_pattern,
        url_secrets,
    )

    urls = [document.get("connector", {}).get("base_url")]
    urls += [sink.get("url") for sink in document.get("sinks", ()) if isinstance(sink, Mapping)]
    secrets = {
        secret
        for url in urls
        if isinstance(url, str)
        for secret in url_secrets(url)
        if len(secret) >= MIN_SECRET_LENGTH
    }
    pattern = secret_pattern(secrets)

    def scrub(text: str) -> str:
        # Without brackets: the URL stays one the definition schema accepts ("format": "uri").
        if pattern is not None:
            text = pattern.subn(text, STORED_REDACTED)[0]
        return redact_text(text, replacement=STORED_REDACTED)[0]

    text = scrub(snapshot.text)
    if pattern is not None and text != snapshot.text:
        try:
            parsed, _ = parse_yaml(text)
        except YamlProblem:
            return None
        if pattern.search(json.dumps(parsed, ensure_ascii=False)):
            return None
    return DefinitionSnapshot(
        name=snapshot.name,
        text=text,
        files={reference: scrub(content) for reference, content in snapshot.files.items()},
    )
