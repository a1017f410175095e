"""Answers from a recorded fixture: ``raw.txt`` plus ``meta.json``, in a directory or not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError


class ReplayConnector:
    """Replays a recorded completion; the request is ignored.

    ``fixture`` is a directory holding ``raw.txt`` and an optional ``meta.json``, or the
    raw output file itself (what a definition's ``connector.fixture`` names), with an
    optional ``meta.json`` beside it. ``meta.json`` may hold ``finish_reason``,
    ``native_finish_reason``, ``usage`` (``prompt_tokens``, ``completion_tokens``) and
    ``model``.
    """

    def __init__(self, fixture: Path | str):
        path = Path(fixture)
        # A path that does not exist is taken as a directory, so the error names raw.txt.
        self.raw_path = path if path.is_file() else path / "raw.txt"
        self.fixture_dir = self.raw_path.parent

    def __repr__(self) -> str:
        return f"ReplayConnector({str(self.raw_path)!r})"

    def complete(self, request: CompletionRequest) -> Completion:
        raw_path = self.raw_path
        meta_path = self.fixture_dir / "meta.json"
        try:
            # Bytes, not text mode: the output is replayed exactly as recorded (no newline
            # translation; bytes that are not UTF-8 survive, as the store keeps them).
            text = raw_path.read_bytes().decode("utf-8", "surrogateescape")
        except OSError as exc:
            raise ConnectorError(f"{raw_path}: cannot read the recorded output: {exc}") from exc
        meta: dict[str, Any] = {}
        if meta_path.exists():
            try:
                loaded = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ConnectorError(f"{meta_path}: expected a JSON object: {exc}") from exc
            if not isinstance(loaded, dict):
                raise ConnectorError(
                    f"{meta_path}: expected a JSON object, got {type(loaded).__name__}"
                )
            meta = loaded
        native = _optional_str(meta, "native_finish_reason", meta_path)
        reported = _optional_str(meta, "finish_reason", meta_path)
        canonical = canonical_finish_reason(reported if reported is not None else native)
        usage = meta.get("usage") or {}
        if not isinstance(usage, dict):
            raise ConnectorError(f"{meta_path}: usage: expected an object")
        return Completion(
            text=text,
            finish_reason=canonical if canonical is not None else FinishReason.UNKNOWN,
            native_finish_reason=native if native is not None else reported,
            usage={
                "prompt_tokens": _optional_int(usage, "prompt_tokens"),
                "completion_tokens": _optional_int(usage, "completion_tokens"),
            },
            model=_optional_str(meta, "model", meta_path),
            request_id=None,
            latency_seconds=0.0,
            http_status=None,
        )


def _optional_str(meta: dict[str, Any], key: str, source: Path) -> str | None:
    value = meta.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConnectorError(f"{source}: {key}: expected a string, got {type(value).__name__}")


def _optional_int(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
