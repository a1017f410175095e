"""An output over the definition's ``max_output_bytes`` is stored once, clipped to the cap,
with its full length and SHA-256, and not asked for again unless ``retry.on`` says
``oversize``. Against a real local provider, on SQLite and PostgreSQL, and through the CLI
with the replayed output a user reproduced the flood with.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from salvagelane.definitions import Instruction
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store, upgrade
from tests.support.cli import FIXTURE, ROOT, clean_env, command, salvagelane, upgraded
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project, chat_answer, openai_connector_for, provider

__all__ = ["provider"]

CAP = 1024 * 1024
SECRET = "sk-bounded-test-0d5c2a77-never-stored"


def definition(tmp_path: Path, **replacements: str) -> Instruction:
    """The example's definition, copied under ``tmp_path``, its outputs capped at CAP."""
    capped = {"max_output_bytes: 262144": f"max_output_bytes: {CAP}"}
    return Project.create(tmp_path).instruction(**capped, **replacements)


def flood(size: int) -> str:
    """A report whose summary never ends: ``size`` bytes of UTF-8, a two-byte character
    straddling the cap so the clip cuts a character in half."""
    head = '{"summary": "'
    body = "a" * (CAP - len(head) - 1) + "é"
    text = head + body + "z" * (size - len(head) - len(body.encode()))
    assert len(text.encode()) == size
    return text


def answer(text: str) -> Scripted:
    return chat_answer(text, usage={"prompt_tokens": 100, "completion_tokens": 5_000_000})


def sqlite_size(path: Path) -> tuple[int, int]:
    """The database's bytes on disk (its write-ahead log included), and the bytes its
    pages hold (the file less its free pages)."""
    on_disk = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    with closing(sqlite3.connect(path)) as connection:
        pages, free, size = (
            connection.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_count", "freelist_count", "page_size")
        )
    return on_disk, (pages - free) * size


def assert_grew_by_the_cap(before: tuple[int, int], after: tuple[int, int], outputs: int) -> None:
    """The live data grew by about ``outputs`` caps, the file by at most one cap more:
    SQLite rewrites a row it updates (the attempt's outcome is set after its output is
    stored), and the pages it leaves free are reused by the next write."""
    on_disk, live = (a - b for a, b in zip(after, before, strict=True))
    assert outputs * CAP <= live < outputs * CAP + CAP // 4, live
    assert outputs * CAP <= on_disk < (outputs + 1) * CAP + CAP // 4, on_disk


@pytest.mark.parametrize(
    ("retry_on", "calls"),
    [
        pytest.param("[nothing_salvaged, truncated]", 1, id="oversize-not-listed"),
        pytest.param("[nothing_salvaged, truncated, oversize]", 2, id="oversize-listed"),
    ],
)
def test_an_oversize_output_is_stored_once_clipped_with_its_length_and_hash(
    tmp_path: Path, provider: ScriptedServer, database_url: str, retry_on: str, calls: int
) -> None:
    size = 12 * 1024 * 1024
    text = flood(size)
    full = text.encode()
    provider.script.extend([answer(text), answer(text)])
    instruction = definition(tmp_path, **{"on: [nothing_salvaged]": f"on: {retry_on}"})
    upgrade(database_url)
    db_file = tmp_path / "salvagelane.db"
    before = sqlite_size(db_file) if database_url.startswith("sqlite") else (0, 0)

    with Store.open(database_url) as store, httpx.Client() as client:
        connector_for = openai_connector_for(
            client, provider.base_url, key=SECRET, max_response_bytes=64 * 1024 * 1024
        )
        executor = Executor(store, connector_for=connector_for)
        outcome = executor.run(instruction)
        detail = store.get_run(outcome.run_id)

    assert len(provider.requests) == calls
    assert outcome.status == "failed"
    assert [a.number for a in detail.attempts] == list(range(1, calls + 1))
    for attempt in detail.attempts:
        assert attempt.clipped
        assert (attempt.stored_length, attempt.raw_length) == (CAP, size)
        assert attempt.raw_sha256 == hashlib.sha256(full).hexdigest()
        assert attempt.raw_output is not None
        assert attempt.raw_output.encode("utf-8", "surrogateescape") == full[:CAP]
        assert attempt.outcome is not None
        assert attempt.outcome["retry_trigger"] == "oversize"
        assert attempt.outcome["counts"]["by_reason"] == {"oversize": 1}
    if calls == 2:
        second = provider.requests[1].body["messages"][1]["content"]
        assert "over the size limit" in second
        # The token budget is not doubled: a bigger budget would not shrink the answer.
        assert provider.requests[1].body["max_tokens"] == provider.requests[0].body["max_tokens"]
    if database_url.startswith("sqlite"):  # about the cap per attempt, not 12 MB each
        assert_grew_by_the_cap(before, sqlite_size(db_file), calls)


