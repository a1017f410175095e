"""The per-item guardrail chain: a fixed pipeline of small steps.

Each step takes an item under review and returns it (possibly parsed or
normalised further) or a rejection; the first rejection quarantines the item.
The order is part of the contract (docs/adr/0001-producer-trust-boundary.md):
cheap structural checks on the raw span before any parser sees it, then the
strict parse, then shape, then meaning. ``over_limit`` runs last, over the
survivors, so an invalid item never takes a valid item's slot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from salvagelane.core.coercion import coerce
from salvagelane.core.lossless import AcceptRepairs, repair_losslessly
from salvagelane.core.records import (
    _NO_REPAIR,
    DEFAULT_MAX_QUARANTINED,
    Coercion,
    CorrectionSignal,
    JSONValue,
    Reason,
    Repair,
    SignalCode,
    new_signal,
)
from salvagelane.core.repair import repair_truncated
from salvagelane.core.scanner import Candidate, Closure
from salvagelane.core.schema import ItemSchema
from salvagelane.core.speedups import builder
from salvagelane.core.strict import Parsed, describe, parse_item
from salvagelane.errors import ConfigurationError

_UNPARSED: Any = object()  # no value yet: the chain parses the item
_ABSENT: Any = object()  # a field the item does not have
_ALLOW_LIST_PREVIEW = 12


@dataclass(frozen=True, kw_only=True, slots=True)
class Guardrails:
    """Limits and lists every item must respect. All limits are inclusive."""

    max_bytes: int = 8 * 1024 * 1024
    max_depth: int = 32
    max_string_length: int = 8192
    max_items: int | None = None
    rank_key: str | None = None
    allow_lists: Mapping[str, frozenset[str]] = field(default_factory=dict)
    coerce: bool = False
    accept_repairs: AcceptRepairs = AcceptRepairs.NONE
    snippet_chars: int = 240
    # The model decides how many candidates an output holds; each quarantined one is a
    # stored row. Past this many, the rest are only counted by reason (folded).
    max_quarantined: int = DEFAULT_MAX_QUARANTINED

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "accept_repairs", AcceptRepairs(self.accept_repairs))
        except ValueError:
            choices = ", ".join(repr(str(choice)) for choice in AcceptRepairs)
            raise ConfigurationError(
                f"guardrails: accept_repairs {self.accept_repairs!r} is not one of {choices}"
            ) from None
        for name in (
            "max_bytes",
            "max_depth",
            "max_string_length",
            "snippet_chars",
            "max_quarantined",
        ):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"guardrails: {name} must be at least 1")
        if self.max_items is not None and self.max_items < 0:
            raise ConfigurationError("guardrails: max_items must be 0 or more")
        for name, allowed in self.allow_lists.items():
            if not name or any(not part for part in name.split(".")):
                raise ConfigurationError(f"guardrails: allow-list field {name!r} is not a path")
            odd = next((value for value in allowed if type(value) is not str), None)
            if odd is not None:
                raise ConfigurationError(
                    f"guardrails: allow-list {name!r} holds {describe(odd)}; "
                    "expected only strings (an item's value is allowed only as a string)"
                )


@dataclass(frozen=True, kw_only=True, slots=True)
class Review:
    """An item moving through the chain."""

    candidate: Candidate
    text: str
    data: JSONValue = _UNPARSED
    coercions: tuple[Coercion, ...] = ()
    repairs: tuple[Repair, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejection:
    reason: Reason
    signal: CorrectionSignal
    repaired: JSONValue = _NO_REPAIR


_new_review = builder(Review, "candidate", "text", "data", "coercions", "repairs")
_new_rejection = builder(Rejection, "reason", "signal", "repaired")


def under_review(candidate: Candidate, text: str, data: JSONValue = _UNPARSED) -> Review:
    """A candidate entering the chain; ``data`` is its value when already parsed."""
    return _new_review(candidate, text, data, (), ())


@dataclass(frozen=True, kw_only=True, slots=True)
class ChainContext:
    guardrails: Guardrails
    schema: ItemSchema | None
    # False past the quarantine bound: a rejection is folded into a count, so only its
    # reason matters, and the schema's explanation (most of a rejection's cost) is skipped.
    explain: bool = True


new_context = builder(ChainContext, "guardrails", "schema", "explain")

_FOLDED_SIGNAL = CorrectionSignal(
    code="schema",
    path="$",
    expected="an item the item schema accepts",
    received="not explained: past guardrails.max_quarantined, the item is only counted",
)

Step = Callable[[Review, ChainContext], "Review | Rejection"]
"""One guardrail: pass the item on (maybe transformed) or reject it."""


_LONG_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|-?[0-9][0-9.eE+\-]*+')


def check_size(review: Review, ctx: ChainContext) -> Review | Rejection:
    """too_deep / too_long, measured on the raw span: no parser has seen it yet."""
    limits = ctx.guardrails
    if review.candidate.depth > limits.max_depth:
        return Rejection(
            reason=Reason.TOO_DEEP,
            signal=CorrectionSignal(
                code=SignalCode.TOO_DEEP,
                path="$",
                expected=f"at most {limits.max_depth} nested containers",
                received=f"{review.candidate.depth} nested containers",
            ),
        )
    longest, at = longest_token(review.text, limits.max_string_length)
    if longest > limits.max_string_length:
        return Rejection(
            reason=Reason.TOO_LONG,
            signal=CorrectionSignal(
                code=SignalCode.TOO_LONG,
                path="$",
                expected=f"strings and numbers of at most {limits.max_string_length} characters",
                received=f"{longest} characters",
                detail=f"at offset {review.candidate.span.start + at}",
            ),
        )
    return review


def longest_token(text: str, limit: int) -> tuple[int, int]:
    """Length and offset of the longest string or number token, if any exceeds ``limit``."""
    if len(text) <= limit:
        return 0, 0  # no token can be longer than the text that holds it
    best, best_at = 0, 0
    for match in _LONG_TOKEN.finditer(text):
        token = match.group()
        length = len(token)
        if token.startswith('"'):
            length = _string_length(token, limit)
        if length > best:
            best, best_at = length, match.start()
    return best, best_at


def _string_length(token: str, limit: int) -> int:
    inner = len(token) - (2 if len(token) > 1 and token.endswith('"') else 1)
    if inner <= limit or inner > 6 * limit or not token.endswith('"'):
        return inner  # escapes cannot shrink it under the limit, or it is cut off
    try:
        decoded = json.loads(token)
    except ValueError:
        return inner
    return len(decoded) if isinstance(decoded, str) else inner


def check_truncated(review: Review, ctx: ChainContext) -> Review | Rejection:
    """A cut-off item is never accepted; its repair goes to the operator."""
    if review.candidate.closure is not Closure.TRUNCATED:
        return review
    repaired = repair_truncated(review.text)
    return Rejection(
        reason=Reason.TRUNCATED,
        signal=CorrectionSignal(
            code=SignalCode.TRUNCATED,
            path="$",
            expected="a complete item",
            received="output that ends inside the item",
            detail=f"cut at offset {review.candidate.span.end}",
        ),
        repaired=_NO_REPAIR if repaired is None else repaired,
    )


def parse_strictly(review: Review, ctx: ChainContext) -> Review | Rejection:
    """malformed: strict parse of the span (or damage the scanner already saw).

    With ``accept_repairs: lossless``, a closed item whose only defects are lossless
    ones is parsed repaired, and its repairs travel with it (see ``core.lossless``);
    an item the repair cannot make parse keeps the rejection its own text earned.
    """
    candidate = review.candidate
    if review.data is not _UNPARSED and candidate.closure is Closure.CLOSED:
        return review  # parsed with the whole document, which was proven strict
    parsed = parse_item(review.text, offset=candidate.span.start)
    if (
        not isinstance(parsed, Parsed)
        and ctx.guardrails.accept_repairs is AcceptRepairs.LOSSLESS
        and (candidate.closure is Closure.CLOSED or _only_strings_damaged(candidate))
        and not candidate.stray
    ):
        fixed = repair_losslessly(review.text, offset=candidate.span.start)
        if fixed is not None:
            reparsed = parse_item(fixed.text, offset=candidate.span.start)
            if isinstance(reparsed, Parsed):
                return replace(review, data=reparsed.value, repairs=fixed.repairs)
    if candidate.closure is Closure.BROKEN or not isinstance(parsed, Parsed):
        if isinstance(parsed, Parsed) or candidate.stray:
            signal = CorrectionSignal(
                code=SignalCode.STRAY_TEXT if candidate.stray else SignalCode.DAMAGED,
                path="$",
                expected="a JSON value" if candidate.stray else "a well-formed item",
                received=describe(review.text, limit=40),
                detail=candidate.defect,
            )
        else:
            signal = parsed.signal
        return Rejection(reason=Reason.MALFORMED, signal=signal)
    # Built directly: dataclasses.replace looks the fields up on every call.
    return _new_review(candidate, review.text, parsed.value, review.coercions, review.repairs)


def _only_strings_damaged(candidate: Candidate) -> bool:
    """The scanner closed the item by its brackets and saw no damage but a string that is
    not well formed (a raw control character in it): a lossless repair may read it."""
    return candidate.closure is Closure.BROKEN and candidate.defect.startswith("string at offset")


def require_object(review: Review, ctx: ChainContext) -> Review | Rejection:
    if isinstance(review.data, dict):
        return review
    return Rejection(
        reason=Reason.NOT_OBJECT,
        signal=CorrectionSignal(
            code=SignalCode.NOT_OBJECT,
            path="$",
            expected="an object",
            received=describe(review.data),
        ),
    )


def normalise(review: Review, ctx: ChainContext) -> Review | Rejection:
    schema = ctx.schema
    if not ctx.guardrails.coerce or schema is None or schema.surely_valid(review.data):
        # An item the schema accepts has nothing to normalise: every value already has
        # a type its schema allows (and a date its format), so coerce() would change
        # nothing. Asked first because the walk costs far more than the verdict.
        return review
    data, coercions, ambiguous = coerce(review.data, schema.schema)
    if ambiguous is not None:
        # Read one way it might pass the schema: refused, with the readings, not guessed.
        return Rejection(reason=Reason.SCHEMA, signal=ambiguous)
    return replace(review, data=data, coercions=coercions)


def validate_schema(review: Review, ctx: ChainContext) -> Review | Rejection:
    if ctx.schema is None:
        return review
    if not ctx.explain:
        if ctx.schema.is_valid(review.data):
            return review
        return Rejection(reason=Reason.SCHEMA, signal=_FOLDED_SIGNAL)
    signal = ctx.schema.check(review.data)
    return review if signal is None else Rejection(reason=Reason.SCHEMA, signal=signal)


def check_allow_lists(review: Review, ctx: ChainContext) -> Review | Rejection:
    """A field's value must be a known one: invented or injected references stop here."""
    refused = first_not_allowed(review.data, ctx.guardrails.allow_lists)
    if refused is None:
        return review
    field_path, position, element = refused
    allowed = ctx.guardrails.allow_lists[field_path]
    path = "$." + field_path + ("" if position is None else f"[{position}]")
    # Values as JSON, so that the string "2" and the number 2 never read alike.
    preview = ", ".join(describe(v) for v in sorted(allowed)[:_ALLOW_LIST_PREVIEW])
    if len(allowed) > _ALLOW_LIST_PREVIEW:
        preview += ", ..."
    received = describe(element)
    if not isinstance(element, str):
        received += f" ({_JSON_TYPE_NAMES.get(type(element), 'not a string')})"
    return Rejection(
        reason=Reason.ALLOW_LIST,
        signal=CorrectionSignal(
            code=SignalCode.NOT_ALLOWED,
            path=path,
            expected=f"one of the {len(allowed)} allowed values ({preview})",
            received=received,
        ),
    )


