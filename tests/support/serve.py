"""``salvagelane serve`` as a real process, for the end-to-end serve tests.

* :class:`Project`: a temporary project (the bundled ``instructions/`` and ``schemas/``,
  the truncated daily-triage replay fixture as ``fixture/``) whose definition can be
  rewritten with another cron, connector, grace or id.
* :class:`ServeProcess`: one ``salvagelane --log-format json serve ...`` subprocess.
  Background threads collect its stdout lines and its JSON log lines (stderr); tests
  wait for a line or an event with a timeout instead of sleeping blindly.
* :class:`Processes`: starts them and kills whatever is left at teardown, so a failing
  test never leaves a scheduler running.
* :data:`GOOD_REPORT`, :data:`HANG`: replies of the local provider
  (:class:`tests.support.provider.ScriptedServer`), which also tells when the Nth request
  has arrived.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from salvagelane.store import Store
from salvagelane.store.values import RunSummary
from tests.support import run_setup
from tests.support.cli import FIXTURE, ROOT, clean_env, command
from tests.support.provider import Scripted
from tests.support.run_setup import JSON_HEADERS, chat_answer

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
KEY_ENV = "SALVAGELANE_SERVE_TEST_KEY"

REPLAY_CONNECTOR = """connector:
  kind: replay
  model: recorded
  fixture: ../fixture
  max_output_tokens: 4096
  temperature: 0.2
  timeout_seconds: 60
  structured_output: false
"""


def openai_connector(base_url: str, timeout_seconds: float = 60) -> str:
    return f"""connector:
  kind: openai
  base_url: {base_url}
  model: test/model
  api_key_env: {KEY_ENV}
  max_output_tokens: 4096
  temperature: 0.2
  timeout_seconds: {timeout_seconds:g}
  structured_output: false
