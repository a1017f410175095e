"""What the review flow's browser tests share (tests/integration/test_ui_browser_review.py):
headless Chromium, a queue to review (made once per module, copied for each test), and
``salvagelane ui`` as a process, with or without a reviewers file."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from salvagelane.store import Store
from salvagelane.vocabulary import RunStatus, Trigger
from tests.support.history import seed
from tests.support.review_page import Reviewed, reviewed_database
from tests.support.ui_server import running_ui

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REVIEWERS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}


def launch_browser() -> Iterator[Any]:
    """Headless Chromium through Playwright; skipped without them, failed under CI."""
    missing = None
    try:
        import playwright.sync_api
    except ImportError:
        missing = "Playwright for Python is not installed (pip install -e '.[dev]')"
    if missing is None and CHROMIUM is None:
        missing = "chromium is not installed (apt-get install chromium)"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test cannot run under CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@dataclass(frozen=True, kw_only=True)
class Queue:
    """:class:`Reviewed` plus ``older``: three more pending ``hostile`` items, each older
    than the last. Newest first, the pending queue is ``schema_item``, ``hostile_item``,
    then ``older``."""

    reviewed: Reviewed
    older: tuple[int, ...]

    @property
    def url(self) -> str:
        return self.reviewed.url

    @property
    def pending(self) -> tuple[int, ...]:
        return (self.reviewed.schema_item, self.reviewed.hostile_item, *self.older)


def make_queue(directory: Path) -> Queue:
    reviewed = reviewed_database(f"sqlite:///{directory / 'salvagelane.db'}", directory)
    now = datetime.now(UTC)
    older = []
    with Store.open(reviewed.url) as store:
        for hours in (2, 3, 4):
            run = seed(
                store,
                at=now - timedelta(hours=hours),
                status=RunStatus.PARTIAL,
                trigger=Trigger.MANUAL,
                instruction_id="hostile",
                reasons=("malformed",),
            )
            older.extend(q.id for q in store.get_run(run).quarantined)
    return Queue(reviewed=reviewed, older=tuple(older))


def copy_queue(template: Queue, directory: Path) -> Queue:
    """The template's SQLite database copied into ``directory``: a queue of its own."""
    source = Path(template.url.removeprefix("sqlite:///"))
    target = directory / "salvagelane.db"
    shutil.copyfile(source, target)
    url = f"sqlite:///{target}"
    return replace(template, reviewed=replace(template.reviewed, url=url))


@dataclass(frozen=True, kw_only=True)
class Served:
    base: str
    """``http://127.0.0.1:PORT``."""
    printed: tuple[str, ...]
    """What the command printed up to its URL."""

    def sign_in(self, token: str) -> str:
        return f"{self.base}/?token={token}"


@contextmanager
def serving(database: str, *, cwd: Path, reviewers: Path | None = None) -> Iterator[Served]:
    """``salvagelane ui --port 0`` (with ``--reviewers``), $SALVAGELANE_UI_TOKEN set
    either way; stopped with SIGINT, which must end it with exit 0."""
    extra = ["--reviewers", str(reviewers)] if reviewers is not None else []
    with running_ui(database, cwd=cwd, extra=extra) as running:
        yield Served(base=running.base, printed=(*running.banner, f"open {running.url}"))


def reviewers_file(directory: Path, reviewers: dict[str, str] = REVIEWERS) -> Path:
    path = directory / "reviewers.txt"
    lines = ["# name:token, one reviewer a line"]
    lines += [f"{name}:{token}" for name, token in reviewers.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path
