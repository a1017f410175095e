"""``salvagelane try`` and ``salvagelane prompt`` print what a model, a provider and a
definition's context produced: never raw to the terminal (issue 30).

A saved model output (``try --sample``), a live answer (``try --live``: the model's text,
its model name and finish reason) and a context value (``prompt``) carry terminal control
sequences; every view shows them as visible escapes, in a pipe and at a terminal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.security.test_terminal_output import (
    HOSTILE,
    at_a_terminal,
    decoded,
    hostile_output,
    in_a_pipe,
    unsafe,
)
from tests.support.cli import salvagelane
from tests.support.provider import Scripted, ScriptedServer
from tests.support.run_setup import Project, aimed_at, chat_answer, items, provider

__all__ = ["provider"]

ESCAPED = r"\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\r\x1b]0;owned\x07\x9b31m\u202egnp.exe"
KEY_ENV = "SALVAGELANE_TEST_API_KEY"


def test_try_and_prompt_show_hostile_text_as_escapes(
    tmp_path: Path, provider: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-try-terminal-test-key-0001")  # the commands inherit it
    project = Project.create(tmp_path / "project")
    project.edit(aimed_at(provider, KEY_ENV))
    # A context value a prompt shows (a workstream's title, from a file or a service).
    project.replace_in(
        project.instructions / "context" / "workstreams.yaml",
        "title: Move billing to the new ledger",
        f"title: {json.dumps('Move billing ' + HOSTILE)}",
    )
    sample = tmp_path / "output.txt"
    sample.write_text(hostile_output(), encoding="utf-8")
    answer = {
        "id": "gen-hostile",
        "model": "model" + HOSTILE,
        "choices": [
            {
                "message": {"role": "assistant", "content": hostile_output()},
                "finish_reason": "stop",
                "native_finish_reason": "stop" + HOSTILE,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 500},
    }
    database = tmp_path / "salvagelane.db"
    instructions = ("--instructions", str(project.instructions))
    views = {
        "try --sample": ("try", "daily-triage", "--sample", str(sample), *instructions),
        "try --live": ("try", "daily-triage", "--live", *instructions),
        "prompt": ("prompt", "daily-triage", *instructions),
    }
    for where, runner in (("pipe", in_a_pipe), ("terminal", at_a_terminal)):
        provider.script.append(Scripted(body=answer, headers={"Content-Type": "application/json"}))
        shown: dict[str, str] = {}
        for name, args in views.items():
            code, stdout, stderr = runner(*args, database=f"sqlite:///{database}")
            assert unsafe(decoded(stderr)) == [], (where, name, decoded(stderr))
            shown[name] = decoded(stdout)
            assert code == 0, (where, name, decoded(stderr))
        leaks = {name: sorted(set(unsafe(text))) for name, text in shown.items() if unsafe(text)}
        assert leaks == {}, where
        # Shown, not dropped: each where it belongs.
        assert f"  {ESCAPED}: 1" in shown["try --sample"]  # the envelope key
        assert r"\x1b]52;c;cm0g" in shown["try --sample"]  # a quarantined item's snippet
        assert f"- billing-migration: Move billing {ESCAPED}" in shown["prompt"]
        assert (
            f"finish stop (provider: stop{ESCAPED}), HTTP 200, model model{ESCAPED}"
            in (shown["try --live"])
        )
    assert not database.exists()


def test_try_live_redacts_a_key_the_provider_echoes_as_a_run_does(
    tmp_path: Path, provider: ScriptedServer
) -> None:
    key = "sk-try-echo-test-key-0002"
    project = Project.create(tmp_path / "project")
    project.edit(aimed_at(provider, KEY_ENV))
    echoed = items(2)
    echoed[0]["why"] = f"The request carried Bearer {key}; billing first."
    content = json.dumps({"summary": f"key {key}", "recommendations": echoed})
    provider.script.extend([chat_answer(content), chat_answer(content)])
    shown = []
    for as_json in ((), ("--json",)):
        tried = salvagelane(
            "try", "daily-triage", "--live", "--instructions", str(project.instructions),
            *as_json, env={KEY_ENV: key},
        )  # fmt: skip
        assert tried.returncode == 0, tried.stderr
        assert key not in tried.stdout + tried.stderr
        shown.append(tried.stdout)
    assert "[REDACTED]" in shown[0]
    trial = json.loads(shown[1])
    assert trial["answer"]["redactions"] == 2
    assert trial["payload"]["envelope"]["summary"] == "key [REDACTED]"
