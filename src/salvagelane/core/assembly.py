"""Salvage, the core's entry point: scan, run the guardrails over every candidate, and
assemble the result (the report assembly).

Pure: text and a policy in, a ``SalvageResult`` out. No I/O, no clock, no
environment, and it never raises on any ``str``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from salvagelane.core import lexis
from salvagelane.core.finish import FinishReason, canonical_finish_reason
from salvagelane.core.framing import (
    Found,
    Framing,
    Keys,
    envelope_without_items,
    scan_framed,
    schema_keys,
)
from salvagelane.core.guardrails import (
    ChainContext,
    Guardrails,
    Rejection,
    Review,
    check_item_count,
    check_size,
    clear_the_chain,
    new_context,
    parse_the_plain,
    rank_within_limit,
    review_item,
    select_within_limit,
    under_review,
)
from salvagelane.core.records import (
    AcceptedItem,
    CorrectionSignal,
    EnvelopeIssue,
    JSONValue,
    QuarantinedItem,
    Reason,
    SalvageResult,
    SignalCode,
    Span,
    new_accepted,
    new_quarantined,
    new_result,
)
from salvagelane.core.scanner import (
    Candidate,
    Closure,
    EnvelopeField,
    ItemsPath,
    ScanResult,
    bracket_extent,
)
from salvagelane.core.schema import ItemSchema
from salvagelane.core.strict import (
    Parsed,
    is_strict_document,
    member_path,
    new_parsed,
    parse_item,
    read_items,
    read_strict_document,
)
from salvagelane.errors import ConfigurationError, ItemsPathError


@dataclass(frozen=True, kw_only=True, slots=True, init=False)
class SalvagePolicy:
    """What a report must look like: where its items are, their schema, the limits.

    ``items_path`` is the dotted path as a definition writes it (``"data.items"``) or the
    keys themselves (``("data", "items")``, for a key that holds a dot); ``()``, the
    default, when the report is the array itself.
    """

    items_path: ItemsPath
    item_schema: ItemSchema | None
    guardrails: Guardrails
    envelope_schema: ItemSchema | None
    framing: Framing
    envelope_check: ItemSchema | None  # the envelope schema without the items property
    keys: Keys  # member names that tell the envelope from an item

    # A hand-written __init__ so that the field stays a tuple of keys for every reader
    # while callers may pass the dotted string: a bare str is a Sequence[str] too, and
    # taken as one would be a path of one-character keys that silently finds nothing.
    def __init__(
        self,
        *,
        items_path: str | Sequence[str] = (),
        item_schema: ItemSchema | None = None,
        guardrails: Guardrails | None = None,
        envelope_schema: ItemSchema | None = None,
        framing: Framing | str = Framing.AUTO,
    ) -> None:
        path = _items_path(items_path)
        object.__setattr__(self, "items_path", path)
        object.__setattr__(self, "item_schema", item_schema)
        object.__setattr__(self, "guardrails", Guardrails() if guardrails is None else guardrails)
        object.__setattr__(self, "envelope_schema", envelope_schema)
        object.__setattr__(self, "framing", _framing(framing))
        object.__setattr__(
            self,
            "envelope_check",
            None
            if envelope_schema is None or not path
            else envelope_schema.narrowed(envelope_without_items(envelope_schema.schema, path)),
        )
        object.__setattr__(
            self,
            "keys",
            schema_keys(
                None if envelope_schema is None else envelope_schema.schema,
                None if item_schema is None else item_schema.schema,
                path,
            ),
        )


def _framing(given: Framing | str) -> Framing:
    try:
        return Framing(given)
    except ValueError:
        choices = ", ".join(repr(f.value) for f in Framing)
        raise ConfigurationError(f"framing: expected one of {choices}, got {given!r}") from None


def _items_path(given: object) -> ItemsPath:
    if isinstance(given, str):
        keys = tuple(given.split("."))
        if any(not key for key in keys):
            problem = "no key at all" if not given else "an empty key before, between or after dots"
            raise ItemsPathError(
                f"items_path {given!r}: {problem}; expected keys joined by single dots, "
                'e.g. "data.items", or items_path=() when the report is the array itself'
            )
        return keys
    if isinstance(given, Sequence) and all(isinstance(key, str) for key in given):
        return tuple(given)
    raise ItemsPathError(
        f'items_path: expected a dotted string such as "data.items" or a sequence of '
        f'keys such as ("data", "items"), got {given!r}'
    )


def salvage(raw: str, policy: SalvagePolicy, *, finish_reason: str | None = None) -> SalvageResult:
    """Salvage every intact item of ``raw``; quarantine every rejected candidate."""
    finish = canonical_finish_reason(finish_reason)
    finish_text = None if finish is None else str(finish)
    limits = policy.guardrails
    size = bytes_over_cap(raw, limits.max_bytes)
    if size is not None:
        return _oversize(raw, size, limits, finish_text)

    verdict: bool | None = None
    document: JSONValue | None = None
    values: list[JSONValue] | None = None
    framed = scan_framed(raw, policy.items_path, framing=policy.framing, keys=policy.keys)
    scanned = framed.scan
    if framed.strict:
        # A valid report is scanned in the pass that proves it strict, and parsed once,
        # not item by item (the values are the same). Wrapped in prose or a fence, the
        # report is valid and the output is not.
        report = framed.report
        verdict = report is None
        text = raw if report is None else raw[report.start : report.end]
        document, values = read_items(text, scanned.items_path, len(scanned.candidates))
    elif framed.found is Found.DOCUMENT and _scan_is_clean(raw, scanned):
        verdict, document, values = read_strict_document(
            raw, scanned.items_path, len(scanned.candidates)
        )
    ctx = new_context(limits, policy.item_schema, True)
    candidates = scanned.candidates
    if values is None:
        # Broken output: each intact item is parsed on its own, then all are cleared at
        # once as a valid report's are, from what the scan measured (depth, span).
        values = parse_the_plain(raw, candidates, ctx)
    cleared = clear_the_chain(candidates, values, ctx)
    if all(cleared):
        accepted, rejected = _keep_cleared(candidates, values, limits)
    else:
        accepted, rejected = _judge_each(raw, candidates, values, cleared, ctx)

    envelope, issues = _assemble_envelope(raw, scanned.envelope, ctx, document)
    if framed.no_envelope:
        issues.append(_missing_envelope(framed.found))
    elif policy.envelope_check is not None and scanned.items_found:
        issues.extend(_envelope_violations(envelope, issues, scanned, policy.envelope_check))
    recorded, folded = _fold(rejected, limits.max_quarantined)
    return new_result(
        verdict if verdict is not None else _document_valid(raw, scanned),
        scanned.truncated or finish is FinishReason.LENGTH,
        scanned.items_found,
        envelope,
        accepted,
        _quarantined(raw, recorded, limits),
        tuple(issues),
        finish_text,
        _notes(scanned, framed.found),
        str(framed.found),
        folded,
    )


def _missing_envelope(found: Found) -> EnvelopeIssue:
    shape = "a bare array of items" if found is Found.ARRAY else "top-level item objects"
    return EnvelopeIssue(
        path="$",
        problem=f"missing: the output was {shape}, with no envelope object; "
        "no item is taken as the envelope",
        span=Span(start=0, end=0),
    )


def _envelope_violations(
    envelope: dict[str, JSONValue],
    issues: Sequence[EnvelopeIssue],
    scanned: ScanResult,
    check: ItemSchema,
) -> list[EnvelopeIssue]:
    """Each way the recovered envelope breaks its schema (the items excluded), with its
    correction signal; a member already reported as damaged is not reported again."""
    damaged = {issue.path for issue in issues}
    spans = {"$." + ".".join(member.path): member.span for member in scanned.envelope}
    root = scanned.root if scanned.root is not None else Span(start=0, end=0)
    found = []
    for signal in check.violations(envelope):
        where = _member_of(signal.path)
        if where in damaged:
            continue
        found.append(
            EnvelopeIssue(
                path=signal.path,
                problem=signal.message("schema"),
                span=spans.get(where, root),
            )
        )
    return found


def _member_of(path: str) -> str:
    """``$.summary`` of ``$.summary`` or ``$.summary.text[0]``: the top-level member."""
    rest = path[2:] if path.startswith("$.") else ""
    cut = min((i for i in (rest.find("."), rest.find("[")) if i >= 0), default=len(rest))
    return "$." + rest[:cut] if rest else "$"


def _keep_cleared(
    candidates: Sequence[Candidate], values: Sequence[JSONValue], limits: Guardrails
) -> tuple[tuple[AcceptedItem, ...], list[tuple[Candidate, Rejection]]]:
    """Every item passes unchanged, as on most valid reports: ranked for ``max_items``
    from its value, with no chain and no review."""
    kept_positions, dropped = rank_within_limit(values, limits)
    accepted = tuple(
        new_accepted(candidates[p].index, values[p], candidates[p].span, (), ())
        for p in (range(len(candidates)) if kept_positions is None else kept_positions)
    )
    return accepted, [(candidates[p], rejection) for p, rejection in dropped]


def _judge_each(
    raw: str,
    candidates: Sequence[Candidate],
    values: Sequence[JSONValue] | None,
    cleared: list[bool] | None,
    ctx: ChainContext,
) -> tuple[tuple[AcceptedItem, ...], list[tuple[Candidate, Rejection]]]:
    """The chain over each candidate not cleared (all of them without ``values``), then
    ``max_items`` over the survivors; the rejected in the candidates' order."""
    survivors: list[Review] = []
    rejected: list[tuple[Candidate, Rejection]] = []
    bound = ctx.guardrails.max_quarantined
    for position, candidate in enumerate(candidates):
        if ctx.explain and len(rejected) == bound:
            # The rest of the rejected will be folded (_fold): each needs its reason only.
            ctx = new_context(ctx.guardrails, ctx.schema, False)
        span = candidate.span
        text = raw[span.start : span.end]
        if values is None or cleared is None:
            review = under_review(candidate, text)
        else:
            review = under_review(candidate, text, values[position])
            if cleared[position]:
                survivors.append(review)
                continue
        outcome = review_item(review, ctx)
        if isinstance(outcome, Rejection):
            rejected.append((candidate, outcome))
        else:
            survivors.append(outcome)
    kept, over_limit = select_within_limit(survivors, ctx.guardrails)
    # Both lists come in the candidates' order: only a mix of the two needs a sort.
    over = [(review.candidate, rejection) for review, rejection in over_limit]
    if rejected and over:
        rejected.extend(over)
        rejected.sort(key=lambda pair: pair[0].index)
    elif over:
        rejected = over
    accepted = tuple(
        new_accepted(r.candidate.index, r.data, r.candidate.span, r.coercions, r.repairs)
        for r in kept
    )
    return accepted, rejected


