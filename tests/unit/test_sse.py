"""The server-sent events parser: fields, multi-line data, comments, line endings, and
chunk boundaries falling anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane._http import (
    ServerSentEvent,
    SseEventTooLarge,
    SseParser,
    decode_utf8,
    iter_events,
)

STREAM = (
    ": a comment, ignored\n"
    "event: message_start\n"
    'data: {"type": "message_start"}\n'
    "\n"
    "data: first line\n"
    "data: second line\n"
    "id: 7\n"
    "retry: 1500\n"
    "\n"
    "event: ping\n"
    "data:no space after the colon\n"
    "\n"
)
EXPECTED = [
    ServerSentEvent(event="message_start", data='{"type": "message_start"}'),
    ServerSentEvent(event="message", data="first line\nsecond line", id="7", retry=1500),
    ServerSentEvent(event="ping", data="no space after the colon", id="7", retry=1500),
]


def test_fields_multi_line_data_and_comments() -> None:
    assert list(iter_events([STREAM])) == EXPECTED


def test_crlf_and_cr_line_endings() -> None:
    assert list(iter_events([STREAM.replace("\n", "\r\n")])) == EXPECTED
    assert list(iter_events([STREAM.replace("\n", "\r")])) == EXPECTED


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    parser = SseParser()
    assert parser.feed("data: a\r") == []
    assert parser.feed("\n\r") == []
    assert parser.feed("\n") == [ServerSentEvent(data="a")]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM) * 2), max_size=20))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    text = STREAM.replace("\n", "\r\n")
    points = sorted({min(cut, len(text)) for cut in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert list(iter_events(chunks)) == EXPECTED


def test_an_event_cut_off_by_the_end_is_not_dispatched() -> None:
    assert list(iter_events(["data: whole\n\n", "data: half"])) == [ServerSentEvent(data="whole")]
    assert list(iter_events(["data: no blank line yet\n"])) == []


def test_event_without_data_is_not_dispatched_and_its_name_resets() -> None:
    events = list(iter_events(["event: lonely\n\n", "data: x\n\n"]))
    assert events == [ServerSentEvent(event="message", data="x")]


def test_field_without_colon_and_unknown_fields() -> None:
    events = list(iter_events(["data\n", "foo: bar\n", "retry: soon\n", "\n"]))
    assert events == [ServerSentEvent(data="")]


def test_leading_byte_order_mark_is_dropped() -> None:
    assert list(iter_events(["\ufeffdata: x\n\n"])) == [ServerSentEvent(data="x")]


def test_openai_done_marker_is_plain_data() -> None:
    assert list(iter_events(["data: [DONE]\n\n"])) == [ServerSentEvent(data="[DONE]")]


def test_utf8_split_across_byte_chunks() -> None:
    raw = "data: caf\u00e9 \u2713\n\n".encode()
    chunks = [raw[i : i + 1] for i in range(len(raw))]
    assert list(iter_events(decode_utf8(chunks))) == [ServerSentEvent(data="caf\u00e9 \u2713")]


def test_an_event_within_the_limit_passes_and_a_longer_one_is_refused() -> None:
    fits = "data: " + "a" * 40 + "\ndata: " + "b" * 40 + "\n\n"
    assert list(iter_events([fits], max_event_chars=82)) == [
        ServerSentEvent(data="a" * 40 + "\n" + "b" * 40)
    ]
    with pytest.raises(SseEventTooLarge, match="exceeds 81 characters"):
        list(iter_events([fits], max_event_chars=81))


def test_a_line_that_never_ends_is_refused_before_it_fills_memory() -> None:
    parser = SseParser(max_event_chars=1000)
    parser.feed("data: " + "x" * 900)
    with pytest.raises(SseEventTooLarge):
        parser.feed("x" * 200)