def first_not_allowed(
    data: JSONValue, allow_lists: Mapping[str, frozenset[str]]
) -> tuple[str, int | None, JSONValue] | None:
    """The first allow-listed value ``data`` holds that is not allowed: its field, its
    position when the field holds a list (None otherwise), and the value; None if all are.

    An absent field is allowed: absence is the schema's business (``required``).
    """
    for field_path, allowed in allow_lists.items():
        found, value = lookup(data, field_path)
        if not found:
            continue
        if not isinstance(value, list):
            if isinstance(value, str) and value in allowed:
                continue
            return field_path, None, value
        for position, element in enumerate(value):
            if not (isinstance(element, str) and element in allowed):
                return field_path, position, element
    return None


_JSON_TYPE_NAMES: dict[type, str] = {
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "JSON null",
    dict: "an object",
    list: "an array",
}
"""How a received value that cannot be on an allow-list (every entry is a string) is named."""


ITEM_CHAIN: tuple[Step, ...] = (
    check_size,
    check_truncated,
    parse_strictly,
    require_object,
    normalise,
    validate_schema,
    check_allow_lists,
)


def parse_the_plain(raw: str, candidates: Sequence[Candidate], ctx: ChainContext) -> list[Any]:
    """Each candidate's strict value where the chain's first steps surely pass it
    (closed, not stray, no deeper and no longer than the limits, as the scan measured
    it) and it parses; no value otherwise, for the chain to parse and say why.

    The lenient path's values for :func:`clear_the_chain`: a broken report's intact
    items are then cleared all at once, as a valid report's are, and only the others
    run the chain (which does not parse them again).
    """
    limits = ctx.guardrails
    max_depth, max_length = limits.max_depth, limits.max_string_length
    closed, unparsed = Closure.CLOSED, _UNPARSED
    values: list[Any] = []
    for candidate in candidates:
        span = candidate.span
        if (
            candidate.closure is not closed
            or candidate.stray
            or candidate.depth > max_depth
            or span.end - span.start > max_length  # check_size: no longer token in it
        ):
            values.append(unparsed)
            continue
        parsed = parse_item(raw[span.start : span.end], offset=span.start)
        values.append(parsed.value if isinstance(parsed, Parsed) else unparsed)
    return values