def test_every_stored_output_carries_its_length_and_hash(tmp_path: Path, database_url: str) -> None:
    upgrade(database_url)
    text = "short ✓ \udcff"  # a byte that was not UTF-8, restored by surrogateescape
    data = b"short \xe2\x9c\x93 \xff"
    with Store.open(database_url) as store:
        run_id = store.start_run(
            instruction_id="daily-triage",
            definition_sha256="d" * 64,
            trigger="manual",
            scheduled_for=None,
            now=_now(),
        )
        store.add_attempt(
            run_id, number=1, started_at=_now(), request={}, raw_output=text,
            finish_reason="stop", native_finish_reason="stop", usage=None, model=None,
            request_id=None, latency_seconds=None, http_status=200, provider_error=None,
            stream_error=None, finished_at=_now(), max_raw_bytes=len(data),
        )  # fmt: skip
        store.add_attempt(
            run_id, number=2, started_at=_now(), request={}, raw_output=None,
            finish_reason="error", native_finish_reason=None, usage=None, model=None,
            request_id=None, latency_seconds=None, http_status=None, provider_error="refused",
            stream_error=None, finished_at=_now(),
        )  # fmt: skip
        first, second = store.get_run(run_id).attempts

    assert first.raw_output == text
    assert (first.raw_length, first.stored_length, first.clipped) == (len(data), len(data), False)
    assert first.raw_sha256 == hashlib.sha256(data).hexdigest()
    assert (second.raw_length, second.raw_sha256, second.stored_length) == (None, None, None)
    assert not second.clipped


def test_the_replayed_flood_is_stored_once_clipped_and_shown_as_clipped(tmp_path: Path) -> None:
    # The reproduction: a replayed 5 MB output over the cap, under the example's retry.on
    # (nothing_salvaged, truncated at the time), was asked for twice and stored in full twice.
    size = 5 * 1024 * 1024
    text = flood(size)
    fixture = tmp_path / "flood"
    fixture.mkdir()
    (fixture / "raw.txt").write_bytes(text.encode())
    shutil.copy(FIXTURE / "meta.json", fixture / "meta.json")
    definition(tmp_path)
    db_file = tmp_path / "flood.db"
    database = upgraded(f"sqlite:///{db_file}")
    before = sqlite_size(db_file)
    instructions = ("--instructions", str(tmp_path / "instructions"))

    run = salvagelane(
        "run", "daily-triage", "--replay", str(fixture), *instructions, "--json", database=database
    )

    assert run.returncode == 1, run.stderr  # nothing usable
    outcome = json.loads(run.stdout)
    assert outcome["attempts"] == 1
    assert outcome["quarantined_by_reason"] == {"oversize": 1}
    assert_grew_by_the_cap(before, sqlite_size(db_file), 1)
    run_id = outcome["run_id"]
    shown = salvagelane("runs", "show", run_id, database=database)
    assert shown.returncode == 0, shown.stderr
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert (
        f"output clipped: first 1,048,576 of 5,242,880 bytes stored (over max_output_bytes), "
        f"sha256 {digest}"
    ) in shown.stdout
    raw = _run_bytes("runs", "show", run_id, "--raw", "1", database=database)
    assert raw.returncode == 0
    assert raw.stdout == text.encode()[:CAP]
    assert raw.stderr.decode() == (
        "salvagelane: warning: attempt 1: output clipped: first 1,048,576 of 5,242,880 bytes "
        f"stored (over max_output_bytes), sha256 {digest}\n"
    )
    capture = salvagelane(
        "fixture", "capture", run_id, "--to", str(tmp_path / "captured"), database=database
    )
    assert capture.returncode == 2
    assert (
        f"run {run_id}: attempt 1's output is stored clipped (first 1048576 of 5242880 bytes): "
        "it cannot be a fixture"
    ) in capture.stderr
    assert not (tmp_path / "captured").exists()


def _run_bytes(*args: str, database: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        command(*args),
        capture_output=True,
        cwd=ROOT,
        # A strict encoder: the bytes must not go through one.
        env=clean_env({"SALVAGELANE_DATABASE_URL": database, "PYTHONIOENCODING": "utf-8:strict"}),
        timeout=120,
        check=False,
    )


def _now() -> datetime:
    return datetime(2031, 1, 2, 3, 4, tzinfo=UTC)
