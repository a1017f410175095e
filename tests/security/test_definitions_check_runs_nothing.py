"""Issue 12, item 8: ``salvagelane check`` validates without executing anything.

A CI pipeline runs ``check`` on proposed definitions. Before, it called every context
callable (``os:system`` ran during ``check``). Now it neither imports nor calls the
code a definition names unless ``--resolve`` asks for it, and says which it skipped;
callable sinks are never imported by ``check``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.definitions import (
    DEFINITION,
    ROOT,
    add_context,
    copy_project,
    edit,
    run_measured,
)


def hostile_project(tmp_path: Path) -> tuple[Path, dict[str, Path], dict[str, str]]:
    """The bundled definition plus a context callable running a shell command, one from
    a module whose import leaves a mark, and a callable sink likewise; the marks and
    the environment that makes those modules importable."""
    project = copy_project(tmp_path / "project")
    marks = {name: tmp_path / f"{name}.mark" for name in ("shell", "context-import", "sink")}
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "marking_context.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marks['context-import'])!r}).write_text('imported')\n"
        "def value():\n    return 'from the plugin'\n",
        encoding="utf-8",
    )
    (plugins / "marking_sink.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marks['sink'])!r}).write_text('imported')\n"
        "def deliver(payload):\n    pass\n",
        encoding="utf-8",
    )
    definition = project / DEFINITION
    add_context(
        definition,
        "  shell:\n    callable: os:system\n"
        f"    args: {{command: \"touch '{marks['shell']}'\"}}\n"
        "  plugin:\n    callable: marking_context:value\n",
    )
    edit(definition, "Today is {{ today }}.", "Today is {{ today }} ({{ plugin }}, {{ shell }}).")
    sink = "\nsinks:\n  - kind: callable\n    callable: marking_sink:deliver\nretry:"
    edit(definition, "\nretry:", sink)
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(plugins)]),
        "OPENROUTER_API_KEY": "sk-test-not-a-key",  # unset, check would warn about it
    }
    return project, marks, env


def test_check_runs_no_code_a_definition_names(tmp_path: Path) -> None:
    project, marks, env = hostile_project(tmp_path)

    proc = run_measured("check", "instructions", cwd=project, env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [name for name, mark in marks.items() if mark.exists()] == []
    lines = proc.stdout.splitlines()
    assert lines[0] == "ok  daily-triage  (instructions/daily-triage.yaml)"
    assert lines[1:] == [
        "  not run: context callables plugin (marking_context:value), shell (os:system), "
        "today (salvagelane.context_sources:today); the prompt was rendered with "
        "placeholders for them (check --resolve imports and runs them)"
    ]


def test_check_resolve_runs_the_context_callables_and_says_so(tmp_path: Path) -> None:
    project, marks, env = hostile_project(tmp_path)

    proc = run_measured("check", "--resolve", "instructions", cwd=project, env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marks["shell"].exists()
    assert marks["context-import"].exists()
    assert not marks["sink"].exists()  # sinks are imported only to deliver a report
    assert proc.stdout.splitlines() == [
        "ok  daily-triage  (instructions/daily-triage.yaml)",
        "  ran: context callables plugin (marking_context:value), shell (os:system), "
        "today (salvagelane.context_sources:today)",
    ]


def test_check_help_says_what_runs_code() -> None:
    proc = run_measured("check", "--help", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "Nothing a definition names is imported or run" in text
    assert "--resolve" in text
    assert "imports and runs the context callables" in text


def test_check_says_when_the_prompt_needs_a_value_it_did_not_compute(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    edit(project / DEFINITION, "Today is {{ today }}.", "Today is {{ today + 1 }}.")

    proc = run_measured(
        "check", "instructions", cwd=project, env={"OPENROUTER_API_KEY": "sk-test-not-a-key"}
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "ok  daily-triage  (instructions/daily-triage.yaml)",
        "  not run: context callable today (salvagelane.context_sources:today); the prompt "
        "could not be rendered without it: prompt.user at template line 1 needs the value of "
        "'today', from salvagelane.context_sources:today (check --resolve imports and runs it)",
    ]