def clear_the_chain(
    candidates: Sequence[Candidate], values: Sequence[JSONValue], ctx: ChainContext
) -> list[bool]:
    """Whether every step would pass each item unchanged, asked for all items at once.

    For the items of a document proven strict, parsed with it (``values``, one per
    candidate): the usual case. Each test below is the pass condition of one step,
    with the limits looked up once rather than per item; False is no verdict, and
    the chain then runs and says why.
    """
    limits = ctx.guardrails
    schema = ctx.schema
    if schema is not None and schema.fast is None:
        return [False] * len(candidates)  # validate_schema by the reference validator
    closed = Closure.CLOSED
    max_depth = limits.max_depth
    max_length = limits.max_string_length
    verdicts = [
        candidate.closure is closed  # check_truncated, parse_strictly
        and candidate.depth <= max_depth  # check_size
        # check_size: a span this short holds no longer token
        and candidate.span.end - candidate.span.start <= max_length
        and type(value) is dict  # require_object
        for candidate, value in zip(candidates, values, strict=True)
    ]
    allow_lists = limits.allow_lists
    if allow_lists and not _all_allowed(values, verdicts, allow_lists):  # check_allow_lists
        verdicts = [
            cleared and first_not_allowed(value, allow_lists) is None
            for cleared, value in zip(verdicts, values, strict=True)
        ]
    if schema is None:
        return verdicts
    batch = schema.batch  # validate_schema's verdict, for every cleared item in one call
    if batch is not None:
        pending = (
            values if all(verdicts) else [v for v, ok in zip(values, verdicts, strict=True) if ok]
        )
        try:
            if batch.is_valid(pending):
                return verdicts
        except ValueError:
            pass  # a value jsonschema-rs cannot take: asked item by item
    is_valid = schema.fast.is_valid  # item by item: which ones are not valid
    for position, cleared in enumerate(verdicts):
        if cleared:
            try:
                verdicts[position] = is_valid(values[position])
            except ValueError:
                verdicts[position] = False
    return verdicts


