"""Capturing a stored run as a regression fixture (``fixture capture``, ``quarantine export``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.numbering import item_label
from salvagelane.core.outcome import (
    MODEL_ORIGIN,
    REASK_ORIGIN,
    ItemOutcome,
    Outcome,
    QuarantineOutcome,
    repairs_from_json,
)
from salvagelane.errors import (
    InputError,
)
from salvagelane.fixtures.format import (
    CORRECTIONS_FILE,
    DEFINITION_FILE,
    EXPECTED_FILE,
    META_FILE,
    PROMPT_FILE,
    RAW_FILE,
    REASK_META_FILE,
    REASK_RAW_FILE,
    FixtureMeta,
    ReaskExchange,
    RecordedPrompt,
    json_text,
    write_fixture,
)
from salvagelane.logs import MIN_SECRET_LENGTH, secret_field_name
from salvagelane.review.dataset import approved_corrections, corrections_document
from salvagelane.vocabulary import ItemOrigin, ReviewStatus

if TYPE_CHECKING:  # the store (SQLAlchemy) is only needed to capture
    from salvagelane.store import AttemptView, RunDetail, Store

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
    corrections: int = 0
    """How many approved corrections ``corrections.json`` records (0: none written)."""


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
    a run stored before definitions were kept). ``corrections.json`` records the
    operators' approved corrections of the attempt's quarantined items, when there are
    any. Refuses a non-empty ``to`` unless
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
    files = {RAW_FILE: raw, META_FILE: json_text(meta.to_json())}
    if expected is not None:
        files[EXPECTED_FILE] = json_text(expected.to_json())
    files.update(_follow_up_files(detail, chosen))
    prompt = _recorded_prompt(chosen)
    if prompt is not None:
        files[PROMPT_FILE] = json_text(prompt.to_json())
    version = _stored_definition(store, detail.id, instruction_id)
    if version is not None:
        files[DEFINITION_FILE] = json_text(version)
    corrections = approved_corrections(store, detail, chosen.id)
    if corrections:
        files[CORRECTIONS_FILE] = json_text(corrections_document(corrections))
    _refuse_secrets(files)
    write_fixture(to, files, force=force)
    return CapturedFixture(
        path=to,
        run_id=detail.id,
        attempt=chosen.number,
        meta=meta,
        expected=expected,
        definition=None if version is None else str(version["sha256"]),
        corrections=len(corrections),
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


def _recorded_prompt(attempt: AttemptView) -> RecordedPrompt | None:
    """The prompts ``attempt`` was sent, as its stored request kept them (None for a run
    stored before requests kept their text)."""
    request = attempt.request if isinstance(attempt.request, Mapping) else {}
    system, user = request.get("system"), request.get("user")
    if not isinstance(system, str) or not isinstance(user, str):
        return None
    return RecordedPrompt(system=system, user=user)


def _follow_up_files(detail: RunDetail, chosen: AttemptView) -> dict[str, str]:
    """``reask.txt`` and ``reask.json`` when a follow-up request asked again for
    ``chosen``'s rejected items and was answered; none otherwise (a failed follow-up
    joined nothing: the replay of ``raw.txt`` alone gives the same outcome)."""
    follow_up = _follow_up(detail, chosen)
    if follow_up is None or follow_up.raw_output is None:
        return {}
    if follow_up.clipped:
        raise InputError(
            f"run {detail.id}: the follow-up (attempt {follow_up.number}) is stored clipped: "
            "the exchange cannot be a fixture"
        )
    asked = follow_up.request["reask"]
    assert isinstance(asked, Mapping)
    usage = follow_up.usage or {}
    exchange = ReaskExchange(
        raw=follow_up.raw_output,
        items=tuple(int(i) for i in asked["items"]),
        finish_reason=follow_up.finish_reason,
        native_finish_reason=follow_up.native_finish_reason,
        model=follow_up.model,
        usage={key: usage.get(key) for key in ("prompt_tokens", "completion_tokens")},
    )
    return {REASK_RAW_FILE: exchange.raw, REASK_META_FILE: json_text(exchange.meta_json())}


def _follow_up(detail: RunDetail, chosen: AttemptView) -> AttemptView | None:
    """The follow-up request that asked again for ``chosen``'s rejected items, if any."""
    for attempt in detail.attempts:
        asked = attempt.request.get("reask") if isinstance(attempt.request, Mapping) else None
        if isinstance(asked, Mapping) and asked.get("of_attempt") == chosen.number:
            return attempt
    return None


def _stored_outcome(detail: RunDetail, attempt: AttemptView) -> Outcome | None:
    """The outcome the run stored for ``attempt``, or None when it stored no report of it.

    Operator-added report items are left out: the fixture records what salvage did.
    """
    report = detail.report
    status = (attempt.outcome or {}).get("status")
    reask = report.counts.get("reask") if report is not None else None
    if isinstance(reask, Mapping) and _follow_up(detail, attempt) is not None:
        status = reask.get("status")  # the salvage's with the follow-up joined
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
            origin=REASK_ORIGIN if item.origin == ItemOrigin.REASK else MODEL_ORIGIN,
        )
        for item in sorted(report.items, key=lambda item: item.position)
        if item.origin in (ItemOrigin.MODEL, ItemOrigin.REASK) and item.source_index is not None
    )
    quarantined = tuple(
        QuarantineOutcome(index=record.source_index, reason=record.reason)
        for record in sorted(detail.quarantined, key=lambda record: record.id)
        if record.attempt_id == attempt.id and record.review_status != ReviewStatus.REASKED
    )
    envelope = report.envelope if isinstance(report.envelope, Mapping) else {}
    return Outcome(
        status=status, items=items, quarantined=quarantined, envelope_keys=tuple(envelope)
    )


def _refuse_secrets(files: Mapping[str, str]) -> None:
    from salvagelane import environment

    present = environment.secret_looking(secret_field_name, min_length=MIN_SECRET_LENGTH)
    secrets = [
        name for name, value in present.items() if any(value in text for text in files.values())
    ]
    if secrets:
        raise InputError(
            "refusing to write the fixture: the value of "
            f"{', '.join(sorted(secrets))} appears in the captured output or metadata "
            "(expected no secret in a fixture; remove it from the run's output first)"
        )
