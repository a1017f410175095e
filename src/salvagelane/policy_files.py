"""Reading schemas and allow-lists from files: the I/O half of configuration.

Every OS or JSON error is translated here, once, into a ConfigurationError
that names the file, what was wrong and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from salvagelane.core import ItemSchema
from salvagelane.errors import (
    AllowListError,
    InputError,
    SalvagelaneError,
    SchemaError,
    not_utf8,
)


def load_json_file(path: Path, *, what: str, error: type[SalvagelaneError] = SchemaError) -> Any:
    """The JSON document in ``path`` (UTF-8); ``error`` naming ``what`` and the file when it
    cannot be read or parsed."""
    text = _read_text(path, what=what, error=error)
    return parse_json_text(text, what=what, shown=str(path), error=error)


def _read_text(path: Path, *, what: str, error: type[SalvagelaneError]) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{what} {path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path}: not UTF-8 text: {not_utf8(exc)}") from exc


def parse_json_text(
    text: str, *, what: str, shown: str, error: type[SalvagelaneError] = SchemaError
) -> Any:
    """The JSON document ``text`` holds (the file ``shown``); ``error`` otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{what} {shown}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError as exc:
        raise error(f"{what} {shown}: nested too deeply to read") from exc


def load_item_schema(path: Path, *, resources: Iterable[Path] = ()) -> ItemSchema:
    """Load and compile a JSON Schema file; ``resources`` are schemas it may $ref by $id."""
    bundled = [load_json_file(p, what="schema") for p in resources]
    return ItemSchema.compile(
        load_json_file(path, what="schema"), source=str(path), resources=bundled
    )


def load_allow_list(path: Path) -> frozenset[str]:
    """One allowed value per line; blank lines and lines starting with ``#`` are skipped."""
    text = _read_text(path, what="allow-list", error=AllowListError)
    return allow_list_values(text, shown=str(path))


def allow_list_values(text: str, *, shown: str) -> frozenset[str]:
    """The values of the allow-list ``text`` (the file ``shown``): one per line, blank
    lines and lines starting with ``#`` skipped."""
    values = frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if not values:
        raise AllowListError(f"allow-list {shown}: no values (expected one value per line)")
    return values


def read_raw(path: Path | None, stdin: Any) -> str:
    """Raw model output as text; bytes that are not UTF-8 survive as lone surrogates."""
    try:
        data: bytes = stdin.read() if path is None else path.read_bytes()
    except OSError as exc:
        raise InputError(f"input {path}: cannot read: {exc.strerror or exc}") from exc
    return data.decode("utf-8", "surrogateescape")
