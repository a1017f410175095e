"""Issue 29.2: a top-level envelope member whose name holds a lone surrogate or NUL.

Kept, it made the report undeliverable: every sink failed on every retry (a UTF-8
encoder refuses a lone surrogate), `runs redeliver` failed and `runs show --json`
raised. It is now an envelope issue, and the rest of the report goes on.
"""

from __future__ import annotations

import json

import pytest

from salvagelane.core import SalvagePolicy, Status, salvage


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ('{"\\udc00": 1, "items": [{"a": "ok"}]}', '$["\\udc00"]'),
        ('{"\\ud83d": 1, "items": [{"a": "ok"}]}', '$["\\ud83d"]'),
        ('{"a\\u0000b": 1, "items": [{"a": "ok"}]}', '$["a\\u0000b"]'),
        ('{"\udc9f": 1, "items": [{"a": "ok"}]}', '$["\\udc9f"]'),  # a byte not UTF-8
        ('{"items": [{"a": "ok"}], "\\udc00": {"x": 1}}', '$["\\udc00"]'),
        ('{"items": [{"a": "ok"}], "\\udc00": 1', '$["\\udc00"]'),  # cut off, lenient scan
    ],
)
def test_a_member_name_no_consumer_takes_is_an_issue_not_a_member(raw: str, path: str) -> None:
    result = salvage(raw, SalvagePolicy(items_path="items"))
    assert [item.data for item in result.items] == [{"a": "ok"}]
    assert [issue.path for issue in result.envelope_issues] == [path]
    assert "lone surrogate" in result.envelope_issues[0].problem
    assert result.status is Status.PARTIAL
    # What a sink writes: strict UTF-8 JSON, and the issue's path is ASCII.
    encoded = json.dumps(result.to_json(), ensure_ascii=False).encode("utf-8")
    assert json.loads(encoded)["envelope"] == {}
    assert path.isascii()


def test_an_ordinary_odd_name_is_still_a_member() -> None:
    result = salvage('{"é ☃": 1, "items": []}', SalvagePolicy(items_path="items"))
    assert result.envelope == {"é ☃": 1}
    assert result.envelope_issues == ()