def check_item(
    text: str, policy: SalvagePolicy, *, kept: int = 0, index: int = 0
) -> AcceptedItem | QuarantinedItem:
    """Judge one item's text (an operator's correction) as a model's item is judged.

    The byte cap, then the same chain :func:`salvage` runs over every candidate (size,
    truncation, strict parse, object, coercion, schema, allow-lists), then the item
    count: ``kept`` items are already in the report. ``index`` is the item's position
    as the result reports it; spans are offsets into ``text``. Pure; never raises.
    """
    limits = policy.guardrails
    size = bytes_over_cap(text, limits.max_bytes)
    if size is not None:
        return replace(_oversize(text, size, limits, None).quarantined[0], index=index)
    start = len(text) - len(text.lstrip(lexis.WHITESPACE))
    end = max(start, len(text.rstrip(lexis.WHITESPACE)))
    closure, depth = Closure.CLOSED, 0
    if text[start : start + 1] in ("{", "["):
        # Text after the value is left in the span: the strict parse reports it.
        _, closure, depth = bracket_extent(text, start)
    candidate = Candidate(
        index=index, span=Span(start=start, end=end), closure=closure, depth=depth
    )
    ctx = ChainContext(guardrails=limits, schema=policy.item_schema)
    outcome = review_item(Review(candidate=candidate, text=candidate.span.text(text)), ctx)
    if isinstance(outcome, Rejection):
        return _quarantine(text, candidate, outcome, limits)
    over = check_item_count(kept, limits)
    if over is not None:
        return _quarantine(text, candidate, over, limits)
    return AcceptedItem(
        index=index,
        data=outcome.data,
        span=candidate.span,
        coercions=outcome.coercions,
        repairs=outcome.repairs,
    )


