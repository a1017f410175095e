"""Model output never reaches the operator's terminal raw (issue 12, item 2).

A model, a provider, a fixture or whoever wrote a database row can put terminal control
sequences into what salvagelane prints: OSC 52 writes the clipboard, ``ESC[2J`` clears
the screen, ``\\r`` rewrites the line, OSC 0 retitles the window, U+009B is an 8-bit CSI
and U+202E reverses the text after it. Every human-facing view prints them as visible
escapes (``\\x1b``), in a pipe and at a terminal alike.

- a property: control-laden strings through every renderer leave no raw control character
  (only newline and tab, where a multi-line view keeps them), and a bounded fuzz target;
- end to end: a run stored from a hostile local provider, reviewed with a hostile
  ``--by``/``--note``, and every view of it, through real processes, in a pipe and under
  a pseudo-terminal;
- the console log renderer.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import itertools
import json
import os
import pty
import re
import select
import subprocess
import termios
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.cli import FIXTURE, ROOT, clean_env, command, salvagelane, upgraded
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project, aimed_at, items, provider
from tests.support.secrets_setup import database_url, postgres_database

__all__ = ["database_url", "postgres_database", "provider"]

# --- what a hostile producer sends -------------------------------------------------------------

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # puts "rm -rf ~" on the clipboard
CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
C1_CSI = "\x9b31m"  # red, on a terminal that takes 8-bit controls
RLO = "\u202e"  # right-to-left override: what follows reads backwards
HOSTILE = f"{OSC52}{CLEAR}\r{TITLE}{C1_CSI}{RLO}gnp.exe"

# Nothing a terminal acts on may reach it: C0 but newline and tab, DEL, C1, the
# bidirectional overrides and isolates, and lone surrogates (bytes that were not UTF-8,
# which a surrogateescape stream would write back as raw 8-bit bytes).
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
UNSAFE_IN_A_LINE = re.compile(UNSAFE.pattern[:1] + "\t\n" + UNSAFE.pattern[1:])


def unsafe(text: str, *, lines: bool = True) -> list[str]:
    """The characters of ``text`` a terminal would act on (newline and tab allowed when
    ``lines``)."""
    return (UNSAFE if lines else UNSAFE_IN_A_LINE).findall(text)


def decoded(output: bytes) -> str:
    # surrogateescape: a raw 8-bit C1 byte stays visible as a lone surrogate.
    return output.decode("utf-8", "surrogateescape")


# --- (a) every renderer, and the fuzz target -----------------------------------------------------

_CONTROL_POINTS = [
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0xD800,
    0xDC9B,
    0xDFFF,
]
_SEQUENCES = [OSC52, CLEAR, TITLE, C1_CSI, RLO, "\r", "\x1b[1;31m", "\x1bP+q\x1b\\", "\x9d0;x\x9c"]

controls = st.sampled_from([chr(code) for code in _CONTROL_POINTS])
hostile_text = st.lists(
    st.one_of(
        controls,
        st.sampled_from(_SEQUENCES),
        st.text(max_size=8),
        st.text(alphabet=st.characters(codec=None), max_size=4),
    ),
    max_size=24,
).map("".join)


def _renderers() -> dict[str, Callable[[str], str]]:
    """Every function that turns one untrusted string into terminal text."""
    from salvagelane.cli.render import one_line
    from salvagelane.cli.tables import aligned
    from salvagelane.safe_text import block, line

    return {
        "line": line,
        "one_line": lambda text: one_line(text, 40),
        "one_line_unbounded": one_line,
        "block": block,
        "aligned": lambda text: "\n".join(aligned([("ID", "TEXT"), ("1", text), (text, "2")])),
    }


@given(text=hostile_text)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_no_renderer_lets_a_control_character_through(text: str) -> None:
    from salvagelane.safe_text import block

    for name, render in _renderers().items():
        shown = render(text)
        # A multi-line view keeps newlines and tabs; every other view keeps neither (a table
        # keeps the newlines between its rows, checked row by row).
        if name == "block":
            assert unsafe(shown) == [], (name, text, shown)
        elif name == "aligned":
            assert all(unsafe(row, lines=False) == [] for row in shown.split("\n")), shown
            assert shown.count("\n") == 2, (text, shown)
        else:
            assert unsafe(shown, lines=False) == [], (name, text, shown)
    # Nothing is dropped: every control character comes out as an escape of its own.
    assert block(text).count("\\") >= text.count("\\") + len(unsafe(text))


def test_escapes_are_visible_and_readable() -> None:
    from salvagelane.safe_text import block, line, one_line

    assert line(HOSTILE) == (
        r"\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\r\x1b]0;owned\x07\x9b31m\u202egnp.exe"
    )
    assert block("a\tb\r\nc\x7f\udc9b") == "a\tb\\r\nc\\x7f\\udc9b"
    assert line("a\tb\nc") == "a\\tb\\nc"
    # One line: layout whitespace folds to one space; a carriage return stays visible.
    assert one_line('  {\n      "rank": 8,\r\n\tx  ') == '{ "rank": 8,\\r x'
    assert one_line("abcdef", 4) == "abc…"
    # Ordinary text, accents, emoji and right-to-left script are left alone.
    assert line("café ✓ 🙂 עברית") == "café ✓ 🙂 עברית"


def _poisoned(value: Any, draw: Callable[[], str]) -> Any:
    """``value`` with every string in it (fields, mapping keys and values, list items)
    replaced by a drawn one: a record a hostile producer filled in wherever it could.

    Enum members stay: they are words of the code's vocabulary (a status, a kind), which
    no producer can set to other text; a record holding other text cannot be built."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return draw()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{
                field.name: _poisoned(getattr(value, field.name), draw)
                for field in dataclasses.fields(value)
                if field.init
            },
        )
    if isinstance(value, dict):
        return {_poisoned(k, draw): _poisoned(v, draw) for k, v in value.items()}
    if isinstance(value, list):
        return [_poisoned(item, draw) for item in value]
    if isinstance(value, tuple):
        return tuple(_poisoned(item, draw) for item in value)
    return value


