"""Plain-text tables for terminals: the one layout every listing command prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from salvagelane.safe_text import line

if TYPE_CHECKING:  # the scheduler imports APScheduler: not for a command that only prints
    from salvagelane.runtime.scheduler import ScheduleRow


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


def render_schedule_table(rows: Sequence[ScheduleRow]) -> str:
    """``salvagelane schedule`` (and ``serve``'s banner): one aligned line per instruction."""
    if not rows:
        return "no instructions"
    header = ("INSTRUCTION", "CRON", "TIMEZONE", "NEXT (UTC)", "NEXT (LOCAL)")
    lines = [header]
    for row in rows:
        utc = "never" if row.next_fire_utc is None else f"{row.next_fire_utc:%Y-%m-%d %H:%M:%S}"
        local = (
            "never"
            if row.next_fire_local is None
            else f"{row.next_fire_local:%Y-%m-%d %H:%M:%S %Z}"
        )
        lines.append((row.instruction_id, row.cron, row.timezone, utc, local))
    return "\n".join(aligned(lines))
