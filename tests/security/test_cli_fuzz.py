"""Fuzzing the command line (issue 29.11): every command and option, given values of the
wrong shape, exits 0, 1 or 2, never with a traceback; a refusal (2) is one line on stderr.

The commands are found by walking the click tree from the root group, so a new command or
option is fuzzed without a change here. Each parameter gets either a value that works
(so the command reaches its body: a stored run's id, the bundled instruction) or a
hostile one: dates whose UTC falls off the calendar, huge, negative, infinite and NaN
numbers, ids beyond any database integer, malformed and unsupported database URLs, bytes
that are not UTF-8 (as Python hands them over from argv: lone surrogates), control and
direction characters, empty strings, missing, unreadable and looping files, directories.

Each example runs the console entry point in this process (as ``salvagelane ARGS``
would, with its own copy of a project whose database holds a stored run and a
quarantined item, and a private HOME and XDG directories) with stdout strict UTF-8, as
a UTF-8 terminal's is: what a command prints unescaped would fail there.

Not fuzzed: a NUL byte (no argv or environment can hold one), a lone surrogate outside
U+DC80..U+DCFF (Python's surrogateescape makes only those from argv bytes) and FIFOs
(reading one blocks until a writer comes: a hang by design, not a bug). ``serve``, ``ui`` and
``worker`` run for as long as they are not stopped: their loops are replaced by ones
that return at once, after every option is parsed, the database opened and the port
bound; ``ui`` and the metrics endpoint are always given port 0 (or a port no system
takes), never the default, which another test may be using.

The budget is small so CI runs it every time (``SALVAGELANE_FUZZ_EXAMPLES``, default
300, is shared by the commands); ``SALVAGELANE_HYPOTHESIS=explore`` draws new examples.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import structlog
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from salvagelane.cli.app import cli, main
from tests.support.cli import EIGHTH, FIXTURE, ROOT
from tests.support.guards import time_limit

EXAMPLES = int(os.environ.get("SALVAGELANE_FUZZ_EXAMPLES", "300"))
LIMIT_SECONDS = 120
"""A hang guard for one command, far above what any of them needs."""


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command under ``group``, as the words that name it."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


COMMANDS = sorted(commands(cli))
PER_COMMAND = max(5, EXAMPLES // len(COMMANDS))


def command_at(path: Sequence[str]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None, path
        command = found
    return command


# --- the project every example starts from ---------------------------------------------


@dataclass(frozen=True)
class Template:
    root: Path
    run_id: str
    item_id: str


BAD_NAME = "bad-\udcffname.json"
"""A file whose name holds a byte that is not UTF-8 (0xFF), as Python spells it."""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """A project with the bundled definition, fixtures, hostile files, and a database
    holding one replayed run (7 items kept, 1 quarantined)."""
    root = tmp_path_factory.mktemp("cli-fuzz") / "project"
    root.mkdir()
    shutil.copytree(ROOT / "instructions", root / "instructions")
    shutil.copytree(ROOT / "schemas", root / "schemas")
    shutil.copytree(FIXTURE, root / "fixtures" / "truncated")
    (root / "data").mkdir()
    (root / "good-item.json").write_text(json.dumps(EIGHTH), encoding="utf-8")
    (root / "latin1.txt").write_bytes(b"caf\xe9 \xff\xfe")
    (root / "empty.txt").write_bytes(b"")
    (root / "unreadable.txt").write_text("{}", encoding="utf-8")
    (root / "unreadable.txt").chmod(0)
    (root / "loop").symlink_to("loop")
    (root / "a-directory").mkdir()
    (root / BAD_NAME).write_text("{}", encoding="utf-8")
    with _isolated(root) as run:
        code, out, err = run(["run", "daily-triage", "--replay", "fixtures/truncated", "--json"])
        assert code == 0, err
    run_id = json.loads(out)["run_id"]
    from salvagelane.store import QuarantineFilter, Store

    with Store.open(_database(root)) as store:
        (item,) = store.quarantine.list_quarantine(QuarantineFilter())
    return Template(root=root, run_id=run_id, item_id=str(item.id))


def _database(root: Path) -> str:
    return f"sqlite:///{root / 'data' / 'salvagelane.db'}"


Invoke = Callable[[list[str]], tuple[int, str, str]]


@contextmanager
def _isolated(root: Path) -> Iterator[Invoke]:
    """Run ``main`` in ``root`` with a private environment and captured standard streams;
    yield a function from argv to (exit code, stdout, stderr)."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    home = root / "home"
    home.mkdir(exist_ok=True)
    for key in list(os.environ):
        if key.startswith("SALVAGELANE_") or key.endswith(("_API_KEY", "_TOKEN")):
            del os.environ[key]
    os.environ.update(
        {
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "EDITOR": "true",  # `quarantine approve --edit`: an editor that changes nothing
            "VISUAL": "true",
            "SALVAGELANE_DATABASE_URL": _database(root),
        }
    )
    os.chdir(root)

    def invoke(argv: list[str]) -> tuple[int, str, str]:
        streams = (sys.stdin, sys.stdout, sys.stderr)
        # main() configures the logs onto the streams it was given, which are detached
        # below: later tests in this process must log where they did before.
        logging_config = structlog.get_config()
        out, err = io.BytesIO(), io.BytesIO()
        # A UTF-8 terminal: stdout strict (what is printed unescaped must be text), stderr
        # with backslashreplace, as Python sets them up.
        stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
        stderr = io.TextIOWrapper(
            err, encoding="utf-8", errors="backslashreplace", write_through=True
        )
        sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        try:
            with time_limit(LIMIT_SECONDS, f"salvagelane {argv!r}"):
                main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:  # pragma: no cover - main always exits
            code = 0
        finally:
            sys.stdin, sys.stdout, sys.stderr = streams
            structlog.configure(**logging_config)
            written = out.getvalue(), err.getvalue()
            stdout.detach()
            stderr.detach()
        return code, written[0].decode("utf-8"), written[1].decode("utf-8")

    try:
        yield invoke
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