def _all_allowed(
    values: Sequence[JSONValue], verdicts: list[bool], allow_lists: Mapping[str, frozenset[str]]
) -> bool:
    """Whether every value still cleared (each an object) holds only allowed values in
    its allow-listed fields, asked with one set per field; False is no verdict, and each
    value is then asked alone (first_not_allowed)."""
    if any("." in field_path for field_path in allow_lists):
        return False
    # A broken report's damaged items are not cleared: the others are still asked at once.
    pending = values if all(verdicts) else [v for v, ok in zip(values, verdicts, strict=True) if ok]
    for field_path, allowed in allow_lists.items():
        try:
            seen = {value.get(field_path, _ABSENT) for value in pending}
        except TypeError:  # a list (or an object) is unhashable
            return False
        seen.discard(_ABSENT)
        if not seen <= allowed:  # every allowed value is a string (Guardrails checks)
            return False
    return True


def review_item(review: Review, ctx: ChainContext) -> Review | Rejection:
    """Run the chain; the first rejection wins."""
    for step in ITEM_CHAIN:
        outcome = step(review, ctx)
        if isinstance(outcome, Rejection):
            return outcome
        review = outcome
    return review


def select_within_limit(
    survivors: list[Review], guardrails: Guardrails
) -> tuple[list[Review], list[tuple[Review, Rejection]]]:
    """over_limit: keep the N smallest ranks (ties: order of appearance).

    ``survivors`` come in order of appearance. An item without a numeric rank ranks
    after every item with one.
    """
    kept_positions, dropped = rank_within_limit([r.data for r in survivors], guardrails)
    if kept_positions is None:
        return survivors, []
    return [survivors[p] for p in kept_positions], [(survivors[p], r) for p, r in dropped]


