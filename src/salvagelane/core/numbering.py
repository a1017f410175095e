"""How an item of a model's output is named to a person or a model: the one conversion.

The store, the JSON outputs and the fixtures keep a candidate's 0-based ``index`` (its
offset in the output's items, ``source_index`` in the store): that is data. Every text a
person or a model reads numbers items from 1, so "item 2" is the second item of the
output in the correction prompt, ``runs show``, ``quarantine show``, the review page and
a fixture's report alike (docs/adr/0018-one-item-numbering.md). A model told "item 1"
about the second item would fix the wrong one.
"""

from __future__ import annotations


def item_number(index: int) -> int:
    """The 1-based number people and models read for the candidate at 0-based ``index``."""
    if index < 0:
        raise ValueError(f"an item index is a 0-based offset, got {index}")
    return index + 1


def item_label(index: int) -> str:
    """``"item N"``: the candidate at 0-based ``index`` as every text names it."""
    return f"item {item_number(index)}"


def place_in_output(index: int | None) -> str:
    """Where a quarantined candidate was: ``"item N of the output"``, or ``"the whole
    output"`` for one with no index (an output with no list of items, or an oversize one)."""
    return "the whole output" if index is None else f"{item_label(index)} of the output"
