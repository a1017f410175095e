"""The README's CLI reference is the real ``--help`` output, for every command."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def reference(repo_root: Path) -> ModuleType:
    path = repo_root / "scripts" / "cli_reference.py"
    spec = importlib.util.spec_from_file_location("cli_reference", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cli_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_every_help_block_in_the_readme_is_the_real_help(
    reference: ModuleType, repo_root: Path
) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    drifts = reference.drifted(readme)
    assert not drifts, (
        "README help blocks differ from the CLI (run scripts/cli_reference.py --write): "
        + ", ".join(f"salvagelane{d.command}" for d in drifts)
    )


def test_every_command_has_a_help_block_in_the_readme(
    reference: ModuleType, repo_root: Path
) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    assert reference.missing(readme) == []


def test_the_check_notices_a_changed_block(reference: ModuleType, repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    marker = "<!-- help: salvagelane -->\n```console\n"
    assert marker in readme
    tampered = readme.replace(marker, marker + "$ an old line\n", 1)
    assert [d.command for d in reference.drifted(tampered)] == [""]
