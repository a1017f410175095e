"""The recorded outcome of a salvage, and the differences between two outcomes.

Pure: a ``SalvageResult`` in, an ``Outcome`` out; two outcomes in, a list of
``Difference`` out. Regression fixtures (``salvagelane.fixtures``) store an outcome as
``expected.json`` and compare it with what today's definition makes of the same raw
output.

Every candidate is identified by its source index (its position in the model's items
array), so a difference names the item the model wrote, whatever was kept around it.
Accepted items carry their data and the SHA-256 of its canonical JSON (sorted keys, no
whitespace): the hash decides equality, the data makes a diff of ``expected.json``
readable. An item accepted only after a lossless repair also carries its ``repairs``
(kind and raw offset), so a repaired item never compares equal to an original one; an
item without repairs is written as before.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.numbering import item_label, item_number
from salvagelane.core.records import (
    JSONValue,
    Repair,
    RepairKind,
    SalvageResult,
    reason_ordered,
)

OUTCOME_FORMAT = 1
"""Version of the outcome's JSON form; bumped when its meaning changes."""

MODEL_ORIGIN = "model"
REASK_ORIGIN = "reask"
_ORIGINS = (MODEL_ORIGIN, REASK_ORIGIN)


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemOutcome:
    """An accepted item: its source index, the hash of its data, the data, the
    lossless repairs it was accepted with (none for an original item), and ``origin``:
    ``model`` for an item of the answer itself, ``reask`` for one a follow-up request
    gave back (:mod:`salvagelane.core.reask`; its index is the asked item's)."""

    index: int
    sha256: str
    data: JSONValue
    repairs: tuple[Repair, ...] = ()
    origin: str = MODEL_ORIGIN

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {"index": self.index, "sha256": self.sha256, "data": self.data}
        if self.repairs:
            data["repairs"] = [repair.to_json() for repair in self.repairs]
        if self.origin != MODEL_ORIGIN:  # absent from every outcome recorded before re-asks
            data["origin"] = self.origin
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineOutcome:
    """A quarantined candidate: its source index (None for the whole output) and why."""

    index: int | None
    reason: str

    def to_json(self) -> dict[str, JSONValue]:
        return {"index": self.index, "reason": self.reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """What salvage made of one raw output, reduced to what a regression should notice."""

    status: str
    items: tuple[ItemOutcome, ...]
    quarantined: tuple[QuarantineOutcome, ...]
    envelope_keys: tuple[str, ...]
    # Rejected candidates past the quarantine bound, by reason (SalvageResult.folded).
    folded: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSONValue]:
        document: dict[str, JSONValue] = {
            "format": OUTCOME_FORMAT,
            "status": self.status,
            "envelope_keys": list(self.envelope_keys),
            "items": [item.to_json() for item in self.items],
            "quarantined": [item.to_json() for item in self.quarantined],
        }
        if self.folded:  # absent from every outcome recorded before folding existed
            document["folded"] = reason_ordered(self.folded)
        return document

    @classmethod
    def from_json(cls, document: Any) -> Outcome:
        """The outcome ``document`` describes; ValueError naming the field at fault.

        An item whose ``sha256`` does not match its ``data`` is refused: the file was
        edited by hand, and which of the two is meant cannot be known.
        """
        root = _mapping(document, "$")
        version = root.get("format")
        if version != OUTCOME_FORMAT:
            raise ValueError(f"format: expected {OUTCOME_FORMAT}, got {version!r}")
        status = _string(root.get("status"), "status")
        keys = tuple(
            _string(key, f"envelope_keys[{n}]")
            for n, key in enumerate(_sequence(root.get("envelope_keys"), "envelope_keys"))
        )
        items = []
        for n, entry in enumerate(_sequence(root.get("items"), "items")):
            where = f"items[{n}]"
            item = _mapping(entry, where)
            if "data" not in item:
                raise ValueError(f"{where}.data: expected the item's data, got nothing")
            recorded = _string(item.get("sha256"), f"{where}.sha256")
            actual = canonical_sha256(item["data"])
            if recorded != actual:
                raise ValueError(
                    f"{where}.sha256: expected {actual[:12]}... (the hash of its data), got "
                    f"{recorded[:12]}...: data or hash edited by hand"
                )
            origin = _string(item.get("origin", MODEL_ORIGIN), f"{where}.origin")
            if origin not in _ORIGINS:
                raise ValueError(f"{where}.origin: expected one of {_ORIGINS}, got {origin!r}")
            items.append(
                ItemOutcome(
                    index=_index(item.get("index"), f"{where}.index"),
                    sha256=recorded,
                    data=item["data"],
                    repairs=repairs_from_json(item.get("repairs", []), f"{where}.repairs"),
                    origin=origin,
                )
            )
        quarantined = []
        for n, entry in enumerate(_sequence(root.get("quarantined"), "quarantined")):
            where = f"quarantined[{n}]"
            record = _mapping(entry, where)
            quarantined.append(
                QuarantineOutcome(
                    index=None
                    if record.get("index") is None
                    else _index(record.get("index"), f"{where}.index"),
                    reason=_string(record.get("reason"), f"{where}.reason"),
                )
            )
        folded: dict[str, int] = {}
        for reason, count in _mapping(root.get("folded", {}), "folded").items():
            folded[reason] = _index(count, f"folded.{reason}")
        return cls(
            status=status,
            items=tuple(items),
            quarantined=tuple(quarantined),
            envelope_keys=keys,
            folded=folded,
        )


