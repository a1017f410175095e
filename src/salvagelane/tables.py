"""Plain-text tables for terminals: the one layout every listing command prints."""

from __future__ import annotations

from collections.abc import Sequence

from salvagelane.safe_text import line


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Each row as one line, cells left-aligned in columns two spaces apart, with no
    trailing spaces. The first row is usually the header; every row has its length.

    A cell is untrusted text (an id, a snippet of model output): its control characters,
    newlines and tabs included, are shown as escapes (:func:`salvagelane.safe_text.line`),
    so no cell can move the cursor or start a row of its own."""
    if not rows:
        return []
    cells = [[line(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
