"""What the tests of a run share: a copy of the example project with its daily-triage
definition edited, a scripted provider on 127.0.0.1 (or the replay fixture), a migrated
store, and an executor over them.

Used by tests/integration and tests/security. A test module takes a fixture here
(``provider``, ``store``) by importing it and naming it in its ``__all__``; ``store``
needs the ``database_url`` fixture.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import pytest

from salvagelane.connectors import (
    Connector,
    OpenAICompatibleConnector,
    OpenAICompatibleSettings,
    ReplayConnector,
)
from salvagelane.definitions import Instruction, load_instruction
from salvagelane.runtime.executor import Executor
from salvagelane.store import Store, upgrade
from tests.support.cli import FIXTURE, ROOT, salvagelane
from tests.support.provider import Scripted, ScriptedServer, connector_args

JSON_HEADERS = {"Content-Type": "application/json"}
COMPLETE: dict[str, Any] = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
"""The replayed report as it was meant to be, every recommendation whole."""


def items(count: int) -> list[dict[str, Any]]:
    """The first ``count`` recommendations of :data:`COMPLETE`, ranked 1 to ``count``."""
    return [
        dict(item, rank=rank) for rank, item in enumerate(COMPLETE["recommendations"][:count], 1)
    ]


# --- the project -------------------------------------------------------------------------------


def replaced(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each key, which must occur exactly once, replaced by its value."""
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class Project:
    """A copy of the example project whose daily-triage definition is edited per test.
    The serve and run-definition tests extend it with what they need besides."""

    root: Path

    @classmethod
    def create(cls, root: Path, **fields: Any) -> Self:
        shutil.copytree(ROOT / "instructions", root / "instructions")
        shutil.copytree(ROOT / "schemas", root / "schemas")
        return cls(root=root, **fields)

    @property
    def instructions(self) -> Path:
        return self.root / "instructions"

    @property
    def definition(self) -> Path:
        return self.instructions / "daily-triage.yaml"

    def edit(self, replacements: Mapping[str, str], append: str = "") -> Path:
        """Replace each text (which must occur once) in the definition; append ``append``."""
        text = replaced(self.definition.read_text(encoding="utf-8"), replacements)
        self.definition.write_text(text + append, encoding="utf-8")
        return self.definition

    def replace_in(self, path: Path, old: str, new: str) -> None:
        """Replace ``old``, which must occur once, in the project file ``path``."""
        path.write_text(replaced(path.read_text(encoding="utf-8"), {old: new}), encoding="utf-8")

    def instruction(self, **replacements: str) -> Instruction:
        """The definition, after :meth:`edit` with ``replacements``, loaded."""
        return load_instruction(self.edit(replacements))

    def run(self, database: str, env: dict[str, str], *args: str) -> Any:
        """``salvagelane run daily-triage`` of this project, logging JSON."""
        return salvagelane(
            "run",
            "daily-triage",
            "--instructions",
            str(self.instructions),
            *args,
            database=database,
            env={"SALVAGELANE_LOG_FORMAT": "json", **env},
        )


def aimed_at(provider: ScriptedServer, key_env: str | None = None) -> dict[str, str]:
    """The edits that point the definition's connector at ``provider`` (and at the key in
    ``key_env``), for :meth:`Project.edit`."""
    edits = {"base_url: https://openrouter.ai/api/v1": f"base_url: {provider.base_url}"}
    if key_env is not None:
        edits["api_key_env: OPENROUTER_API_KEY"] = f"api_key_env: {key_env}"
    return edits


# --- the provider ------------------------------------------------------------------------------


@pytest.fixture
def provider() -> Iterator[ScriptedServer]:
    """A scripted HTTP server on 127.0.0.1, serving the provider and a webhook alike."""
    with ScriptedServer() as server:
        yield server


def chat_completion(
    content: str, *, finish: str = "stop", usage: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """An OpenAI-compatible chat completion answering ``content``."""
    return {
        "id": "gen-1",
        "model": "test/model",
        "choices": [
            {"message": {"role": "assistant", "content": content}, "finish_reason": finish}
        ],
        "usage": dict(usage or {"prompt_tokens": 100, "completion_tokens": 50}),
    }


def chat_answer(content: str, **options: Any) -> Scripted:
    """:func:`chat_completion` as the provider's reply."""
    body = json.dumps(chat_completion(content, **options)).encode()
    return Scripted(body=body, headers=JSON_HEADERS)


def openai_connector_for(
    client: httpx.Client, base_url: str, *, key: str, **options: Any
) -> Callable[[Instruction], Connector]:
    """An executor's ``connector_for``: each definition's OpenAI-compatible connector,
    calling ``base_url`` with ``key`` (never read from the environment)."""

    def build(instruction: Instruction) -> Connector:
        return OpenAICompatibleConnector(
            client,
            **connector_args(
                OpenAICompatibleSettings,
                {
                    "base_url": base_url,
                    "model": instruction.connector.model,
                    "api_key_env": instruction.connector.api_key_env,
                    "key_lookup": lambda name: key,
                    **options,
                },
            ),
        )

    return build


# --- the store and the executor ----------------------------------------------------------------


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A store on each backend's database, migrated."""
    upgrade(database_url)
    with Store.open(database_url) as opened:
        yield opened


def replay_executor(store: Store, **options: Any) -> Executor:
    """An executor whose every model call answers with the replay fixture."""
    return Executor(store, connector_for=lambda instruction: ReplayConnector(FIXTURE), **options)
