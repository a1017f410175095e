"""Framings (issue 28): items wherever the model put them, the envelope told by the schemas.

Table cases for each framing a model sends, and a property over generated reports
rendered in every framing and damaged by one edit: every intact item is kept, every
other item-level object has a quarantine record, nothing accepted is not an original.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from salvagelane.core import ItemSchema, Reason, SalvagePolicy, SalvageResult, Status, salvage
from salvagelane.core.framing import Found, Framing, envelope_without_items, scan_framed
from salvagelane.errors import ConfigurationError

ITEM = ItemSchema.compile(
    {
        "type": "object",
        "required": ["rank", "id"],
        "properties": {"rank": {"type": "integer"}, "id": {"type": "string"}},
        "additionalProperties": False,
    }
)
ENVELOPE = ItemSchema.compile(
    {
        "type": "object",
        "required": ["summary", "findings"],
        "properties": {"summary": {"type": "string"}, "findings": {"type": "array"}},
        "additionalProperties": False,
    }
)
WITH_ENVELOPE = SalvagePolicy(items_path="findings", item_schema=ITEM, envelope_schema=ENVELOPE)
ITEM_ONLY = SalvagePolicy(items_path="findings", item_schema=ITEM)

A, B, C = '{"rank": 1, "id": "A"}', '{"rank": 2, "id": "B"', '{"rank": 3, "id": "C"}'
SUMMARY = '{"summary": "two findings"}'


def kept(result: SalvageResult) -> list[str]:
    return [str(item.data["id"]) for item in result.items if isinstance(item.data, dict)]


def held(result: SalvageResult) -> list[tuple[int | None, Reason]]:
    return [(q.index, q.reason) for q in result.quarantined]


@pytest.mark.parametrize("policy", [WITH_ENVELOPE, ITEM_ONLY], ids=["envelope-schema", "item-only"])
@pytest.mark.parametrize(
    ("raw", "want_kept", "want_held", "truncated"),
    [
        # The issue's JSON Lines example: A and C kept, B quarantined.
        (f"{SUMMARY}\n{A}\n{B}\n{C}\n", ["A", "C"], [(1, Reason.MALFORMED)], False),
        # With a cut-off fifth line: that line is quarantined as truncated.
        (
            f'{SUMMARY}\n{A}\n{B}\n{C}\n{{"rank": 4, "id',
            ["A", "C"],
            [(1, Reason.MALFORMED), (3, Reason.TRUNCATED)],
            True,
        ),
        # The envelope line last instead of first.
        (f"{A}\n{B}\n{C}\n{SUMMARY}\n", ["A", "C"], [(1, Reason.MALFORMED)], False),
        # Objects back to back on one line, and pretty-printed one after the other.
        (f"{SUMMARY}{A}{C}", ["A", "C"], [], False),
        (
            '{\n  "summary": "x"\n}\n{\n  "rank": 1,\n  "id": "A"\n}\n{\n  "rank": 2,\n'
            '  "id": "B",\n}\n{\n  "rank": 3,\n  "id": "C"\n}\n',
            ["A", "C"],
            [(1, Reason.MALFORMED)],
            False,
        ),
        # An item line that lost its opening brace is held, not dropped as prose.
        (
            f'{SUMMARY}\n{A}\n"rank": 2, "id": "B"}}\n{C}\n',
            ["A", "C"],
            [(1, Reason.MALFORMED)],
            False,
        ),
    ],
    ids=["lines", "lines-cut", "envelope-last", "back-to-back", "pretty", "lost-brace"],
)
def test_top_level_values_keep_every_intact_item(
    policy: SalvagePolicy,
    raw: str,
    want_kept: list[str],
    want_held: list[tuple[int, Reason]],
    truncated: bool,
) -> None:
    result = salvage(raw, policy)
    assert result.framing == Found.LINES
    assert kept(result) == want_kept
    assert held(result) == want_held
    assert dict(result.envelope) == (
        {"summary": "two findings"} if "two" in raw else {"summary": "x"}
    )
    assert result.envelope_issues == ()
    assert result.truncated is truncated
    assert result.status is (Status.PARTIAL if want_held else Status.OK)


def test_a_bare_array_gives_its_items_and_a_missing_envelope() -> None:
    result = salvage('[{"rank": 1, "id": "A"}, {"rank": 2, "id": "B"}]', WITH_ENVELOPE)
    assert result.framing == Found.ARRAY
    assert kept(result) == ["A", "B"]
    assert dict(result.envelope) == {}  # never taken from an item
    (issue,) = result.envelope_issues
    assert issue.path == "$"
    assert issue.problem.startswith("missing: the output was a bare array of items")
    assert result.status is Status.PARTIAL


def test_a_fenced_block_per_item_keeps_them_all() -> None:
    raw = (
        "Here are today's findings.\n\n```json\n" + A + "\n```\n\nAnd the second one:\n\n"
        '```json\n{\n  "rank": 2,\n  "id": "B"\n}\n```\nThat is all.\n'
    )
    result = salvage(raw, WITH_ENVELOPE)
    assert result.framing == Found.LINES
    assert kept(result) == ["A", "B"]
    assert result.quarantined == ()
    assert [i.path for i in result.envelope_issues] == ["$"]


_C = '{"rank": 3, "id": "C"}'


@pytest.mark.parametrize(
    "raw",
    [
        f'Part one:\n```json\n{{"summary": "s", "findings": [{A}]}}\n```\n'
        f"And the rest:\n```json\n[{A.replace('1', '2').replace('A', 'B')}, {_C}]\n```\n",
        f'```json\n{{"summary": "s", "findings": [{A}]}}\n```\n'
        f'```json\n{{"findings": [{A.replace("1", "2").replace("A", "B")}, {_C}]}}\n```',
        f'```json\n{{"summary": "s", "findings": [{A}]}}\n```\n'
        f"```json\n{A.replace('1', '2').replace('A', 'B')}\n```\n```json\n{_C}\n```",
    ],
    ids=["then-an-array", "then-a-document", "then-an-item-per-block"],
)
def test_a_list_split_across_fenced_blocks_is_kept_whole(raw: str) -> None:
    for policy in (WITH_ENVELOPE, ITEM_ONLY):
        result = salvage(raw, policy)
        assert result.framing == Found.LINES
        assert kept(result) == ["A", "B", "C"]
        assert result.quarantined == ()
        assert dict(result.envelope) == {"summary": "s"}
        assert result.status is Status.OK


def test_one_fenced_report_with_an_object_after_it_stays_a_document() -> None:
    # One block: the object after it is held as stray text, as ADR 0002 rule 6 says.
    raw = f'```json\n{{"summary": "s", "findings": [{A}]}}\n```\nAlso: {_C}'
    result = salvage(raw, WITH_ENVELOPE)
    assert result.framing == Found.DOCUMENT
    assert kept(result) == ["A"]
    assert _C in [q.snippet for q in result.quarantined]


def test_an_item_alone_is_not_taken_as_the_envelope() -> None:
    result = salvage(A, WITH_ENVELOPE)
    assert kept(result) == ["A"]
    assert dict(result.envelope) == {}
    assert [i.path for i in result.envelope_issues] == ["$"]


def test_a_report_cut_before_its_items_stays_a_document() -> None:
    result = salvage('{"summary": "x", "find', WITH_ENVELOPE)
    assert result.framing == Found.DOCUMENT
    assert result.items == ()
    assert result.quarantined == ()
    assert result.status is Status.FAILED


def test_framing_document_pins_the_document_reading() -> None:
    policy = SalvagePolicy(
        items_path="findings", item_schema=ITEM, envelope_schema=ENVELOPE, framing="document"
    )
    result = salvage(f"{SUMMARY}\n{A}\n{C}\n", policy)
    assert result.framing == Found.DOCUMENT
    assert result.items == ()
    assert result.status is Status.FAILED


def test_framing_lines_reads_values_even_when_a_document_is_there() -> None:
    policy = SalvagePolicy(items_path="findings", item_schema=ITEM, framing=Framing.LINES)
    raw = '{"summary": "s", "findings": [' + A + "]}\n" + C + "\n"
    result = salvage(raw, policy)
    assert result.framing == Found.LINES
    assert kept(result) == ["A", "C"]
    assert dict(result.envelope) == {"summary": "s"}


def test_an_unknown_framing_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="framing: expected one of 'auto'"):
        SalvagePolicy(items_path="findings", framing="jsonl")


# --- the envelope is verified ---------------------------------------------------------------


def test_an_envelope_that_breaks_its_schema_is_partial_with_signals() -> None:
    raw = '{"summary": 12345, "extra": 1, "findings": [' + A + "]}"
    result = salvage(raw, WITH_ENVELOPE)
    assert kept(result) == ["A"]
    assert [(i.path, i.problem) for i in result.envelope_issues] == [
        ("$.summary", "schema at $.summary: expected string, received 12345"),
        ("$.extra", "schema at $.extra: expected no such property (not in the schema), received 1"),
    ]
    assert result.envelope_issues[0].span.text(raw) == "12345"
    assert result.status is Status.PARTIAL


def test_a_valid_envelope_is_ok_and_the_items_property_is_not_required_of_it() -> None:
    result = salvage('{"summary": "s", "findings": [' + A + "]}", WITH_ENVELOPE)
    assert result.envelope_issues == ()
    assert result.status is Status.OK


def test_a_damaged_member_is_reported_once() -> None:
    result = salvage('{"summary": "s\n, "findings": [' + A + "]}", WITH_ENVELOPE)
    assert [i.path for i in result.envelope_issues] == ["$.summary"]


@pytest.mark.parametrize(
    ("path", "schema", "want"),
    [
        (
            ("items",),
            {"required": ["s", "items"], "properties": {"s": {}, "items": {}}},
            {"required": ["s"], "properties": {"s": {}}},
        ),
        (
            ("data", "items"),
            {"properties": {"data": {"required": ["items"], "properties": {"items": {}}}}},
            {"properties": {"data": {"required": [], "properties": {}}}},
        ),
        ((), {"type": "array"}, {"type": "array"}),
    ],
)
def test_envelope_without_items(
    path: tuple[str, ...], schema: dict[str, object], want: dict[str, object]
) -> None:
    assert envelope_without_items(schema, path) == want


# --- the property ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    text: str
    items: tuple[dict[str, object], ...]
    spans: tuple[tuple[int, int], ...]


def render(items: list[dict[str, object]], *, framing: str, envelope: str) -> Rendered:
    """The items one per line, back to back, pretty one after another, or a fenced block
    each; the envelope object first, last or absent."""
    texts = [
        json.dumps(item, indent=2) if framing == "pretty" else json.dumps(item) for item in items
    ]
    head = ["```json\n" if framing == "fenced" else "" for _ in texts]
    tail = [
        "\n```\n" if framing == "fenced" else ("" if framing == "packed" else "\n") for _ in texts
    ]
    out, spans, length = [], [], 0
    summary = '{"summary": "the report"}' + ("" if framing == "packed" else "\n")
    if envelope == "first":
        out.append(summary)
        length += len(summary)
    for before, text, after in zip(head, texts, tail, strict=True):
        out.append(before + text + after)
        spans.append((length + len(before), length + len(before) + len(text)))
        length += len(before) + len(text) + len(after)
    if envelope == "last":
        out.append(summary)
    return Rendered(text="".join(out), items=tuple(items), spans=tuple(spans))


_ids = st.text(alphabet="ABCabc01 {}[]\",:'\\", max_size=6)
_items = st.lists(
    st.builds(lambda rank, ident: {"rank": rank, "id": ident}, st.integers(0, 999), _ids),
    min_size=1,
    max_size=5,
)
_edits = st.tuples(
    st.sampled_from(["cut", "delete", "insert"]),
    st.integers(0, 10**6),
    st.sampled_from(list('{}[]",:\n x')),
)


@settings(max_examples=300, deadline=None)
@given(
    items=_items,
    framing=st.sampled_from(["lines", "packed", "pretty", "fenced"]),
    envelope=st.sampled_from(["first", "last", "none"]),
    edit=_edits,
    schema=st.booleans(),
)
def test_every_framing_keeps_intact_items_and_holds_every_other_object(
    items: list[dict[str, object]],
    framing: str,
    envelope: str,
    edit: tuple[str, int, str],
    schema: bool,
) -> None:
    rendered = render(items, framing=framing, envelope=envelope)
    kind, at, char = edit
    at %= len(rendered.text) + 1
    if kind == "cut":
        raw = rendered.text[:at]
        intact = [i for i, (_, end) in enumerate(rendered.spans) if end <= at]
    elif kind == "delete":
        raw = rendered.text[:at] + rendered.text[at + 1 :]
        intact = [i for i, (s, e) in enumerate(rendered.spans) if at >= e or at < s]
    else:
        raw = rendered.text[:at] + char + rendered.text[at:]
        intact = [i for i, (s, e) in enumerate(rendered.spans) if at >= e or at <= s]
    policy = SalvagePolicy(
        items_path="findings",
        item_schema=ITEM,
        envelope_schema=ENVELOPE if schema else None,
    )
    result = salvage(raw, policy)
    # Accounting: every candidate of the framing found is kept or held, exactly once.
    candidates = scan_framed(raw, policy.items_path, framing=policy.framing, keys=policy.keys)
    indexes = sorted([i.index for i in result.items] + [q.index for q in result.quarantined])
    assert indexes == list(range(len(candidates.scan.candidates)))
    originals = [json.dumps(item, sort_keys=True) for item in rendered.items]
    accepted = [json.dumps(item.data, sort_keys=True) for item in result.items]
    # Every intact item is kept, at its own span (shifted past an edit before it).
    for i in intact:
        start, end = rendered.spans[i]
        if kind == "delete" and at < start:
            start, end = start - 1, end - 1
        elif kind == "insert" and at <= start:
            start, end = start + 1, end + 1
        assert any((item.span.start, item.span.end) == (start, end) for item in result.items), (
            raw,
            i,
        )
    # Nothing is accepted that was not an original item, unless the edit fell inside it.
    for item, text in zip(result.items, accepted, strict=True):
        if not (item.span.start <= at <= item.span.end):
            assert text in originals, raw
    # Nothing item-shaped vanishes: every line that still holds an item's member name
    # lies in an accepted item, a quarantined span, or the envelope.
    covered = [(i.span.start, i.span.end) for i in result.items]
    covered += [(q.span.start, q.span.end) for q in result.quarantined]
    for offset in _member_names(raw, '"rank"'):
        assert any(s <= offset < e for s, e in covered), (raw, offset)


def _member_names(text: str, name: str) -> list[int]:
    found, start = [], 0
    while (at := text.find(name + ":", start)) >= 0:
        found.append(at)
        start = at + 1
    return found
