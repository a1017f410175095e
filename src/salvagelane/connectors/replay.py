"""Answers from a recorded fixture: ``raw.txt`` plus ``meta.json``, in a directory or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from salvagelane.connectors.base import Completion, CompletionRequest
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.errors import ConnectorError, InputError
from salvagelane.loading import load_json_file, read_raw


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
        meta_path = self.fixture_dir / "meta.json"
        try:
            # Exactly as recorded: no newline translation, and bytes that are not UTF-8
            # survive, as the store keeps them.
            text = read_raw(self.raw_path, None)
            meta = read_call_meta(meta_path) if meta_path.exists() else {"usage": {}}
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
    document = load_json_file(path, what="fixture file", error=InputError)
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