def rank_within_limit(
    values: Sequence[JSONValue], guardrails: Guardrails
) -> tuple[list[int] | None, list[tuple[int, Rejection]]]:
    """:func:`select_within_limit` over the survivors' values: the positions kept, in
    order (None: all of them), and each dropped position with its rejection."""
    limit = guardrails.max_items
    if limit is None or len(values) <= limit:
        return None, []

    rank_key = guardrails.rank_key
    ranks: list[JSONValue] = []  # each survivor's rank, _ABSENT where it has none
    if rank_key and "." not in rank_key:  # a survivor's data is an object (require_object)
        ranks = [v.get(rank_key, _ABSENT) if type(v) is dict else _ABSENT for v in values]
    elif rank_key:
        for value in values:
            found, rank = lookup(value, rank_key)
            ranks.append(rank if found else _ABSENT)
    else:
        ranks = [_ABSENT] * len(values)
    if rank_key:
        # Compared as they are: Python orders int and float exactly, and float() of a
        # large integer raises. The sort is stable, so ties keep the order of appearance.
        if set(map(type, ranks)) <= _NUMBER_TYPES:  # every rank a number, as usual
            by_rank = sorted(range(len(values)), key=ranks.__getitem__)
        else:
            order = [(0, rank) if type(rank) in _NUMBERS else _UNRANKED for rank in ranks]
            by_rank = sorted(range(len(values)), key=order.__getitem__)
        kept = sorted(by_rank[:limit])
    else:
        kept = list(range(limit))
    by = f"the {limit} with the smallest {rank_key}" if rank_key else f"the first {limit}"
    path = f"$.{rank_key}" if rank_key else "$"
    expected = f"at most {limit} items (kept {by})"
    kept_set = set(kept)
    # Built once per dropped item, which on a long report is half of them: no lookups.
    code, reason, make_signal, make_rejection = (
        SignalCode.OVER_LIMIT,
        Reason.OVER_LIMIT,
        new_signal,
        _new_rejection,
    )
    dropped = [
        (
            position,
            make_rejection(
                reason,
                make_signal(
                    code,
                    path,
                    expected,
                    "one item too many" if rank is _ABSENT else "rank " + describe(rank),
                    "",
                ),
                _NO_REPAIR,
            ),
        )
        for position, rank in enumerate(ranks)
        if position not in kept_set
    ]
    return kept, dropped


_NUMBERS = (int, float)  # a JSON number; bool, also an int, is not one
_NUMBER_TYPES = frozenset(_NUMBERS)
_UNRANKED = (1, 0)


def check_item_count(kept: int, guardrails: Guardrails) -> Rejection | None:
    """over_limit for one item added to a report that already holds ``kept`` items.

    An added item (an operator's correction) never displaces a kept one, whatever its
    rank: the report already went out with those.
    """
    limit = guardrails.max_items
    if limit is None or kept < limit:
        return None
    return Rejection(
        reason=Reason.OVER_LIMIT,
        signal=CorrectionSignal(
            code=SignalCode.OVER_LIMIT,
            path="$",
            expected=f"at most {limit} items in the report",
            # A count, not an item number: item numbers name items of the output.
            received=f"{kept + 1} items with this one: the report already holds {kept}",
        ),
    )


def lookup(data: JSONValue, dotted: str) -> tuple[bool, JSONValue]:
    """Follow a dotted key path into nested objects."""
    if "." not in dotted:  # the usual case: a top-level field
        if isinstance(data, dict) and dotted in data:
            return True, data[dotted]
        return False, None
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node
