"""The pure parts of the review flow (issue 33): the reviewers file's lines, who a token
signs in as, and the item schema's fields the correction editor lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.errors import ConfigurationError
from salvagelane.ui.reviewers import TOKEN, parse_reviewers, token_digest
from salvagelane.ui.security import Access
from salvagelane.ui.views import describe_filter, schema_fields

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


def test_a_reviewers_file_names_each_reviewer_and_keeps_only_digests() -> None:
    text = f"# the team\n\nalice:{ALICE}\n  Bob Smith : {BOB}  \n"

    found = parse_reviewers(text, source="r.txt")

    assert [r.name for r in found] == ["alice", "Bob Smith"]
    assert [r.digest for r in found] == [token_digest(ALICE), token_digest(BOB)]
    assert all(ALICE not in repr(r) and BOB not in repr(r) for r in found)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "r.txt: expected at least one name:token line, found none"),
        ("# only a comment\n", "expected at least one name:token line"),
        (f"alice {ALICE}", "r.txt, line 1: expected name:token (the line has no colon)"),
        (f":{ALICE}", "line 1: expected a reviewer name of 1 to 64"),
        (f"-alice:{ALICE}", "line 1: expected a reviewer name"),
        (f"al\x1bice:{ALICE}", "line 1: expected a reviewer name"),
        (f"{'a' * 65}:{ALICE}", "line 1: expected a reviewer name"),
        ("alice:short", "line 1: the token of alice is not 16 to 256 URL-safe characters"),
        ("alice:" + "x" * 257, "the token of alice is not 16 to 256"),
        ("alice:token with spaces 0123456789", "the token of alice is not"),
        ("alice:token&with=query0123456789", "the token of alice is not"),
        (f"alice:{ALICE}\nAlice:{BOB}", "line 2: reviewer Alice is named again (first on line 1)"),
        (f"alice:{ALICE}\n\nbob:{ALICE}", "line 3: the token of bob is the one of line 1"),
    ],
)
def test_a_reviewers_file_that_cannot_be_used_says_where(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_reviewers(text, source="r.txt")
    assert message in str(raised.value)
    assert ALICE not in str(raised.value)  # never a token, even a misplaced one


@given(st.from_regex(TOKEN, fullmatch=True), st.text(min_size=1, max_size=40))
def test_only_a_reviewers_own_token_signs_them_in(token: str, other: str) -> None:
    [alice] = parse_reviewers(f"alice:{token}", source="r")
    access = Access(loopback=True, reviewers=(alice,), token="")

    signed = access.signed_with(token)

    assert signed is not None
    assert signed.reviewer == "alice"
    assert signed.csrf != token
    assert token not in signed.csrf
    if other != token:
        assert access.signed_with(other) is None
    assert access.signed_with("") is None


def test_reviewers_have_csrf_tokens_of_their_own_and_the_shared_token_is_not_theirs() -> None:
    reviewers = parse_reviewers(f"alice:{ALICE}\nbob:{BOB}", source="r")
    access = Access(loopback=True, reviewers=reviewers, token="shared-token-0123456789")

    alice, bob = access.signed_with(ALICE), access.signed_with(BOB)

    assert alice is not None
    assert bob is not None
    assert (alice.reviewer, bob.reviewer) == ("alice", "bob")
    assert alice.csrf != bob.csrf
    assert access.signed_with("shared-token-0123456789") is None
    shared = Access(loopback=True, token="shared-token-0123456789")
    single = shared.signed_with("shared-token-0123456789")
    assert single is not None
    assert single.reviewer is None
    assert single.csrf == shared.csrf()
    assert Access(loopback=True).signed_with("anything") is None  # no token, no sign-in


ITEM = {
    "$defs": {"action": {"enum": ["start", "drop"]}},
    "type": "object",
    "required": ["rank", "action"],
    "properties": {
        "rank": {"type": "integer", "minimum": 1},
        "action": {"$ref": "#/$defs/action"},
        "why": {"type": ["string", "null"], "maxLength": 600},
        "kind": {"const": "triage"},
        "wsjf": {
            "type": "object",
            "required": ["score"],
            "properties": {"score": {"type": "number", "minimum": 0, "maximum": 20}},
        },
        "tags": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        "free": True,
    },
}


def test_the_editor_lists_every_field_of_the_item_schema() -> None:
    shown = [(f.path, f.depth, f.required, f.kind, f.enum, f.bounds) for f in schema_fields(ITEM)]

    assert shown == [
        ("rank", 0, True, "integer", (), "at least 1"),
        ("action", 0, True, "enum", ('"start"', '"drop"'), ""),
        ("why", 0, False, "string or null", (), "length at most 600"),
        ("kind", 0, False, "enum", ('"triage"',), ""),
        ("wsjf", 0, False, "object", (), ""),
        ("wsjf.score", 1, True, "number", (), "0 to 20"),
        ("tags", 0, False, "array", (), "items at least 1"),
        ("tags[].name", 2, False, "string", (), ""),
        ("free", 0, False, "any", (), ""),
    ]


def test_a_schema_that_refers_to_itself_is_listed_to_a_bounded_depth() -> None:
    looping = {
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }

    paths = [f.path for f in schema_fields(looping)]

    assert paths[:2] == ["next", "next.next"]
    assert 1 < len(paths) < 10


@pytest.mark.parametrize(
    ("instruction", "reason", "described"),
    [
        (None, None, "every pending item (no filter)"),
        ("hostile", None, "instruction hostile"),
        ("daily", "schema", "instruction daily, reason schema"),
        ("a\u202eb", None, "instruction a\\u202eb"),
    ],
)
def test_the_bulk_banner_names_the_filter(
    instruction: str | None, reason: str | None, described: str
) -> None:
    assert describe_filter(instruction, reason, None) == described
