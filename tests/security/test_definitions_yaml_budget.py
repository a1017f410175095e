"""Issue 12, item 3: a YAML alias bomb must not reach the definition's canonical hash.

The loader bounds the size of a definition with every alias expanded (the bytes of its
strings and keys) before anything serialises or hashes it, and refuses a larger one on
one line naming the file, the field and the limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from salvagelane.definitions import load_instruction, resolve_context
from salvagelane.definitions.yaml_source import (
    MAX_EXPANDED_BYTES,
    MAX_NESTING,
    YamlProblem,
    parse_yaml,
)
from salvagelane.errors import DefinitionError
from tests.support.definitions import DEFINITION, add_context, copy_project, run_measured

MiB = 1024 * 1024


def alias_bomb(definition: Path, *, anchored: int, aliases: int) -> int:
    """One ``anchored``-byte string, anchored once and aliased ``aliases`` times in a
    context value; the file's size."""
    add_context(
        definition,
        f'  pad:\n    value: &a "{"x" * anchored}"\n'
        f"  bomb:\n    value: [{', '.join(['*a'] * aliases)}]\n",
    )
    return definition.stat().st_size


@pytest.mark.parametrize(
    ("anchored", "aliases"),
    [
        (200_000, 5_000),  # 220 KB: 2.0 GB and 21 s in `check` before the budget
        (500_000, 120_000),  # 980 KB, under the 1 MiB file cap: MemoryError before
    ],
)
def test_check_refuses_an_alias_bomb_quickly_and_in_little_memory(
    tmp_path: Path, anchored: int, aliases: int
) -> None:
    project = copy_project(tmp_path)
    size = alias_bomb(project / DEFINITION, anchored=anchored, aliases=aliases)
    assert size < MiB  # the file cap does not catch it: the budget must

    proc = run_measured("check", "instructions", cwd=project)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith(
        "error  instructions/daily-triage.yaml: context.bomb.value: expected at most "
        f"{MAX_EXPANDED_BYTES} bytes (4 MiB) of text once aliases are expanded"
    ), lines[0]
    assert "(line " in lines[0]
    # The acceptance bound of issue 12: under 100 MB. (Python with the CLI's imports is
    # about 40 MB of it.)
    assert proc.peak_rss_bytes < 100 * MiB, proc.peak_rss_bytes


def test_aliases_within_the_budget_still_load(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    definition = project / DEFINITION
    add_context(
        definition,
        '  base:\n    value: &base {tone: "plain", limit: 3}\n'
        "  same:\n    value: *base\n"
        "  merged:\n    value: {<<: *base, limit: 4}\n",
    )
    context = resolve_context(load_instruction(definition))
    assert context["same"] == {"tone": "plain", "limit": 3}
    assert context["merged"] == {"tone": "plain", "limit": 4}


def test_a_definition_just_over_the_budget_through_aliases_is_refused(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    definition = project / DEFINITION
    # 64 KiB x 65 aliases: 4 MiB + 64 KiB once expanded, from a 64 KiB file.
    alias_bomb(definition, anchored=64 * 1024, aliases=65)
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    message = str(caught.value)
    assert message.startswith(f"{definition}: context.bomb.value: expected at most ")
    assert "once aliases are expanded" in message
    assert caught.value.paths == ("context.bomb.value",)


def test_a_context_file_alias_bomb_is_refused_when_resolved(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    definition = project / DEFINITION
    bomb = project / "instructions" / "context" / "bomb.yaml"
    bomb.write_text(
        f'pad: &a "{"y" * 100_000}"\nmany: [{", ".join(["*a"] * 200)}]\n', encoding="utf-8"
    )
    add_context(definition, "  bomb:\n    file: context/bomb.yaml\n")
    instruction = load_instruction(definition)
    with pytest.raises(DefinitionError) as caught:
        resolve_context(instruction)
    # A context file may be as large as its 16 MiB file cap, aliases expanded included.
    assert "context.bomb.file: " in str(caught.value)
    assert "16 MiB" in str(caught.value)
    assert "once aliases are expanded" in str(caught.value)


def test_deep_nesting_is_refused_without_crashing_the_parser(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    depth = 200_000  # libyaml's composer recurses in C: this deep, it would overflow
    add_context(project / DEFINITION, f"  deep:\n    value: {'[' * depth}{']' * depth}\n")
    line = (project / DEFINITION).read_text(encoding="utf-8").splitlines().index(
        f"    value: {'[' * depth}{']' * depth}"
    ) + 1
    proc = run_measured("check", "instructions", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == ""
    # One line naming the file, the field and the line, whichever layer noticed first
    # (PyYAML 6.0.4's libyaml stops at 1,000 flow levels; 6.0.3's does not).
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith("error  instructions/daily-triage.yaml: context.deep.value[0]"), (
        lines[0]
    )
    assert f"expected at most {MAX_NESTING} levels of nesting" in lines[0]
    assert lines[0].endswith(f"(line {line})"), lines[0]


def _flow(depth: int) -> str:
    return f"a:\n  b: {'[' * depth}{']' * depth}\n"


def _block(depth: int) -> str:
    return "".join(f"{'  ' * level}k{level}:\n" for level in range(depth)) + f"{'  ' * depth}v\n"


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        # Just past the budget: salvagelane's own event count notices it.
        (_flow(MAX_NESTING + 1), 2, ("a", "b", 0, 0, 0, 0)),
        # libyaml's scanner (PyYAML 6.0.4) refuses 1,000 flow levels before any event.
        (_flow(999), 2, ("a", "b", 0, 0, 0, 0)),
        (_flow(1_000), 2, ("a", "b", 0, 0, 0, 0)),
        (_flow(200_000), 2, ("a", "b", 0, 0, 0, 0)),
        # Block mappings nest by indentation, one level per line.
        (_block(MAX_NESTING + 5), MAX_NESTING + 1, ("k0", "k1", "k2", "k3", "k4", "k5")),
        (_block(1_500), MAX_NESTING + 1, ("k0", "k1", "k2", "k3", "k4", "k5")),
    ],
    ids=["flow-129", "flow-999", "flow-1000", "flow-200000", "block-133", "block-1500"],
)
def test_nesting_past_the_budget_names_the_path_and_line(
    text: str, line: int, path: tuple[object, ...]
) -> None:
    with pytest.raises(YamlProblem) as caught:
        parse_yaml(text)
    assert caught.value.message == f"expected at most {MAX_NESTING} levels of nesting, got more"
    assert caught.value.line == line
    assert caught.value.path == path


def test_nesting_at_the_budget_loads() -> None:
    value, _ = parse_yaml(f"a: {'[' * (MAX_NESTING - 1)}{']' * (MAX_NESTING - 1)}\n")
    depth, node = 0, value
    while isinstance(node, dict | list):
        depth += 1
        node = next(iter(node.values())) if isinstance(node, dict) else (node or [None])[0]
    assert depth == MAX_NESTING


def test_a_syntax_error_in_a_document_within_the_budget_keeps_the_parser_s_error() -> None:
    with pytest.raises(YamlProblem) as caught:
        parse_yaml("a: [1, 2\nb: 3\n")
    assert caught.value.message.startswith("expected valid YAML, got a syntax error: ")
    assert caught.value.line is not None
    assert caught.value.path is None
