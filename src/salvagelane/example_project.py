"""The example project ``salvagelane init`` writes: the daily-triage instruction, what it
refers to, and the recorded truncated output to replay.

One source of truth: the files live once, where the repository uses them
(``instructions/``, ``schemas/``, ``tests/fixtures/daily-triage-truncated/``), and
``pyproject.toml`` maps them into the wheel under ``salvagelane/example/`` (hatch
``force-include``, entries whose target starts with ``salvagelane/example/``). An
installed salvagelane reads that package data with :mod:`importlib.resources`. A source
checkout (``PYTHONPATH=src``, or an editable install, whose package is ``src/salvagelane``)
has no ``example/`` in the package: there the same ``force-include`` table is read from
``pyproject.toml`` and the repository's own files are copied, so ``init`` in a checkout
writes exactly what the wheel would ship, without a second copy to keep in step. (An
editable install also copies the force-included files into ``site-packages/salvagelane/``,
a directory without ``__init__.py``: Python imports the package from ``src/``, so that
snapshot is never read and cannot go stale under ``init``.)
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from salvagelane.errors import ConfigurationError

PACKAGE_DIR = "example"
"""Where the example lives inside the installed ``salvagelane`` package."""

_TARGET_PREFIX = f"salvagelane/{PACKAGE_DIR}/"


@dataclass(frozen=True, kw_only=True, slots=True)
class ExampleFile:
    """One file of the example: where it goes in the project, and its bytes' source."""

    path: PurePosixPath  # relative to the project directory
    source: Traversable


@dataclass(frozen=True, kw_only=True, slots=True)
class Written:
    """What :func:`write_example` did: the files it created, relative to ``directory``."""

    directory: Path
    files: tuple[PurePosixPath, ...]


def example_files() -> tuple[ExampleFile, ...]:
    """Every file of the example project, sorted by path: from the installed package
    data, else from the source checkout this module runs from."""
    packaged = files("salvagelane") / PACKAGE_DIR
    if packaged.is_dir():
        found = list(_walk(packaged, PurePosixPath()))
    else:
        found = _from_checkout(Path(__file__).resolve().parents[2])
    if not found:
        raise ConfigurationError(
            f"salvagelane is installed without its example project (no package data "
            f"{_TARGET_PREFIX} and no source checkout around {Path(__file__).parent}): "
            "reinstall it from a wheel or sdist"
        )
    return tuple(sorted(found, key=lambda f: f.path))


def _walk(node: Traversable, relative: PurePosixPath) -> Iterator[ExampleFile]:
    for child in node.iterdir():
        if child.name == "__pycache__":
            continue
        if child.is_dir():
            yield from _walk(child, relative / child.name)
        else:
            yield ExampleFile(path=relative / child.name, source=child)


def _from_checkout(root: Path) -> list[ExampleFile]:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    with pyproject.open("rb") as stream:
        project = tomllib.load(stream)
    table: Mapping[str, str] = (
        project.get("tool", {})
        .get("hatch", {})
        .get("build", {})
        .get("targets", {})
        .get("wheel", {})
        .get("force-include", {})
    )
    found: list[ExampleFile] = []
    for source, target in table.items():
        if not target.startswith(_TARGET_PREFIX):
            continue
        relative = PurePosixPath(target.removeprefix(_TARGET_PREFIX))
        path = root / source
        if path.is_dir():
            found.extend(_walk(path, relative))
        elif path.is_file():
            found.append(ExampleFile(path=relative, source=path))
        else:
            # The wheel build would fail on it too: say so rather than write half a project.
            raise ConfigurationError(
                f"{pyproject}: force-include names {source!r} for the example project, "
                "but there is no such file or directory"
            )
    return found


def conflicts(directory: Path, example: tuple[ExampleFile, ...]) -> list[str]:
    """The paths under ``directory`` that writing ``example`` would overwrite, or that
    are in the way of a directory it needs (a file named like one), relative to it."""
    if directory.exists() and not directory.is_dir():
        return ["."]
    clashes: set[PurePosixPath] = set()
    for item in example:
        for parent in reversed(item.path.parents[:-1]):  # instructions, instructions/context
            target = directory / parent
            if os.path.lexists(target) and not target.is_dir():
                clashes.add(parent)
        if os.path.lexists(directory / item.path):
            clashes.add(item.path)
    return [str(path) for path in sorted(clashes)]


def write_example(directory: Path, example: tuple[ExampleFile, ...]) -> Written:
    """Write ``example`` under ``directory`` (created if missing), never overwriting.

    The caller checks :func:`conflicts` first; the exclusive create here still refuses a
    file that appeared in between, rather than replace it.
    """
    written: list[PurePosixPath] = []
    for item in example:
        target = directory / item.path
        data = item.source.read_bytes()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as stream:
                stream.write(data)
        except FileExistsError as exc:
            raise ConfigurationError(
                f"{target}: appeared while the example was being written; not overwritten"
            ) from exc
        except OSError as exc:
            raise ConfigurationError(
                f"{target}: cannot write the example: {exc.strerror or exc}"
            ) from exc
        written.append(item.path)
    return Written(directory=directory, files=tuple(written))
