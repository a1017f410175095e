"""JSON text with trailing commas put exactly where a test chose, and where they are.

For the lossless-repair tables and properties: the text of a value, written with a
trailing comma (and some whitespace) before the closer of each non-empty container the
``choose`` callback picks, and the offset of every comma written so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Choose = Callable[[], str | None]
"""Asked once per non-empty container: None for no trailing comma, else the JSON
whitespace to write between the comma and the closer."""


def with_trailing_commas(value: Any, choose: Choose) -> tuple[str, list[int]]:
    """``value`` as compact JSON text with the chosen trailing commas; their offsets."""
    out: list[str] = []
    commas: list[int] = []
    size = 0

    def emit(text: str) -> None:
        nonlocal size
        out.append(text)
        size += len(text)

    def write(node: Any) -> None:
        if isinstance(node, dict | list):
            is_object = isinstance(node, dict)
            emit("{" if is_object else "[")
            entries = list(node.items()) if is_object else [(None, v) for v in node]
            for n, (key, child) in enumerate(entries):
                if n:
                    emit(",")
                if is_object:
                    emit(json.dumps(key, ensure_ascii=False) + ":")
                write(child)
            gap = choose() if entries else None
            if gap is not None:
                commas.append(size)
                emit("," + gap)
            emit("}" if is_object else "]")
        else:
            emit(json.dumps(node, ensure_ascii=False, allow_nan=False))

    write(value)
    return "".join(out), commas