class Records(dict[str, Any]):
    """The records below; a short repr, as Hypothesis prints a failing example's arguments."""

    def __repr__(self) -> str:
        return f"<records: {', '.join(self)}>"


@pytest.fixture(scope="module")
def stored_records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    """Real records of every kind the views print: a run of the bundled truncated fixture,
    its quarantined item reviewed twice, and the salvage result of its output."""
    from salvagelane.core import salvage
    from salvagelane.core.outcome import Outcome, compare, outcome_of
    from salvagelane.definitions import load_instruction
    from salvagelane.fixtures.replay import FixtureReplay
    from salvagelane.runtime.delivery import Redelivery
    from salvagelane.sinks import DeliveryOutcome
    from salvagelane.store import QuarantineFilter, SinkDeliveryView, Store

    database = f"sqlite:///{tmp_path_factory.mktemp('records') / 'records.db'}"
    proc = salvagelane("run", "daily-triage", "--replay", str(FIXTURE), "--json", database=database)
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    with Store.open(database) as store:
        [held] = store.quarantine.list_quarantine(QuarantineFilter())
        now = datetime.now(UTC)
        store.quarantine.note_quarantined(held.id, actor="alice", note="looked at", now=now)
        store.quarantine.reject_quarantined(held.id, actor="bob", note="cut off", now=now)
        detail = store.get_run(run_id)
        held_detail = store.quarantine.get_quarantine(held.id)
        listed = store.quarantine.list_quarantine(QuarantineFilter())
        runs = store.list_runs(limit=5)
    definition = load_instruction(ROOT / "instructions" / "daily-triage.yaml")
    policy = definition.salvage_policy({"candidate": frozenset({"billing-migration"})})
    raw = (FIXTURE / "raw.txt").read_text(encoding="utf-8")
    result = salvage(raw, policy, finish_reason="length")
    # A replay that differs from the fixture's expected outcome (the allow list is shorter).
    expected = Outcome.from_json(json.loads((FIXTURE / "expected.json").read_text()))
    actual = outcome_of(result)
    replay = FixtureReplay(
        path=FIXTURE,
        verdict="differs",
        instruction="daily-triage",
        differences=tuple(compare(expected, actual)),
        expected=expected,
        actual=actual,
        error="not replayed",
    )
    assert replay.differences
    failed = SinkDeliveryView(
        id=1,
        run_id=run_id,
        target="https://example.test/hook",
        kind="webhook",
        status="failed",
        error="HTTP 503: try later",
        attempted_at=now,
        attempts=2,
        next_attempt_at=None,
    )
    return Records(
        detail=dataclasses.replace(detail, deliveries=[failed], sink_status="failed"),
        outcome=DeliveryOutcome(target=failed.target, kind="webhook", ok=False, error="503"),
        redelivered=Redelivery(delivery=failed),
        skipped=Redelivery(delivery=failed, skipped="no such instruction"),
        held=held_detail,
        listed=listed,
        runs=runs,
        result=result,
        replay=replay,
    )