def outcome_of(result: SalvageResult, *, reasked: Collection[int] = ()) -> Outcome:
    """The outcome of ``result``: status, accepted items, quarantine reasons, envelope
    keys. ``reasked``: the indices of items a follow-up request gave back."""
    return Outcome(
        status=str(result.status),
        items=tuple(
            ItemOutcome(
                index=item.index,
                sha256=canonical_sha256(item.data),
                data=item.data,
                repairs=item.repairs,
                origin=REASK_ORIGIN if item.index in reasked else MODEL_ORIGIN,
            )
            for item in result.items
        ),
        quarantined=tuple(
            QuarantineOutcome(index=item.index, reason=str(item.reason))
            for item in result.quarantined
        ),
        envelope_keys=tuple(result.envelope),
        folded=dict(result.folded),
    )


class DifferenceKind(enum.StrEnum):
    """How one candidate's fate, or the outcome as a whole, changed."""

    STATUS = "status"
    ITEM_LOST = "item_lost"  # accepted before, not now
    ITEM_GAINED = "item_gained"  # accepted now, not before
    ITEM_CHANGED = "item_changed"  # accepted both times, other data
    ITEM_REPAIRS = "item_repairs"  # accepted both times, same data, other lossless repairs
    ITEM_ORIGIN = "item_origin"  # accepted both times, same data, once from a re-ask
    REASON_CHANGED = "reason_changed"  # quarantined both times, for another reason
    # No longer, or newly, quarantined; not accepted either time.
    QUARANTINE_LOST = "quarantine_lost"
    QUARANTINE_GAINED = "quarantine_gained"
    ORDER = "order"  # the same accepted items in another order
    ENVELOPE_KEYS = "envelope_keys"
    FOLDED = "folded"  # other counts of candidates past the quarantine bound