@pytest.fixture(scope="module", autouse=True)
def _loops_return_at_once() -> Iterator[None]:
    """``serve``, ``ui`` and ``worker`` return where they would start serving."""
    from salvagelane.runtime import dispatch, service
    from salvagelane.ui import server

    def ui_serve(settings: object, sock: object, on_ready: object) -> None:
        on_ready()  # type: ignore[operator]
        sock.close()  # type: ignore[attr-defined]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service.Service, "serve", lambda self: None)
        patch.setattr(dispatch.QueueWorker, "run", lambda self: None)
        patch.setattr(server, "serve", ui_serve)
        yield


# --- values --------------------------------------------------------------------------


EXTREME_TIMES = [
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01",
    "9999-12-31",
    "2026-02-30",
    "2026-11-21T05:20:00+24:00",
    "2026-11-21T05:20:00",
]
NUMBERS = [
    "0", "-1", "-0", "1e3", "0x10", "1_000", "99999999999999999999999",
    "-99999999999999999999999", "2147483648", "9223372036854775808", "inf", "-inf", "nan",
    "1e309", "-1e309", "1e-320", "65536",
]  # fmt: skip
URLS = [
    "sqlite:///" + "x" * 5000,
    "postgresql://x@[::1/x",
    "postgresql://x@host:port/db",
    "postgresql://nobody@127.0.0.1:1/none",
    "mysql://user@host/db",
    "sqlite:///:memory:",
    "sqlite://",
    "sqlite:///nowhere/x.db",
    "sqlite:///a-directory",
    "sqlite:///\udcff.db",
    "sqlite:///data/salvagelane.db?timeout=nan",
    "sqlite:///data/salvagelane.db?timeout=inf",
    "file:///etc/passwd",
    "://",
]
FILES = [
    "nowhere/x.json", ".", "a-directory", "unreadable.txt", "latin1.txt", "empty.txt",
    "/dev/null", "loop", BAD_NAME, "\udcff", "-", "instructions/daily-triage.yaml",
]  # fmt: skip
TEXT = [
    "", " ", "-", "--", "\x1b]52;c;cm0gLXJmIH4K\x07", "\r\n", "\u202e", "\udcff", "caf\udce9",
    "x" * 5000, "%s%n", "{}", "[", "../../etc/passwd", "daily-triage", "0",
]  # fmt: skip

argv_bytes = st.binary(max_size=12).filter(lambda data: b"\x00" not in data).map(os.fsdecode)
"""What Python makes of arbitrary bytes in argv (surrogateescape)."""

hostile = st.one_of(
    st.sampled_from(TEXT + NUMBERS + EXTREME_TIMES + URLS + FILES),
    argv_bytes,
    # Any text but NUL and surrogates: argv brings surrogates only as argv_bytes makes them.
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12),
    st.integers().map(str),
    st.floats().map(repr),
)
ports = st.sampled_from(["0", "-1", "65536", "99999999999999999999999", "nan", "", "x"])
"""A port that binds nothing another test may use: 0 (a free one) or one refused."""


def working_values(template: Template) -> dict[str, list[str]]:
    """Values that work, by parameter name: with them a command reaches its body."""
    return {
        "instruction": ["daily-triage", "instructions/daily-triage.yaml"],
        "instruction_id": ["daily-triage"],
        "run_id": [template.run_id, template.run_id[:8]],
        "quarantine_id": [template.item_id],
        "instructions_dir": ["instructions"],
        "replay": ["fixtures/truncated"],
        "paths": ["fixtures/truncated"],
        "to": ["exported"],
        "schema_path": ["schemas/daily-triage-item.schema.json"],
        "items": ["recommendations"],
        "file": ["fixtures/truncated/raw.txt"],
        "path": ["good-item.json"],
        "directory": ["instructions", "new-project"],
        "database": ["sqlite:///data/salvagelane.db"],  # the example's own copy
        "scheduled_for": ["2026-11-21T05:20:00Z"],
        "since": ["2026-11-21", "2026-11-21T05:20:00+01:00"],
        "note": ["noise"],
        "text": ["a note"],
        "by": ["alice"],
        "reason": ["truncated"],
        "host": ["127.0.0.1"],
        "metrics_host": ["127.0.0.1"],
        "queues": ["salvagelane"],
    }


