"""Deciding between attempts: whether to ask again, what to tell the model, which to keep.

Pure functions over salvage results. The correction prompt is built only from
structured errors (reason, path, expected, received), never from the model's own
text, so a retry cannot be steered by what the previous answer contained.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from salvagelane.core.finish import FinishReason
from salvagelane.core.numbering import item_label
from salvagelane.core.records import Reason, SalvageResult, Status

_MAX_LISTED_ERRORS = 12
_MAX_RECEIVED_CHARS = 80


class RetryCause(enum.StrEnum):
    """An outcome of an attempt that may justify another one (definition ``retry.on``)."""

    NOTHING_SALVAGED = "nothing_salvaged"
    TRUNCATED = "truncated"
    PROVIDER_ERROR = "provider_error"
    OVERSIZE = "oversize"
    QUARANTINED = "quarantined"
    """Never a whole retry (:func:`retry_cause` does not give it): rejected items beside
    accepted ones are asked for again on their own (:mod:`salvagelane.core.reask`)."""


def retry_cause(result: SalvageResult, *, max_items: int | None) -> RetryCause | None:
    """Why ``result`` deserves another attempt, or None when it is good enough.

    ``oversize``: the whole output was over the byte cap and not scanned; its own
    cause, because the same request tends to bring the same flood (off unless a
    definition lists it). ``nothing_salvaged``: no item was accepted. ``truncated``: the
    output was cut and the report holds fewer items than the cap, so whatever lay past
    the cut is missing. A truncated answer that already filled the cap loses nothing a
    retry could win back.
    """
    if is_oversize(result):
        return RetryCause.OVERSIZE
    if not result.items:
        return RetryCause.NOTHING_SALVAGED
    if result.truncated and (max_items is None or len(result.items) < max_items):
        return RetryCause.TRUNCATED
    return None


def is_oversize(result: SalvageResult) -> bool:
    """Whether ``result`` is an output over the byte cap (quarantined whole, unscanned)."""
    return any(item.reason is Reason.OVERSIZE and item.index is None for item in result.quarantined)


def next_token_budget(
    current: int, *, finish_reason: FinishReason | None, factor: float, ceiling: int
) -> int:
    """The next attempt's ``max_output_tokens``: grown by ``factor`` after a ``length``
    finish (the budget was the problem), unchanged otherwise; never above ``ceiling``."""
    if finish_reason is not FinishReason.LENGTH:
        return current
    return max(current, min(ceiling, int(current * factor)))


def correction_prompt(
    result: SalvageResult | None,
    *,
    finish_reason: FinishReason | None,
    provider_error: str | None = None,
    max_items: int | None = None,
) -> str:
    """The note appended to the user prompt of the next attempt: what was wrong, where,
    and what was expected, one line per structured error."""
    lines = ["Your previous answer could not be used as it was."]
    if result is None:
        lines.append(f"The provider reported an error: {provider_error or 'unknown error'}.")
        lines.append("Answer again with the JSON report only.")
        return "\n".join(lines)
    if finish_reason is FinishReason.LENGTH or result.truncated:
        kept = len(result.items)
        lines.append(
            f"It was cut off before it ended ({kept} complete item(s) survived). "
            "Write a shorter report: fewer items and shorter text, and close every "
            "bracket and string."
        )
    if is_oversize(result):
        lines.append(
            "It was over the size limit, so none of it was read. Write a much shorter "
            "report: fewer items and shorter text."
        )
    elif not result.items_found:
        lines.append("No list of items was found where the output contract puts it.")
    listed = 0
    for item in result.quarantined:
        if listed == _MAX_LISTED_ERRORS:
            lines.append(f"- and {result.quarantined_total - listed} more rejected item(s)")
            break
        if item.reason is Reason.OVER_LIMIT:
            continue
        where = item_label(item.index) if item.index is not None else "the output"
        signal = item.error
        lines.append(
            f"- {where}, {item.reason} at {signal.path}: expected {signal.expected}, "
            f"received {_short(signal.received)}"
        )
        listed += 1
    else:
        more = sum(n for reason, n in result.folded.items() if reason != Reason.OVER_LIMIT)
        if more:
            lines.append(f"- and {more} more rejected item(s)")
    for issue in result.envelope_issues:
        lines.append(f"- envelope field {issue.path}: {issue.problem}")
    cap = f" (at most {max_items} items)" if max_items is not None else ""
    lines.append(
        f"Answer again with one complete JSON report that follows the output contract{cap}. "
        "If uncertain, emit fewer well-formed items rather than more."
    )
    return "\n".join(lines)


@dataclass(frozen=True, kw_only=True, slots=True)
class Scored:
    """One attempt's salvage result, by attempt number (1-based)."""

    number: int
    result: SalvageResult


_STATUS_RANK = {Status.OK: 2, Status.PARTIAL: 1, Status.FAILED: 0}


def best_attempt(scored: Sequence[Scored]) -> Scored | None:
    """The attempt whose report the run keeps: the most usable status, then the most
    accepted items, then the fewest quarantined, then the latest (it saw the corrections)."""
    if not scored:
        return None
    return max(
        scored,
        key=lambda s: (
            _STATUS_RANK[s.result.status],
            len(s.result.items),
            -s.result.quarantined_total,
            s.number,
        ),
    )


def wants_retry(
    trigger: RetryCause | None, *, enabled: Collection[str], attempts_left: int
) -> bool:
    """Whether ``trigger`` is one the definition retries on and attempts remain."""
    return trigger is not None and attempts_left > 0 and str(trigger) in enabled


def _short(text: str) -> str:
    return text if len(text) <= _MAX_RECEIVED_CHARS else text[: _MAX_RECEIVED_CHARS - 1] + "…"
