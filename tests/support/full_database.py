"""``salvagelane ARGS`` with every SQLite connection capped at its database's current size.

Each new connection sets ``PRAGMA max_page_count`` to the page count the file has when it
connects, so the first write that needs a new page fails with SQLITE_FULL ("database or
disk is full"), the error a full disk gives. Writes that fit in existing pages (a small
run row, a status update) still succeed, as they would on a full disk. The tests run it
as ``python tests/support/full_database.py ARGS``: a real process, a real SQLite error.
In-process tests listen with :func:`cap_at_current_size` on one engine instead.
"""

from __future__ import annotations

import sys
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import Pool


def cap_at_current_size(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        (pages,) = cursor.execute("PRAGMA page_count").fetchone()
        cursor.execute(f"PRAGMA max_page_count = {int(pages)}")
    finally:
        cursor.close()


if __name__ == "__main__":
    from salvagelane.cli import main

    sa.event.listen(Pool, "connect", cap_at_current_size)

    main(sys.argv[1:])
