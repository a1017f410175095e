"""Fuzzing the definition loader (issue 12): random YAML with anchors, aliases, merge
keys, tags, deep nesting and huge scalars, as a whole definition, as a context value in
the bundled one, and as a context file it names.

Whatever the document, loading, resolving its context and rendering its prompt either
succeed or raise DefinitionError: never another exception, never more than bounded
memory (a 512 MiB address-space headroom) or time. The example budget is small so CI
runs it every time; ``SALVAGELANE_HYPOTHESIS=explore`` draws new examples.
"""

from __future__ import annotations

import re
import resource
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from salvagelane.definitions import load_instruction, render_prompt, resolve_context
from salvagelane.errors import DefinitionError
from tests.support.definitions import DEFINITION, add_context, copy_project, edit
from tests.support.guards import time_limit

MiB = 1024 * 1024
# The 1 MiB file, 4 MiB per definition and per value, 16 MiB per context file and 32 MiB
# per render: the loader needs a fraction of this; an alias bomb or a runaway render
# needs gigabytes.
HEADROOM = 512 * MiB

PLAIN = [
    "word", "", "~", "null", "true", "yes", "on", "No", "010", "0x1F", "0o17", "1_000",
    "12:30", "1e3", "1e999", "-1e999", ".inf", "-.Inf", ".nan", "2024-01-01", "<<", "-", "?",
    "⟪9*5000⟫", "é", "日本",
]  # fmt: skip
QUOTED = ['"a\\"b"', '"\\x01\\u202e\\U0001F600"', "'it''s'", '"\\ud800"', '""', "'#not'"]
TAGS = [
    "!!str ", "!!int ", "!!float ", "!!bool ", "!!null ", "!!binary ", "!!timestamp ",
    "!!set ", "!!omap ", "!!python/name:os.system ", "!local ", "!!map ", "!!seq ",
]  # fmt: skip
SIZES = [1, 1000, 70_000]  # anchored strings (x 100 or 5,000 aliases: over the 4 MiB budget)
HUGE = [1_000, 300_000, 1_100_000]  # one scalar (the last is over the 1 MiB file cap)
DEPTHS = [10, 127, 128, 129, 5_000, 60_000]


_REPEAT = re.compile(r"⟪([^⟪⟫]+)\*([0-9]+)⟫")


def expand(text: str) -> str:
    """``⟪xy*3⟫`` is ``xyxyxy``: examples stay short to read and to shrink."""
    return _REPEAT.sub(lambda match: match[1] * int(match[2]), text)


@st.composite
def yaml_nodes(draw: st.DrawFn, budget: int = 12) -> str:
    """One YAML node in flow style, with anchors ``&aN`` and aliases to earlier ones;
    long repetitions written ``⟪text*count⟫`` (see :func:`expand`)."""
    anchors: list[str] = []

    def node(depth: int) -> str:
        nonlocal budget
        budget -= 1
        kinds = ["scalar", "quoted", "alias", "big"]
        if depth < 4 and budget > 0:
            kinds += ["seq", "map", "map", "fanout", "deep"]
        kind = draw(st.sampled_from(kinds))
        tagged = kind != "alias" and draw(st.integers(0, 9)) == 0
        prefix = draw(st.sampled_from(TAGS)) if tagged else ""
        anchor = ""
        if kind in ("seq", "map", "big", "scalar") and draw(st.booleans()):
            anchor = f"&a{len(anchors)} "
        if kind == "scalar":
            text = draw(st.sampled_from(PLAIN))
            text = text if text not in ("", "-", "?") else f'"{text}"'
        elif kind == "quoted":
            text = draw(st.sampled_from(QUOTED))
        elif kind == "alias":
            # Earlier anchors, an undefined one, or one still open (a recursive alias).
            return "*" + draw(st.sampled_from([*anchors, "nowhere"]))
        elif kind == "big":
            text = f'"⟪x*{draw(st.sampled_from(HUGE))}⟫"'
        elif kind == "seq":
            if anchor:
                anchors.append(anchor[1:].strip())
            items = [node(depth + 1) for _ in range(draw(st.integers(0, 3)))]
            return f"{anchor}{prefix}[{', '.join(items)}]"
        elif kind == "map":
            if anchor:
                anchors.append(anchor[1:].strip())
            entries = []
            for _ in range(draw(st.integers(0, 3))):
                key = draw(st.sampled_from(["k", "k2", "k", "id", "<<", "1", "null", "*a0"]))
                entries.append(f"{key}: {node(depth + 1)}")
            return f"{anchor}{prefix}{{{', '.join(entries)}}}"
        elif kind == "fanout":
            name = f"b{len(anchors)}"
            anchors.append(name)
            size = draw(st.sampled_from(SIZES))
            count = draw(st.sampled_from([2, 100, 5_000, 60_000]))
            return f'[&{name} "⟪y*{size}⟫"⟪, *{name}*{count}⟫]'
        else:  # deep
            depth_ = draw(st.sampled_from(DEPTHS))
            return f"⟪[*{depth_}⟫{node(depth + 4)}⟪]*{depth_}⟫"
        if anchor:
            anchors.append(anchor[1:].strip())
        return f"{anchor}{prefix}{text}"

    return node(0)


