"""The scanner's hot loops: compiled when the extension was built, Python otherwise.

``_speedups.c`` answers questions the pure-Python core answers too, faster
(docs/adr/0015-compiled-scan-loops.md): where a well-formed container ends, the
run of intact items from a position, whether a span is one strict JSON value
whose keys are provably unique, and, for a text that is one, where its items and
envelope members are (:data:`strict_items`). It also builds the values they produce
(:func:`builder`). The Python answers are the reference: the tests run both and
require the same scan results and the same verdicts. This is the one module that imports the
extension; :func:`use_python` lets the tests (and a benchmark's baseline) run
the reference loops on a machine that has the compiled ones.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

from salvagelane.core import lexis

# check_strict flags (the same values as in _speedups.c).
STRICT_GRAMMAR = 1  # one strict JSON value (RFC 8259), whitespace around it allowed
DUPLICATE_KEY = 2  # two members of one object spelled the same
KEYS_UNPROVEN = 4  # keys raw text cannot compare: an escape in one, or very many members
NEEDS_CHECK = 8  # \u0000 or a surrogate escape, a raw surrogate, an integer beyond 18 digits
NOT_CHECKED = -1  # no compiled check: the caller's own path decides

MatchContainer = Callable[[str, int, int], "tuple[int, int] | None"]
CheckStrict = Callable[[str, int, int], int]
ItemRun = Callable[[str, int, str, int, int, int], "tuple[list[int], int, bool, int]"]
StrictItems = Callable[..., "tuple[int, int, int, int, tuple[Any, ...], list[int]] | None"]
V = TypeVar("V")


def _python_match_container(text: str, start: int, bound: int) -> tuple[int, int] | None:
    """What the compiled loop answers: one regex call for the usual shallow item,
    bracket by bracket deeper."""
    for depth, pattern in enumerate(lexis.SHALLOW_CONTAINERS, start=1):
        shallow = pattern.match(text, start, bound)
        if shallow is not None:
            return shallow.end(), depth
    return lexis.container_end(text, start, bound)


def _not_checked(text: str, start: int, end: int) -> int:
    return NOT_CHECKED


def _load() -> ModuleType | None:
    # By its full name, not ``from salvagelane.core import``: that would import the core's
    # package from one of its own modules (an import cycle).
    try:
        compiled: ModuleType = importlib.import_module("salvagelane.core._speedups")
    except ImportError:  # built without a C compiler: the Python loops run
        return None
    return compiled


_COMPILED = _load()
COMPILED = _COMPILED is not None
"""Whether the compiled loops were built and load (``salvagelane --version`` says)."""

match_container: MatchContainer = (
    _COMPILED.match_container if _COMPILED is not None else _python_match_container
)
"""``(end, depth)`` of the well-formed container opening at ``start``, closed before
``bound``; None if it is not closed there, a string in it is not well formed, or
a closer does not match its opener."""

check_strict: CheckStrict = _COMPILED.check_strict if _COMPILED is not None else _not_checked
"""0 when ``text[start:end]`` is not one strict JSON value, else ``STRICT_GRAMMAR``
plus flags; ``NOT_CHECKED`` without the compiled loops."""

item_run: ItemRun | None = _COMPILED.item_run if _COMPILED is not None else None
"""``(spans, pos, separated, first_indent)``: the run of intact items from ``pos`` the
scanner's items loop would take one by one on its fast path (see ``_speedups.c``).
None without the compiled loops: the scanner then takes them one by one."""

strict_items: StrictItems | None = _COMPILED.strict_items if _COMPILED is not None else None
"""``strict_items(text, path, make_span, make_candidate, closed)``: ``(root_start,
root_end, list_start, list_end, candidates, members)`` when ``text`` is proven one
strict JSON value (``check_strict`` answers exactly ``STRICT_GRAMMAR``) whose root
holds an array at the path of keys; else None. ``candidates`` holds one per element,
made by the two constructors; ``members`` is flat (level, key start, key end, start,
end, depth per member of an object on the path, off it). None without the compiled
loops."""


@contextmanager
def use_python() -> Iterator[None]:
    """Run the reference Python loops inside the block (tests, benchmark baselines)."""
    global match_container, check_strict, item_run, strict_items
    saved = match_container, check_strict, item_run, strict_items
    match_container, check_strict, item_run = _python_match_container, _not_checked, None
    strict_items = None
    try:
        yield
    finally:
        match_container, check_strict, item_run, strict_items = saved


@contextmanager
def without_strict_scan() -> Iterator[None]:
    """Scan every text leniently inside the block, valid or not (tests, benchmarks)."""
    global strict_items
    saved = strict_items
    strict_items = None
    try:
        yield
    finally:
        strict_items = saved


def builder(cls: type[V], *names: str) -> Callable[..., V]:
    """A positional constructor of ``cls``, a frozen, slotted dataclass, for hot loops.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    which costs more per item than the compiled loops: the compiled builder stores
    the values in the slots directly, as unpickling does. ``names`` must be the
    fields in order, so that a reordered field fails here, at import, rather than
    swapping values; a ``__post_init__`` would be skipped, so it is refused.
    """
    fields = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    if names != fields:
        raise TypeError(f"builder of {cls.__name__}: fields are {fields}, not {names}")
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"builder of {cls.__name__}: not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"builder of {cls.__name__}: its __post_init__ would be skipped")
    if _COMPILED is not None:
        compiled: Callable[..., V] = _COMPILED.builder(cls, names)
        return compiled

    def build(*values: Any) -> V:
        if len(values) != len(names):
            raise TypeError(
                f"builder of {cls.__name__}: expected {len(names)} values, got {len(values)}"
            )
        return cls(**dict(zip(names, values, strict=True)))

    return build
