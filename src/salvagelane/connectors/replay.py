"""Answers from a recorded fixture: ``raw.txt`` plus ``meta.json``, in a directory or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.errors import ConnectorError, InputError
from salvagelane.fixtures.files import (
    read_call_meta,
    read_fixture_text,
    recorded_finish_reason,
)


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


def _optional_int(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
