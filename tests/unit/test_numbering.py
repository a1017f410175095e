"""The one conversion from a stored 0-based item index to the number texts show."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from salvagelane.core.numbering import item_label, item_number, place_in_output


@pytest.mark.parametrize(
    ("index", "number", "label", "place"),
    [
        (0, 1, "item 1", "item 1 of the output"),
        (1, 2, "item 2", "item 2 of the output"),
        (7, 8, "item 8", "item 8 of the output"),
    ],
)
def test_an_index_is_named_from_1(index: int, number: int, label: str, place: str) -> None:
    assert item_number(index) == number
    assert item_label(index) == label
    assert place_in_output(index) == place


def test_the_whole_output_has_no_number() -> None:
    assert place_in_output(None) == "the whole output"


def test_a_negative_index_is_a_bug_not_item_0() -> None:
    with pytest.raises(ValueError, match="0-based offset, got -1"):
        item_number(-1)


@given(st.integers(min_value=0, max_value=10**9))
def test_the_label_is_the_number(index: int) -> None:
    assert item_label(index) == f"item {item_number(index)}"
    assert item_number(index) - 1 == index