@pytest.fixture(scope="module")
def workspace() -> Iterator[Callable[[], Path]]:
    """A fresh copy of the project per example (Hypothesis reuses the test's fixtures)."""
    root = Path(tempfile.mkdtemp(prefix="salvagelane-fuzz-"))
    template = copy_project(root / "template")
    count = 0

    def fresh() -> Path:
        nonlocal count
        count += 1
        project = root / f"example-{count}"
        shutil.copytree(template, project)
        return project

    yield fresh
    shutil.rmtree(root)


@contextmanager
def memory_headroom(extra: int) -> Iterator[None]:
    """Within the block this process may map at most ``extra`` more bytes than it has:
    past that an allocation raises MemoryError, which fails the property. (tracemalloc
    would measure the peak exactly, at four times the run time.)"""
    status = Path("/proc/self/status").read_text(encoding="ascii")
    found = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    assert found is not None, status
    mapped = int(found[1]) * 1024
    previous = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, previous)


def load_resolve_render(definition: Path) -> str | None:
    """What `check` and a run do up to calling the model (the bundled definition's one
    callable is the project's own, salvagelane.context_sources:today); the refusal, if any."""
    try:
        instruction = load_instruction(definition)
        render_prompt(instruction, resolve_context(instruction))
    except DefinitionError as exc:
        event(f"refused: {str(exc).split(': ', 2)[-1][:40]}")
        return str(exc)
    event("loaded and rendered")
    return None


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    node=yaml_nodes(),
    where=st.sampled_from(["document", "context-value", "context-file", "prompt-data"]),
)
def test_the_loader_loads_or_refuses_within_bounds(
    workspace: Callable[[], Path], node: str, where: str
) -> None:
    project = workspace()
    definition = project / DEFINITION
    node = expand(node)
    if where == "document":
        definition.write_text(node + "\n", encoding="utf-8")
    elif where == "context-value":
        add_context(definition, f"  fuzz:\n    value: {node}\n")
    elif where == "context-file":
        (project / "instructions" / "fuzz.yaml").write_text(node + "\n", encoding="utf-8")
        add_context(definition, "  fuzz:\n    file: fuzz.yaml\n")
    else:  # the value is rendered into the prompt, aliases and all
        add_context(definition, f"  fuzz:\n    value: {node}\n")
        edit(definition, "Today is {{ today }}.", "Today is {{ today }}. {{ fuzz }}")

    with time_limit(60, "loading a fuzzed definition"), memory_headroom(HEADROOM):
        refusal = load_resolve_render(definition)
    assert refusal is None or "\n" not in refusal