def bytes_over_cap(raw: str, cap: int) -> int | None:
    """The UTF-8 size of ``raw`` if it exceeds ``cap``, else None.

    Encodes only when the character count cannot decide: every character is
    one to four bytes. Past the cap by characters alone, the count is returned
    as a lower bound.
    """
    if len(raw) > cap:
        return len(raw)
    if len(raw) * 4 <= cap:
        return None
    size = len(raw.encode("utf-8", "surrogatepass"))
    return size if size > cap else None


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _oversize(raw: str, size: int, limits: Guardrails, finish: str | None) -> SalvageResult:
    record = QuarantinedItem(
        index=None,
        reason=Reason.OVERSIZE,
        error=CorrectionSignal(
            code=SignalCode.OVERSIZE,
            path="$",
            expected=f"at most {limits.max_bytes} bytes of output",
            received=f"at least {size} bytes" if len(raw) > limits.max_bytes else f"{size} bytes",
            detail="nothing was scanned",
        ),
        span=Span(start=0, end=len(raw)),
        snippet=raw[: limits.snippet_chars],
        sha256=sha256_of(raw),
    )
    return SalvageResult(
        document_valid=False,
        truncated=finish == FinishReason.LENGTH,
        items_found=False,
        envelope={},
        items=(),
        quarantined=(record,),
        finish_reason=finish,
        notes=("output over the byte cap: not scanned, document validity not checked",),
    )


