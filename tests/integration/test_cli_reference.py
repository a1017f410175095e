"""The documentation's command-line reference (docs/reference/cli.md) is the real
``--help`` output, for every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return load_script("cli_reference")


def _page(repo_root: Path) -> str:
    return (repo_root / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")


def test_the_script_reads_the_reference_page(reference: ModuleType, repo_root: Path) -> None:
    page = repo_root / "docs" / "reference" / "cli.md"
    assert page == reference.REFERENCE


def test_every_help_block_in_the_reference_is_the_real_help(
    reference: ModuleType, repo_root: Path
) -> None:
    drifts = reference.drifted(_page(repo_root))
    assert not drifts, (
        "docs/reference/cli.md help blocks differ from the CLI "
        "(run scripts/cli_reference.py --write): "
        + ", ".join(f"salvagelane{d.command}" for d in drifts)
    )


def test_every_command_has_a_help_block_in_the_reference(
    reference: ModuleType, repo_root: Path
) -> None:
    assert reference.missing(_page(repo_root)) == []


def test_the_check_notices_a_changed_block(reference: ModuleType, repo_root: Path) -> None:
    page = _page(repo_root)
    marker = "<!-- help: salvagelane -->\n```console\n"
    assert marker in page
    tampered = page.replace(marker, marker + "$ an old line\n", 1)
    assert [d.command for d in reference.drifted(tampered)] == [""]


def test_the_check_passes_as_ci_would_run_it(repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(repo_root / "scripts" / "cli_reference.py"), "--check"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