@dataclass(frozen=True, kw_only=True, slots=True)
class Difference:
    """One way an actual outcome differs from the expected one.

    ``index`` is the candidate's 0-based source index where one is concerned (the
    ``message`` names it 1-based, as every text does); ``expected`` and ``actual`` say
    what each side holds. ``kind`` may be given as its word.
    """

    kind: DifferenceKind
    index: int | None = None
    expected: str
    actual: str

    def __post_init__(self) -> None:
        # The word is what fixtures' reports and JSON output carry; an unknown one is a bug.
        object.__setattr__(self, "kind", DifferenceKind(self.kind))

    @property
    def message(self) -> str:
        where = "output" if self.index is None else item_label(self.index)
        match self.kind:
            case DifferenceKind.STATUS:
                return f"status changed: {self.expected} -> {self.actual}"
            case DifferenceKind.ITEM_LOST:
                return f"{where} lost: was accepted, now {self.actual}"
            case DifferenceKind.ITEM_GAINED:
                return f"{where} gained: was {self.expected}, now accepted"
            case DifferenceKind.ITEM_CHANGED:
                return f"{where} changed: data {self.expected} -> {self.actual}"
            case DifferenceKind.ITEM_REPAIRS:
                return f"{where} repairs changed: {self.expected} -> {self.actual}"
            case DifferenceKind.ITEM_ORIGIN:
                return f"{where} origin changed: {self.expected} -> {self.actual}"
            case DifferenceKind.REASON_CHANGED:
                return f"{where} reason changed: {self.expected} -> {self.actual}"
            case DifferenceKind.QUARANTINE_LOST:
                return f"{where} no longer quarantined: was {self.expected}, now {self.actual}"
            case DifferenceKind.QUARANTINE_GAINED:
                return f"{where} newly quarantined: was {self.expected}, now {self.actual}"
            case DifferenceKind.ORDER:
                return f"accepted items reordered: {self.expected} -> {self.actual}"
            case DifferenceKind.FOLDED:
                return f"folded quarantine changed: {self.expected} -> {self.actual}"
            case _:
                return f"{self.kind.replace('_', ' ')}: {self.expected} -> {self.actual}"

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "kind": str(self.kind),
            "index": self.index,
            "expected": self.expected,
            "actual": self.actual,
            "message": self.message,
        }


_ABSENT = "not a candidate"


def compare(expected: Outcome, actual: Outcome) -> list[Difference]:
    """Every difference between ``expected`` and ``actual``; empty when they agree.

    Status first, then one difference per candidate whose fate changed (by source
    index, ascending; the whole output's quarantine last), then order and envelope.
    """
    differences: list[Difference] = []
    if expected.status != actual.status:
        differences.append(
            Difference(kind=DifferenceKind.STATUS, expected=expected.status, actual=actual.status)
        )
    before, after = _fates(expected), _fates(actual)
    indexes: list[int | None] = [*sorted(i for i in before.keys() | after.keys() if i is not None)]
    if None in before or None in after:
        indexes.append(None)  # the whole output (oversize) last
    for index in indexes:
        difference = _fate_change(index, before.get(index), after.get(index))
        if difference is not None:
            differences.append(difference)
    kept_before = [item.index for item in expected.items]
    kept_after = [item.index for item in actual.items]
    if sorted(kept_before) == sorted(kept_after) and kept_before != kept_after:
        differences.append(
            Difference(
                kind=DifferenceKind.ORDER,
                expected=_indexes(kept_before),
                actual=_indexes(kept_after),
            )
        )
    if expected.envelope_keys != actual.envelope_keys:
        differences.append(
            Difference(
                kind=DifferenceKind.ENVELOPE_KEYS,
                expected=_keys(expected.envelope_keys),
                actual=_keys(actual.envelope_keys),
            )
        )
    if dict(expected.folded) != dict(actual.folded):
        differences.append(
            Difference(
                kind=DifferenceKind.FOLDED,
                expected=_counts(expected.folded),
                actual=_counts(actual.folded),
            )
        )
    return differences


@dataclass(frozen=True, kw_only=True, slots=True)
class _Fate:
    """What became of one candidate: accepted with data of hash ``sha256``, or
    quarantined for ``reasons`` (several only for the index-less whole output)."""

    sha256: str | None = None
    reasons: tuple[str, ...] = ()
    repairs: tuple[Repair, ...] = ()
    origin: str = MODEL_ORIGIN

    @property
    def accepted(self) -> bool:
        return self.sha256 is not None

    def describe(self) -> str:
        return "accepted" if self.accepted else "quarantined: " + ", ".join(self.reasons)


