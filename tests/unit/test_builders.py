"""speedups.builder: a positional constructor that gives exactly what the dataclass gives.

The salvage core builds its per-item values (spans, candidates, parses, reviews,
records) through builders that skip the frozen ``__init__``. Each must give an
object equal to the keyword-built one, as frozen, as collectable and as picklable;
and a builder must refuse any class or field list for which that would not hold.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
import weakref
from typing import Any

import pytest

from salvagelane.core import speedups
from salvagelane.core.guardrails import Rejection, Review, under_review
from salvagelane.core.records import (
    AcceptedItem,
    CorrectionSignal,
    QuarantinedItem,
    Reason,
    SalvageResult,
    SignalCode,
    Span,
    new_accepted,
    new_quarantined,
    new_result,
    new_signal,
    new_span,
)
from salvagelane.core.scan_values import (
    Candidate,
    Closure,
    EnvelopeField,
    ScanResult,
    new_candidate,
    new_envelope_field,
    new_scan_result,
)

SPAN = Span(start=3, end=9)
SIGNAL = CorrectionSignal(code=SignalCode.OVER_LIMIT, path="$.rank", expected="e", received="r")
CANDIDATE = Candidate(index=2, span=SPAN, closure=Closure.CLOSED, depth=1)

# (builder, positional values, the same object built by keyword)
CASES: list[tuple[Any, tuple[Any, ...], Any]] = [
    (new_span, (3, 9), SPAN),
    (
        new_signal,
        (SignalCode.OVER_LIMIT, "$.rank", "e", "r", ""),
        SIGNAL,
    ),
    (
        new_candidate,
        (2, SPAN, Closure.BROKEN, 4, "a defect", True),
        Candidate(
            index=2, span=SPAN, closure=Closure.BROKEN, depth=4, defect="a defect", stray=True
        ),
    ),
    (
        new_accepted,
        (2, {"rank": 1, "tags": ["a"]}, SPAN, (), ()),
        AcceptedItem(index=2, data={"rank": 1, "tags": ["a"]}, span=SPAN),
    ),
    (
        new_quarantined,
        (2, Reason.OVER_LIMIT, SIGNAL, SPAN, '{"rank"', "ab" * 32, {"rank": 9}),
        QuarantinedItem(
            index=2,
            reason=Reason.OVER_LIMIT,
            error=SIGNAL,
            span=SPAN,
            snippet='{"rank"',
            sha256="ab" * 32,
            repaired={"rank": 9},
        ),
    ),
    (
        new_envelope_field,
        (("data", "summary"), SPAN, Closure.CLOSED, 0, "", "duplicate key"),
        EnvelopeField(
            path=("data", "summary"),
            span=SPAN,
            closure=Closure.CLOSED,
            depth=0,
            conflict="duplicate key",
        ),
    ),
    (
        new_scan_result,
        (("items",), SPAN, SPAN, True, (CANDIDATE,), (), False, (), 4),
        ScanResult(
            items_path=("items",),
            root=SPAN,
            container=SPAN,
            container_closed=True,
            candidates=(CANDIDATE,),
            envelope=(),
            truncated=False,
            anomalies=(),
            steps=4,
        ),
    ),
    (
        new_result,
        (
            True,
            False,
            True,
            {"summary": "s"},
            (),
            (),
            (),
            "stop",
            ("a note",),
            "lines",
            {"schema": 3},
        ),
        SalvageResult(
            document_valid=True,
            truncated=False,
            items_found=True,
            envelope={"summary": "s"},
            items=(),
            quarantined=(),
            finish_reason="stop",
            notes=("a note",),
            framing="lines",
            folded={"schema": 3},
        ),
    ),
]


@pytest.mark.parametrize(("build", "values", "expected"), CASES)
def test_a_built_value_is_the_keyword_built_one(
    build: Any, values: tuple[Any, ...], expected: Any
) -> None:
    built = build(*values)
    assert type(built) is type(expected)
    assert built == expected
    try:
        expected_hash = hash(expected)
    except TypeError:  # a record holding a dict: unhashable either way
        with pytest.raises(TypeError):
            hash(built)
    else:
        assert hash(built) == expected_hash
    assert repr(built) == repr(expected)
    assert pickle.loads(pickle.dumps(built)) == expected
    assert copy.deepcopy(built) == expected
    first = dataclasses.fields(built)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, first, None)


def test_a_review_enters_the_chain_as_the_dataclass_default_would() -> None:
    fresh = under_review(CANDIDATE, "{}")
    assert fresh == Review(candidate=CANDIDATE, text="{}")
    parsed = under_review(CANDIDATE, "{}", {})
    assert parsed == Review(candidate=CANDIDATE, text="{}", data={})
    assert parsed != fresh


def test_a_built_value_in_a_reference_cycle_is_collected() -> None:
    # The compiled builder allocates through the class, so the collector tracks it.
    class Marker:
        pass

    marker = Marker()
    alive = weakref.ref(marker)
    data: list[Any] = [marker]
    item = new_accepted(0, data, SPAN, (), ())
    data.append(item)  # item -> data -> item
    del data, item, marker
    gc.collect()
    assert alive() is None


def test_a_builder_takes_exactly_its_fields_by_position() -> None:
    with pytest.raises(TypeError, match="expected 2 values, got 1"):
        new_span(3)
    with pytest.raises(TypeError, match="expected 2 values, got 3"):
        new_span(3, 9, 12)
    if speedups.COMPILED:
        with pytest.raises(TypeError, match="by position"):
            new_span(3, end=9)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checked:
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


@dataclasses.dataclass(kw_only=True, slots=True)
class Mutable:
    low: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unslotted:
    low: int


@pytest.mark.parametrize(
    ("cls", "names", "message"),
    [
        (Span, ("end", "start"), r"fields are \('start', 'end'\)"),  # reordered: values would swap
        (Span, ("start",), "fields are"),
        (Checked, ("low", "high"), "__post_init__ would be skipped"),
        (Mutable, ("low",), "not a frozen, slotted dataclass"),
        (Unslotted, ("low",), "not a frozen, slotted dataclass"),
        (Rejection, ("reason", "signal"), "fields are"),
    ],
)
def test_a_builder_is_refused_where_it_would_differ(
    cls: type, names: tuple[str, ...], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        speedups.builder(cls, *names)


def test_the_python_builder_gives_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the extension, builders fall back to the dataclass's own __init__.
    monkeypatch.setattr(speedups, "_COMPILED", None)
    build = speedups.builder(Candidate, "index", "span", "closure", "depth", "defect", "stray")
    assert build(2, SPAN, Closure.CLOSED, 1, "", False) == CANDIDATE
    with pytest.raises(TypeError, match="expected 6 values, got 2"):
        build(2, SPAN)


@pytest.mark.skipif(not speedups.COMPILED, reason="the compiled scan loops were not built")
def test_the_compiled_builder_refuses_a_class_without_those_slots() -> None:
    from salvagelane.core import _speedups

    with pytest.raises(TypeError, match="is not a slot of"):
        _speedups.builder(Span, ("start", "middle"))
    with pytest.raises(TypeError, match="is not a slot of"):
        _speedups.builder(Unslotted, ("low",))
    with pytest.raises(TypeError, match="a class and a tuple"):
        _speedups.builder(Span, ["start", "end"])