def _views(records: dict[str, Any]) -> dict[str, str]:
    """Every multi-line human view, of ``records``."""
    from salvagelane.cli import fixture_commands, quarantine_commands, render, salvage_commands

    detail = records["detail"]
    return {
        "runs show": render.run_detail(detail),
        "run": render.run_outcome(detail, "sqlite:///x.db", [records["outcome"]]),
        "runs redeliver": render.delivery_line(records["outcome"]),
        "runs redeliver --pending": render.redelivery_line(records["redelivered"])
        + "\n"
        + render.redelivery_line(records["skipped"]),
        "runs list": render.runs_table(records["runs"]),
        "quarantine show": quarantine_commands.quarantine_detail(records["held"]),
        "quarantine list": quarantine_commands.quarantine_table(records["listed"]),
        "salvage --summary": salvage_commands.render_summary(records["result"]),
        "replay": fixture_commands.render_replays([records["replay"]], {"differs": 1}),
    }


@given(pool=st.lists(hostile_text, min_size=1, max_size=7))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_view_of_a_poisoned_record_lets_a_control_character_through(
    stored_records: dict[str, Any], pool: list[str]
) -> None:
    # Every string of the records, in turn, from a pool of hostile ones: a pool keeps the
    # example small enough to shrink, and cycling through it varies which field gets which.
    drawn = itertools.count()

    def draw() -> str:
        return pool[next(drawn) % len(pool)]

    honest = _views(stored_records)
    # The escaping leaves what an honest run prints alone.
    assert '"rank": 8,' in honest["quarantine show"]
    assert all(unsafe(view) == [] for view in honest.values())
    poisoned = {name: _poisoned(record, draw) for name, record in stored_records.items()}
    for name, view in _views(poisoned).items():
        assert unsafe(view) == [], (name, unsafe(view))


@given(text=hostile_text)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_the_renderer(text: str) -> None:
    """The fuzz target CI runs with a bounded budget (500 examples): the escape is total
    (never raises), idempotent, and leaves nothing a terminal acts on."""
    from salvagelane.safe_text import block, line

    for render, lines in ((block, True), (line, False)):
        shown = render(text)
        assert render(shown) == shown
        assert unsafe(shown, lines=lines) == []
        shown.encode("utf-8")  # no lone surrogate left to fail (or leak) on the way out


# --- (b) end to end: a hostile provider, a hostile reviewer, every view -------------------------

KEY_ENV = "SALVAGELANE_TEST_API_KEY"
ITEMS = items(3)