def _fold(
    rejected: list[tuple[Candidate, Rejection]], bound: int
) -> tuple[list[tuple[Candidate, Rejection]], dict[str, int]]:
    """The first ``bound`` rejected candidates, in the candidates' order, and the rest
    counted by reason: the model chooses how many candidates there are, and each
    record is a stored row, so past the bound they are folded into a count (the raw
    output still holds every one)."""
    if len(rejected) <= bound:
        return rejected, {}
    folded: dict[str, int] = {}
    for _, rejection in rejected[bound:]:
        reason = str(rejection.reason)
        folded[reason] = folded.get(reason, 0) + 1
    return rejected[:bound], folded


def _quarantined(
    raw: str, rejected: list[tuple[Candidate, Rejection]], limits: Guardrails
) -> tuple[QuarantinedItem, ...]:
    """A record per rejected candidate: its reason, signal and repair, with the
    provenance an operator reviews it by (span, snippet, hash of its text)."""
    snippet_chars = limits.snippet_chars
    records = []
    for candidate, rejection in rejected:
        span = candidate.span
        text = raw[span.start : span.end]
        records.append(
            new_quarantined(
                candidate.index,
                rejection.reason,
                rejection.signal,
                span,
                text[:snippet_chars],
                sha256_of(text),
                rejection.repaired,
            )
        )
    return tuple(records)


def _quarantine(
    raw: str, candidate: Candidate, rejection: Rejection, limits: Guardrails
) -> QuarantinedItem:
    return _quarantined(raw, [(candidate, rejection)], limits)[0]


_UNUSABLE_KEY = re.compile("[\x00\ud800-\udfff]")
"""A character no consumer of a report takes in a member name."""