def _fates(outcome: Outcome) -> dict[int | None, _Fate]:
    fates: dict[int | None, _Fate] = {
        item.index: _Fate(sha256=item.sha256, repairs=item.repairs, origin=item.origin)
        for item in outcome.items
    }
    for record in outcome.quarantined:
        previous = fates.get(record.index, _Fate())
        fates[record.index] = _Fate(
            sha256=previous.sha256,
            reasons=(*previous.reasons, record.reason),
            repairs=previous.repairs,
            origin=previous.origin,
        )
    return fates


def _fate_change(index: int | None, before: _Fate | None, after: _Fate | None) -> Difference | None:
    if before == after:
        return None
    was = _ABSENT if before is None else before.describe()
    now = _ABSENT if after is None else after.describe()
    if before is not None and before.accepted:
        if (
            after is not None
            and after.accepted
            and before.sha256 == after.sha256
            and before.repairs == after.repairs
        ):
            return Difference(
                kind=DifferenceKind.ITEM_ORIGIN,
                index=index,
                expected=before.origin,
                actual=after.origin,
            )
        if after is not None and after.accepted and before.sha256 == after.sha256:
            return Difference(
                kind=DifferenceKind.ITEM_REPAIRS,
                index=index,
                expected=_repairs(before.repairs),
                actual=_repairs(after.repairs),
            )
        if after is not None and after.accepted:
            return Difference(
                kind=DifferenceKind.ITEM_CHANGED,
                index=index,
                expected=f"sha256 {(before.sha256 or '')[:12]}",
                actual=f"sha256 {(after.sha256 or '')[:12]}",
            )
        return Difference(kind=DifferenceKind.ITEM_LOST, index=index, expected=was, actual=now)
    if after is not None and after.accepted:
        return Difference(kind=DifferenceKind.ITEM_GAINED, index=index, expected=was, actual=now)
    if before is not None and after is not None:
        return Difference(
            kind=DifferenceKind.REASON_CHANGED,
            index=index,
            expected=", ".join(before.reasons),
            actual=", ".join(after.reasons),
        )
    kind = (
        DifferenceKind.QUARANTINE_LOST if before is not None else DifferenceKind.QUARANTINE_GAINED
    )
    return Difference(kind=kind, index=index, expected=was, actual=now)


def _repairs(repairs: Sequence[Repair]) -> str:
    return ", ".join(f"{r.kind} at {r.at}" for r in repairs) if repairs else "none (original)"


def repairs_from_json(value: Any, where: str) -> tuple[Repair, ...]:
    """The repairs a JSON list of ``{"kind": ..., "at": ...}`` describes (an item's
    ``repairs``, as ``Repair.to_json`` writes them); ValueError naming the field at fault."""
    repairs = []
    for n, entry in enumerate(_sequence(value, where)):
        record = _mapping(entry, f"{where}[{n}]")
        kind = _string(record.get("kind"), f"{where}[{n}].kind")
        if kind not in {str(k) for k in RepairKind}:
            known = ", ".join(str(k) for k in RepairKind)
            raise ValueError(f"{where}[{n}].kind: expected one of {known}, got {kind!r}")
        at = record.get("at")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise ValueError(f"{where}[{n}].at: expected an offset (an integer >= 0), got {at!r}")
        repairs.append(Repair(kind=RepairKind(kind), at=at))
    return tuple(repairs)


def _indexes(indexes: Sequence[int]) -> str:
    return "items [" + ", ".join(str(item_number(i)) for i in indexes) + "]"


def _counts(counts: Mapping[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{reason} {n}" for reason, n in reason_ordered(counts).items())


def _keys(keys: Sequence[str]) -> str:
    return "[" + ", ".join(keys) + "]" if keys else "none"


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _sequence(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected an array, got {_kind(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {_kind(value)}")
    return value


def _index(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: expected a source index (an integer >= 0), got {value!r}")
    index: int = value
    return index


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
