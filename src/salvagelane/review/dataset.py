"""Reviewed quarantined items as data: ``salvagelane quarantine export --format jsonl``.

Each reviewed item becomes one JSON line, a correction pair: the quarantined text as
the model wrote it (its span of the attempt's raw output, else the stored snippet), the
reason and the correction signal salvage recorded, and the operator's decision with the
item an approval put into the report. ``schemas/quarantine-export.schema.json`` documents
a line (shipped in the package as ``salvagelane/quarantine-export.schema.json``), and
every line is validated against it before it is written: one that does not validate is
a bug (:class:`~salvagelane.errors.InternalError`), never written.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from salvagelane.errors import InputError, InternalError
from salvagelane.policy_files import load_json_file
from salvagelane.vocabulary import ReviewAction, ReviewStatus

if TYPE_CHECKING:  # the store (SQLAlchemy) is loaded by the caller that has one
    from salvagelane.store import QuarantineFilter, ReviewedItem, RunDetail, Store

EXPORT_FORMAT = 1
"""The ``format`` of a line; a change that is not backward compatible gets a new one."""
SCHEMA_NAME = "quarantine-export.schema.json"
PAGE = 100
"""Items read from the store per transaction."""
_SIGNAL_KEYS = ("code", "path", "expected", "received", "detail", "message")


def export_schema_path() -> Path:
    """The line schema: the package's copy in a built wheel, else the checkout's."""
    packaged = Path(__file__).parents[1] / SCHEMA_NAME
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "schemas" / SCHEMA_NAME


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = load_json_file(
        export_schema_path(), what="quarantine export schema", error=InternalError
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def export_lines(
    store: Store, where: QuarantineFilter, statuses: Collection[ReviewStatus]
) -> Iterator[str]:
    """The JSON lines (without their newline) of the reviewed items ``where`` selects
    whose status is one of ``statuses``, by id ascending, each validated against the
    line schema; read a page at a time."""
    after = 0
    while True:
        page = store.quarantine.reviewed_items(where, statuses, after_id=after, limit=PAGE)
        for reviewed in page:
            yield line_text(export_line(reviewed))
        if len(page) < PAGE:
            return
        after = page[-1].item.id


def approved_corrections(store: Store, run: RunDetail, attempt_id: str) -> list[dict[str, Any]]:
    """The export lines of the approved items of attempt ``attempt_id`` of ``run``, by id:
    what a fixture captured after an approval records of the operator's fix."""
    from salvagelane.store import ReviewedItem

    lines = []
    for held in sorted(run.quarantined, key=lambda held: held.id):
        if held.attempt_id != attempt_id or held.review_status != ReviewStatus.APPROVED:
            continue
        detail = store.quarantine.get_quarantine(held.id)
        approvals = [r for r in detail.reviews if r.action == ReviewAction.APPROVE]
        reviewed = ReviewedItem(
            item=detail,
            raw_span=detail.raw_span,
            definition_version=run.definition_version,
            decision=approvals[-1] if approvals else None,
        )
        lines.append(export_line(reviewed))
    return lines


def corrections_document(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``corrections.json`` of a fixture: its ``format`` and the export lines."""
    return {"format": EXPORT_FORMAT, "corrections": list(lines)}


def export_line(reviewed: ReviewedItem) -> dict[str, Any]:
    """``reviewed`` as a line of the export, validated (InternalError when it is not)."""
    item, decision = reviewed.item, reviewed.decision
    approved = item.review_status == ReviewStatus.APPROVED
    after: Mapping[str, Any] = (
        decision.after if decision is not None and isinstance(decision.after, Mapping) else {}
    )
    if approved and "item" not in after:
        raise InternalError(
            f"quarantined item #{item.id} is approved, but its audit trail has no approval "
            "holding the item it put into the report"
        )
    if item.reviewed_by is None or item.reviewed_at is None:
        raise InternalError(f"quarantined item #{item.id} is {item.review_status}, by no one")
    if reviewed.raw_span is not None:
        raw_text, raw_from = reviewed.raw_span, "raw_output"
    elif item.snippet is not None:
        raw_text, raw_from = item.snippet, "snippet"
    else:
        raw_text, raw_from = None, None
    provenance = item.provenance
    line = {
        "format": EXPORT_FORMAT,
        "decision": str(item.review_status),
        "quarantine_id": item.id,
        "run_id": item.run_id,
        "instruction_id": item.instruction_id,
        "attempt": item.attempt_number,
        "source_index": item.source_index,
        "reason": item.reason,
        "raw_text": raw_text,
        "raw_from": raw_from,
        "span_start": item.span_start,
        "span_end": item.span_end,
        "sha256": item.sha256,
        "correction_signal": {
            key: str(item.error[key]) for key in _SIGNAL_KEYS if item.error.get(key) is not None
        },
        "reask": _reask(item.error.get("reask")),
        "repaired_candidate": item.repaired,
        "corrected_item": after.get("item") if approved else None,
        "approved_with": (
            {
                "definition_sha256": after.get("definition_sha256"),
                "definition_version": after.get("definition_version"),
                "use_current": after.get("use_current"),
            }
            if approved
            else None
        ),
        "model": provenance.get("model"),
        "definition_sha256": provenance.get("definition_sha256"),
        "definition_version": reviewed.definition_version,
        "reviewed_by": item.reviewed_by,
        "reviewed_at": item.reviewed_at.isoformat(),
        "review_note": item.review_note,
        "quarantined_at": item.created_at.isoformat(),
    }
    _validate(line)
    return line


def _reask(stored: Any) -> dict[str, Any] | None:
    """The follow-up's signals stored beside the item's own (``error.reask``), or None."""
    if not isinstance(stored, Mapping):
        return None
    signals = stored.get("signals")
    return {
        "attempt": stored.get("attempt"),
        "signals": [
            {
                key: str(signal[key])
                for key in ("reason", *_SIGNAL_KEYS)
                if signal.get(key) is not None
            }
            for signal in (signals if isinstance(signals, list) else [])
            if isinstance(signal, Mapping)
        ],
    }


def _validate(line: Mapping[str, Any]) -> None:
    errors = sorted(_validator().iter_errors(line), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
        raise InternalError(
            f"quarantined item #{line.get('quarantine_id')}: its export line does not match "
            f"{SCHEMA_NAME} at ${at}: {first.message}; nothing of it was written"
        )


def line_text(line: Mapping[str, Any]) -> str:
    """One line of JSON (UTF-8; a lone surrogate from the model's text escaped)."""
    text = json.dumps(line, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(line, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text


def write_lines(path: Path, lines: Iterator[str]) -> int:
    """Write ``lines`` (one per line) to the file ``path``, whole or not at all: into a
    new file beside it, synced, then renamed over it. Returns how many; InputError when
    it cannot be written. An error while the lines are made leaves ``path`` as it was."""
    target = Path(os.path.realpath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    count = 0
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            for text in lines:
                stream.write(text + "\n")
                count += 1
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count