def _assemble_envelope(
    raw: str,
    fields: tuple[EnvelopeField, ...],
    ctx: ChainContext,
    document: JSONValue | None = None,
) -> tuple[dict[str, JSONValue], list[EnvelopeIssue]]:
    """Every intact envelope member, nested as in the document; every other one as an issue.

    ``document`` is the whole text parsed, when it was proven strict: a member's value
    is then taken from it rather than parsed again (the values are the same).
    """
    envelope: dict[str, JSONValue] = {}
    issues: list[EnvelopeIssue] = []
    # Counted by hand: a Counter costs more than the one or two members most envelopes hold.
    occurrences: dict[tuple[str, ...], int] = {}
    for member in fields:
        occurrences[member.path] = occurrences.get(member.path, 0) + 1
    reported_duplicates: set[tuple[str, ...]] = set()
    for member in fields:
        if any(_UNUSABLE_KEY.search(key) for key in member.path):
            # Kept, it would make the report undeliverable: no UTF-8 encoder, JSON sink
            # or database text column takes a lone surrogate, and NUL ends C strings.
            where = "$"
            for key in member.path:
                where = member_path(where, key)  # JSON-escaped: the path itself is safe
            issues.append(
                EnvelopeIssue(
                    path=where,
                    problem="the member's name holds a NUL or a lone surrogate: not taken",
                    span=member.span,
                )
            )
            continue
        problem = _envelope_problem(raw, member, occurrences[member.path], ctx, document)
        if isinstance(problem, str):
            if occurrences[member.path] > 1:
                if member.path in reported_duplicates:
                    continue
                reported_duplicates.add(member.path)
            where = "$." + ".".join(member.path)
            issues.append(EnvelopeIssue(path=where, problem=problem, span=member.span))
            continue
        node = envelope
        for key in member.path[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[member.path[-1]] = problem.value
    return envelope, issues


def _envelope_problem(
    raw: str, member: EnvelopeField, occurrences: int, ctx: ChainContext, document: JSONValue
) -> str | Parsed:
    if occurrences > 1:
        return "duplicate key: no occurrence is taken as the value"
    if member.conflict:
        return member.conflict
    if member.closure is Closure.TRUNCATED:
        return "cut off by the end of the output"
    if member.closure is Closure.BROKEN:
        return member.defect or "damaged"
    limits = ctx.guardrails
    if (
        document is not None
        and member.depth <= limits.max_depth
        and member.span.end - member.span.start <= limits.max_string_length
    ):
        # check_size's pass condition, and the value the strict parse of the span gives.
        node = document
        for key in member.path:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            return new_parsed(node)
    text = member.span.text(raw)
    as_candidate = Candidate(index=-1, span=member.span, closure=member.closure, depth=member.depth)
    sized = check_size(Review(candidate=as_candidate, text=text), ctx)
    if isinstance(sized, Rejection):
        return sized.signal.message(sized.reason)
    parsed = parse_item(text, offset=member.span.start)
    if not isinstance(parsed, Parsed):
        return parsed.signal.message(Reason.MALFORMED)
    return parsed


def _document_valid(raw: str, scanned: ScanResult) -> bool:
    """Strict validity, without a second pass when the scan already proves the answer.

    Only when the scanned root starts the document: the scanner picks its root
    by a heuristic, and a root found inside other text (a nested array, a
    string) says nothing about the document. When it does start the document,
    every anomaly, truncation or damaged value the scanner reports is something
    a valid document cannot contain.
    """
    root = scanned.root
    if root is None or raw[: root.start].strip(lexis.WHITESPACE):
        return is_strict_document(raw)
    if not _scan_is_clean(raw, scanned):
        return False
    levels = len(scanned.items_path)
    depth = max(
        [levels + 1 + c.depth for c in scanned.candidates]
        + [len(f.path) + f.depth for f in scanned.envelope]
        + [levels + 1 if scanned.container is not None else 1]
    )
    return is_strict_document(raw, depth=depth)


def _scan_is_clean(raw: str, scanned: ScanResult) -> bool:
    """Nothing in the scan a valid document cannot hold, its root starting the text."""
    root = scanned.root
    return not (
        root is None
        or raw[: root.start].strip(lexis.WHITESPACE)
        or scanned.truncated
        or scanned.anomalies
        or any(not c.complete for c in scanned.candidates)
        or any(f.closure is not Closure.CLOSED for f in scanned.envelope)
    )


def _notes(scanned: ScanResult, found: Found = Found.DOCUMENT) -> tuple[str, ...]:
    notes = [f"{a.kind.replace('_', ' ')} at offset {a.span.start}" for a in scanned.anomalies]
    if not scanned.items_found:
        path = ".".join(scanned.items_path)
        notes.append(
            f"items array {path!r} not found" if path else "no JSON array found in the output"
        )
    elif not scanned.container_closed:
        notes.append(
            "items array not closed"
            if found is Found.DOCUMENT
            else "output cut off inside its last value"
        )
    return tuple(notes)