"""


# --- the project -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project(run_setup.Project):
    """The example project with the replay fixture beside it, and definitions written
    whole for ``serve`` (a cron every second by default)."""

    @classmethod
    def create(cls, root: Path, **fields: Any) -> Self:
        made = super().create(root, **fields)
        shutil.copytree(FIXTURE, root / "fixture")
        return made

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.root / 'salvagelane.db'}"

    def definition_text(
        self,
        *,
        instruction_id: str = "daily-triage",
        cron: str = "* * * * * *",
        grace: int = 30,
        connector: str = REPLAY_CONNECTOR,
        deadline: int = 600,
    ) -> str:
        """The bundled daily-triage definition with these replaced."""
        text = (ROOT / "instructions" / "daily-triage.yaml").read_text(encoding="utf-8")
        replacements = {
            "id: daily-triage\n": f"id: {instruction_id}\n",
            'cron: "20 5 * * *"': f'cron: "{cron}"',
            "misfire_grace_seconds: 3600": f"misfire_grace_seconds: {grace}",
            "deadline_seconds: 600": f"deadline_seconds: {deadline}",
        }
        text = run_setup.replaced(text, replacements)
        block = re.compile(r"^connector:\n(?:  .*\n)+", re.MULTILINE)
        assert len(block.findall(text)) == 1
        return block.sub(lambda _: connector, text)

    def write_definition(self, filename: str = "daily-triage.yaml", **options: Any) -> Path:
        path = self.instructions / filename
        path.write_text(self.definition_text(**options), encoding="utf-8")
        return path


# --- the process -------------------------------------------------------------------------------


class ServeProcess:
    """One ``salvagelane --log-format json serve`` process and what it has printed."""

    def __init__(
        self,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        name: str = "",
        subcommand: str = "serve",
    ) -> None:
        self.name = name or subcommand
        self.args = args
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC)
        self.proc = subprocess.Popen(
            command("--log-format", "json", subcommand, *args),
            cwd=cwd,
            env=clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._changed = threading.Condition()
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout_lines)),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines)),
        ]
        for reader in self._readers:
            reader.daemon = True
            reader.start()

    def _read(self, stream: Any, lines: list[str]) -> None:
        for line in stream:
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    # --- what it printed ---------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self) -> str:
        with self._changed:
            return "\n".join(self.stdout_lines)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines so far (optionally of one event); non-JSON lines are kept
        as ``{"event": "<non-json>", "line": ...}`` so nothing is lost silently."""
        with self._changed:
            lines = list(self.stderr_lines)
        found: list[dict[str, Any]] = []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "<non-json>", "line": line}
            if not isinstance(event, dict):
                event = {"event": "<non-json>", "line": line}
            if name is None or event.get("event") == name:
                found.append(event)
        return found

    def assert_quiet(self, *expected: str) -> None:
        """Every log line is JSON, and nothing above info was logged but ``expected``
        events (a crashed fire, a failed heartbeat, a lost lock would show here)."""
        loud = [
            event
            for event in self.events()
            if event["event"] not in expected
            and (event["event"] == "<non-json>" or event.get("level") not in {"debug", "info"})
        ]
        assert loud == [], f"{self.name}: unexpected log lines {loud}\n{self.describe()}"

    def describe(self) -> str:
        with self._changed:
            out, err = list(self.stdout_lines), list(self.stderr_lines)
        return (
            f"--- {self.name} (pid {self.pid}, exit {self.proc.poll()}) stdout:\n"
            + "\n".join(out)
            + f"\n--- {self.name} stderr (last 40 lines):\n"
            + "\n".join(err[-40:])
        )

    def _wait_until(self, found: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = found()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.name}: no {what} within {timeout:g} s\n{self.describe()}"
                    )
                if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                    raise AssertionError(
                        f"{self.name}: exited ({self.proc.returncode}) before {what}\n"
                        + self.describe()
                    )
                self._changed.wait(min(left, 0.1))

    def wait_for_line(self, pattern: str, timeout: float = 15) -> str:
        """The first stdout line matching the regex ``pattern`` (searched)."""
        regex = re.compile(pattern)

        def found() -> str | None:
            return next((line for line in self.stdout_lines if regex.search(line)), None)

        line: str = self._wait_until(found, timeout, f"stdout line matching {pattern!r}")
        return line

    def wait_for_event(
        self,
        name: str,
        timeout: float = 15,
        where: Callable[[dict[str, Any]], bool] = lambda event: True,
        count: int = 1,
    ) -> list[dict[str, Any]]:
        """Wait until ``count`` log events named ``name`` (and matching ``where``) exist."""

        def found() -> list[dict[str, Any]] | None:
            matching = [event for event in self.events(name) if where(event)]
            return matching if len(matching) >= count else None

        events: list[dict[str, Any]] = self._wait_until(
            found, timeout, f"{count} {name!r} event(s)"
        )
        return events

    # --- control -----------------------------------------------------------------------------

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 15) -> int:
        """The exit code, once the process and its output readers are done."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{self.name}: still running {timeout:g} s later\n{self.describe()}"
            ) from exc
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 15) -> int:
        self.send(sig)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for reader in self._readers:
            reader.join(timeout=5)


class Processes:
    """Starts serve processes; :meth:`cleanup` kills (by pid) any still running."""

    def __init__(self) -> None:
        self.started: list[ServeProcess] = []

    def serve(
        self,
        project_or_cwd: Project | Path,
        *args: str,
        database: str | None = None,
        env: dict[str, str] | None = None,
        name: str = "",
        subcommand: str = "serve",
    ) -> ServeProcess:
        """``salvagelane serve`` (or ``subcommand``, e.g. ``worker``, which takes the
        same --instructions and --database) with ``args``."""
        if isinstance(project_or_cwd, Project):
            cwd = project_or_cwd.root
            arguments = [
                "--instructions",
                str(project_or_cwd.instructions),
                "--database",
                database or project_or_cwd.database_url,
            ]
        else:
            cwd = project_or_cwd
            arguments = [] if database is None else ["--database", database]
        process = ServeProcess(
            [*arguments, *args],
            cwd=cwd,
            env=env,
            name=name or f"{subcommand}#{len(self.started) + 1}",
            subcommand=subcommand,
        )
        self.started.append(process)
        return process

    def worker(self, project: Project, *args: str, **options: Any) -> ServeProcess:
        """``salvagelane worker`` on the project's definitions."""
        return self.serve(project, *args, subcommand="worker", **options)

    def cleanup(self) -> None:
        for process in self.started:
            if process.proc.poll() is None:
                process.proc.kill()
        for process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.proc.wait(timeout=10)
            for stream in (process.proc.stdout, process.proc.stderr):
                if stream is not None:
                    stream.close()


# --- reading the runs --------------------------------------------------------------------------


def all_runs(database_url: str) -> list[RunSummary]:
    """Every run, oldest fire first (manual runs last)."""
    with Store.open(database_url) as store:
        runs = store.list_runs(limit=100_000)
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(runs, key=lambda run: (run.scheduled_for or far, run.fire_attempt, run.id))


def wait_for_runs(
    database_url: str,
    where: Callable[[list[RunSummary]], bool],
    timeout: float,
    what: str,
) -> list[RunSummary]:
    """Poll the runs table until ``where(runs)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        runs = all_runs(database_url)
        if where(runs):
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no {what} within {timeout:g} s; runs: "
                + "; ".join(
                    f"{r.instruction_id} {r.scheduled_for} {r.trigger} {r.status}" for r in runs
                )
            )
        time.sleep(0.1)


# --- a local provider -------------------------------------------------------------------------

chat = chat_answer
GOOD_REPORT = chat(json.dumps(COMPLETE, indent=2))
"""What a provider serving a ``serve`` test answers unless scripted otherwise
(``ScriptedServer(then=GOOD_REPORT)``)."""
HANG = Scripted(
    hang=True, body={"error": {"message": "the test is over", "code": 500}}, headers=JSON_HEADERS
)
"""A reply that never comes (until the provider is closed)."""
