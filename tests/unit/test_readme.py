"""README.md stays a front page: under 400 lines, the two quick-start commands, and every
relative link it makes resolves in the checkout (the site's pages are checked by
`mkdocs build --strict`, `make docs`)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 400

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
"""An inline link or image: ``[text](target)``, ``![alt](target "title")``."""
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)


def _prose(markdown: str) -> str:
    """The text outside fenced code blocks and code spans, where links are links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", markdown))


def relative_links(markdown: str) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(markdown))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)
    ]


def github_slug(heading: str) -> str:
    """The anchor GitHub (and mkdocs' default toc) gives a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(markdown: str) -> set[str]:
    return {
        github_slug(match[1])
        for match in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", markdown), re.MULTILINE)
    }


def broken(markdown: str, base: Path) -> list[str]:
    """The relative links of MARKDOWN (a file in BASE) that name no file, or no heading."""
    found = []
    for target in relative_links(markdown):
        path, _, anchor = unquote(target).partition("#")
        file = (base / path).resolve() if path else None
        if file is not None and not file.exists():
            found.append(target)
        elif anchor:
            text = markdown if file is None else file.read_text(encoding="utf-8")
            if anchor not in anchors(text):
                found.append(target)
    return found


def test_the_readme_is_under_400_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_LINES, f"README.md has {lines} lines; move the detail into docs/"


def test_every_relative_link_in_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    assert relative_links(text), "no relative link found: the link pattern is wrong"
    assert broken(text, ROOT) == []


def test_the_quick_start_is_the_two_make_commands() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1]
    first_block = re.search(r"^```console\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert first_block is not None
    commands = [line.split("#", 1)[0].strip() for line in first_block[1].splitlines()]
    assert commands == ["make demo", "make test"]


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("[a](docs/index.md) [b](docs/nope.md)", ["docs/nope.md"]),
        ("![shot](docs/img/nope.png)", ["docs/img/nope.png"]),
        ("[a](docs/) [b](SCOPE.md) [c](https://example.invalid/x.md)", []),
        ("[a](docs/adr/0001-producer-trust-boundary.md#context)", []),
        (
            "[a](docs/architecture.md#the-layers) [b](docs/architecture.md#no-such)",
            ["docs/architecture.md#no-such"],
        ),
        ("## Quick start\n[a](#quick-start) [b](#quick-stop)", ["#quick-stop"]),
        ("`[a](nope.md)`\n```text\n[b](nope.md)\n```\n", []),
    ],
)
def test_broken_links_are_found(markdown: str, expected: list[str]) -> None:
    assert broken(markdown, ROOT) == expected