def hostile_for(param: click.Parameter) -> st.SearchStrategy[str]:
    """Hostile values, mostly of the kind that breaks this parameter's type (a number
    for a number, a URL for a URL), sometimes of any kind."""
    if isinstance(param.type, click.Path):
        pool = FILES
    elif param.type.name in ("integer", "integer range", "float", "float range", "seconds", "id"):
        pool = NUMBERS
    elif param.name == "database":
        pool = URLS
    elif param.name in ("since", "scheduled_for"):
        pool = EXTREME_TIMES
    else:
        return st.one_of(st.sampled_from(TEXT), argv_bytes, hostile)
    return st.integers(0, 2).flatmap(lambda pick: st.sampled_from(pool) if pick else hostile)


def value(param: click.Parameter, known: dict[str, list[str]]) -> st.SearchStrategy[str]:
    if param.name in ("port", "metrics_port"):
        return ports
    good = list(known.get(param.name or "", []))
    if isinstance(param.type, click.Choice):
        good += [str(choice) for choice in param.type.choices]
    hostile = hostile_for(param)
    if not good:
        return hostile
    # Two in three work: with several options drawn, some examples then get past them all.
    return st.integers(0, 2).flatmap(lambda pick: st.sampled_from(good) if pick else hostile)


@st.composite
def invocations(draw: st.DrawFn, path: tuple[str, ...], template: Template) -> list[str]:
    """``path`` with some of its options and all of its arguments, each working or not."""
    command = command_at(path)
    known = working_values(template)
    argv: list[str] = []
    for param in cli.params:  # the root group's --log-level, --log-format, --version
        # Seldom: --version ends the command before it starts.
        seldom = 40 if param.name == "version" else 5
        if isinstance(param, click.Option) and draw(st.integers(0, seldom)) == 0:
            argv += [param.opts[0]] if param.is_flag else [param.opts[0], draw(value(param, known))]
    argv += path
    arguments: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument):
            count = 1 if param.nargs == 1 else draw(st.integers(0 if not param.required else 1, 2))
            if not param.required and draw(st.booleans()):
                count = 0
            arguments += [draw(value(param, known)) for _ in range(count)]
        elif isinstance(param, click.Option):
            always = param.name == "port"  # never the default port, which may be in use
            if not (always or param.required or draw(st.booleans())):
                continue
            if param.is_flag:
                argv.append(param.opts[0])
                continue
            for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
                argv += [param.opts[0], draw(value(param, known))]
    if arguments and draw(st.booleans()):
        argv.append("--")  # arguments that start with "-" are then arguments
    return argv + arguments


# --- the property --------------------------------------------------------------------


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
@settings(
    max_examples=PER_COMMAND,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_arguments_end_in_an_exit_status_never_a_traceback(
    path: tuple[str, ...], template: Template, tmp_path: Path, data: st.DataObject
) -> None:
    argv = data.draw(invocations(path, template), label="argv")
    project = Path(tempfile.mkdtemp(dir=tmp_path, prefix="example-")) / "project"
    shutil.copytree(template.root, project, symlinks=True)
    (project / "unreadable.txt").chmod(0)
    try:
        with _isolated(project) as invoke:
            code, out, err = invoke(argv)
    finally:
        shutil.rmtree(project.parent, ignore_errors=True)
    event(f"exit {code}")
    shown = f"salvagelane {argv!r}\nexit {code}\n--- stdout:\n{out}\n--- stderr:\n{err}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in out + err, shown
    if code == 2:
        # At most one error line, the last: a note before it (which definition is used)
        # may say what the command was about to do, and `replay` says why a fixture was
        # refused in its table, but a refusal is never more than one line.
        errors = [text for text in err.splitlines() if text.startswith("salvagelane: error:")]
        assert len(errors) <= 1, shown
        assert not errors or err.splitlines()[-1] == errors[0], shown


def test_every_command_is_fuzzed() -> None:
    """The walk finds the commands the group lists, and each is a salvagelane Command
    (whose text parameters are refused when they are not UTF-8)."""
    from salvagelane.cli.options import Command

    assert ("run",) in COMMANDS
    assert ("quarantine", "show") in COMMANDS
    assert len(COMMANDS) >= 20
    assert all(isinstance(command_at(path), Command) for path in COMMANDS)