def hostile_output() -> str:
    """A model output carrying the payload everywhere it can: an envelope key (JSON
    escapes, so the parsed key holds the raw characters), raw inside the 2nd item (so
    that item is malformed and the raw text around it is shown), and in a value of the
    3rd item the schema refuses."""
    # First in the item, so the snippet column of quarantine list shows it too.
    rest = {key: value for key, value in ITEMS[1].items() if key != "why"}
    second = json.dumps({"why": "PLACEHOLDER", **rest}).replace("PLACEHOLDER", HOSTILE)
    third = json.dumps(dict(ITEMS[2], action="panic" + HOSTILE))
    return (
        '{"summary": "Three things matter today.", '
        + json.dumps(HOSTILE)
        + ': 1, "recommendations": ['
        + json.dumps(ITEMS[0])
        + ",\n  "
        + second
        + ",\n  "
        + third
        + "]}"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HostileRun:
    database: str
    run_id: str
    quarantined: list[int]
    output_file: Path
    run_stdout: str


@pytest.fixture
def stored_hostile_run(database_url: str, tmp_path: Path, provider: ScriptedServer) -> HostileRun:
    """A run stored from a provider that first fails with a hostile error message, then
    answers with a hostile model name, finish reason and output."""
    database = upgraded(database_url)
    project = Project.create(tmp_path)
    retried = "on: [nothing_salvaged, truncated, provider_error]"
    project.edit({**aimed_at(provider, KEY_ENV), "on: [nothing_salvaged]": retried})
    content = hostile_output()
    provider.script.extend(
        [
            # OpenRouter's way of failing: an error object in a 200, which a run retries.
            Scripted(
                body={"error": {"code": "bad" + TITLE, "message": "refused: " + HOSTILE}},
                headers={"Content-Type": "application/json"},
            ),
            Scripted(
                body={
                    "id": "gen-hostile",
                    "model": "model" + HOSTILE,
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                            "native_finish_reason": "stop" + HOSTILE,
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 500},
                },
                headers={"Content-Type": "application/json"},
            ),
        ]
    )
    run = salvagelane(
        "run", "daily-triage", "--instructions", str(project.instructions),
        database=database, env={KEY_ENV: "sk-terminal-test-key-0001"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    label, run_id = run.stdout.split("\n", 1)[0].split()[:2]
    assert label == "run", run.stdout
    listed = salvagelane("quarantine", "list", "--json", database=database)
    assert listed.returncode == 0, listed.stderr
    quarantined = sorted(item["id"] for item in json.loads(listed.stdout))
    assert len(quarantined) == 2, listed.stdout
    output_file = tmp_path / "output.txt"
    output_file.write_text(content, encoding="utf-8")
    return HostileRun(
        database=database,
        run_id=run_id,
        quarantined=quarantined,
        output_file=output_file,
        run_stdout=run.stdout,
    )


@pytest.fixture
def hostile_run(stored_hostile_run: HostileRun) -> HostileRun:
    """That run, its quarantined items noted and rejected by a reviewer whose name and
    notes are hostile too."""
    first, second = stored_hostile_run.quarantined
    for args in (
        ("note", str(first), "why: " + HOSTILE, "--by", "mallory" + HOSTILE),
        ("reject", str(second), "--note", "no: " + HOSTILE, "--by", "mallory" + HOSTILE),
    ):
        done = salvagelane("quarantine", *args, database=stored_hostile_run.database)
        assert done.returncode == 0, done.stderr
    return stored_hostile_run


def views_of(run: HostileRun) -> dict[str, tuple[str, ...]]:
    first, second = (str(qid) for qid in run.quarantined)
    return {
        "quarantine show (noted)": ("quarantine", "show", first),
        "quarantine show (rejected)": ("quarantine", "show", second),
        "quarantine list": ("quarantine", "list"),
        "runs show": ("runs", "show", run.run_id),
        "runs list": ("runs", "list"),
        "salvage --summary": (
            "salvage", str(run.output_file), "--summary", "--items", "recommendations",
            "--schema", str(ROOT / "schemas" / "daily-triage-item.schema.json"),
            "--finish-reason", "stop" + HOSTILE,
        ),
    }  # fmt: skip


def in_a_pipe(*args: str, database: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(
        command(*args),
        capture_output=True,
        cwd=ROOT,
        env=clean_env({"SALVAGELANE_DATABASE_URL": database}),
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def at_a_terminal(*args: str, database: str, timeout: float = 120) -> tuple[int, bytes, bytes]:
    """Run ``salvagelane ARGS`` with stdout on a pseudo-terminal (as an operator's shell
    would), exactly as written: output post-processing (``\\n`` to ``\\r\\n``) is off."""
    master, slave = pty.openpty()
    attributes = termios.tcgetattr(slave)
    attributes[1] &= ~termios.OPOST
    termios.tcsetattr(slave, termios.TCSANOW, attributes)
    proc = subprocess.Popen(
        command(*args),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=clean_env({"SALVAGELANE_DATABASE_URL": database}),
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError(f"salvagelane {' '.join(args)}: no end of output")
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    return code, b"".join(chunks), stderr


def test_no_view_of_a_hostile_run_prints_a_control_sequence(hostile_run: HostileRun) -> None:
    # In a pipe (where click strips CSI sequences, but nothing else) and at a terminal.
    for where, runner in (("pipe", in_a_pipe), ("terminal", at_a_terminal)):
        shown: dict[str, str] = {"run": hostile_run.run_stdout}
        for name, args in views_of(hostile_run).items():
            code, stdout, stderr = runner(*args, database=hostile_run.database)
            assert code == 0, (where, name, decoded(stderr))
            assert unsafe(decoded(stderr)) == [], (where, name, decoded(stderr))
            shown[name] = decoded(stdout)
        leaks = {name: sorted(set(unsafe(text))) for name, text in shown.items() if unsafe(text)}
        assert leaks == {}, where
        assert_shown_as_escapes(shown)


def assert_shown_as_escapes(shown: dict[str, str]) -> None:
    """Shown, not dropped: the operator sees what the model, the provider and the
    reviewer wrote, as escapes, where each belongs."""
    escaped = r"\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\r\x1b]0;owned\x07\x9b31m\u202egnp.exe"
    noted, rejected = shown["quarantine show (noted)"], shown["quarantine show (rejected)"]
    assert f"by mallory{escaped}: why: {escaped[:40]}" in noted  # --by, --note: audit trail
    assert f"review       rejected by mallory{escaped} at " in rejected  # the reviewer
    assert f"note         no: {escaped}" in rejected  # the review note
    assert f"model        model{escaped}, finish stop (provider: stop{escaped})" in noted
    # The raw text around the span: newlines kept, the model's controls escaped.
    assert f'"why": "{escaped}",' in noted + rejected
    runs_show = shown["runs show"]
    assert f"model model{escaped}" in runs_show
    assert f"finish stop (provider: stop{escaped})" in runs_show
    assert r"response (bad\x1b]0;owned\x07): r" in runs_show  # the provider's error
    assert f"  {escaped}: 1" in runs_show  # the envelope key
    assert f"envelope     summary, {escaped}\n" in shown["salvage --summary"]
    assert f"(provider: stop{escaped})" in shown["run"]
    assert r"\x1b]52;c;cm0g" in shown["quarantine list"]  # the snippet column


def test_raw_output_is_exact_in_a_pipe_and_escaped_at_a_terminal(
    stored_hostile_run: HostileRun,
) -> None:
    hostile_run = stored_hostile_run
    args = ("runs", "show", hostile_run.run_id, "--raw", "2")
    code, piped, _ = in_a_pipe(*args, database=hostile_run.database)
    assert code == 0
    assert piped == hostile_output().encode("utf-8")  # the stored bytes, for a file or a tool

    code, shown, stderr = at_a_terminal(*args, database=hostile_run.database)

    assert code == 0, stderr
    assert unsafe(decoded(shown)) == []
    assert decoded(shown) == block_of(hostile_output()) + "\n"
    assert "redirect stdout for the exact bytes" in decoded(stderr)


def block_of(text: str) -> str:
    from salvagelane.safe_text import block

    return block(text)


# --- logs at a terminal --------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


_SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours the console renderer adds itself


@pytest.mark.parametrize("stream", [io.StringIO, _Terminal])
def test_console_logs_escape_what_a_field_carries(stream: type[io.StringIO]) -> None:
    from salvagelane.logs import configure_logging, get_logger

    out = stream()
    configure_logging(json=False, stream=out)
    try:
        get_logger("salvagelane.test").warning(
            "provider said " + HOSTILE,
            error="refused: " + HOSTILE,
            model=["m" + HOSTILE],
            line="two\nlines",
        )
        try:
            raise RuntimeError("boom" + HOSTILE)
        except RuntimeError:
            get_logger("salvagelane.test").exception("failed")
    finally:
        configure_logging(json=True)
    text = _SGR.sub("", out.getvalue())

    assert unsafe(text) == [], unsafe(text)
    escaped = r"\x1b]52;c;cm0gLXJmIH4K\x07"
    assert f"provider said {escaped}" in text
    # Quoted by the renderer's repr() (so the escapes' backslashes come doubled), or not.
    assert re.search(r"error='?refused: \\{1,2}x1b\]52;c;cm0gLXJmIH4K", text), text
    assert "two\\nlines" in text  # a field cannot forge a log line of its own
    assert "Traceback (most recent call last):\n" in text  # a traceback keeps its lines
    assert f"RuntimeError: boom{escaped}" in text
