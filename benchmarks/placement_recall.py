"""Recall and false accepts of the salvage core, with and without the placement check.

Generates reports (seeded, so every run sees the same texts), damages one item in
each, salvages, and counts:

- recall: intact items (every item but the damaged one) accepted unchanged;
- false accepts: a damaged item's sub-object accepted as an item;
- altered: the damaged item accepted as the edit left it (a one-character edit that
  leaves valid JSON, such as ``"i d"`` for ``"id"``: no scanner can see it, and the
  item schema, which this measurement leaves out, is what catches it).

Two damage sets: one-character edits of any kind (the property tests' corruptions),
and quote flips in reports whose items nest sub-items with the items' own keys
(issue 15). The baseline is the same scanner with the placement check switched off,
in the same run.

    .venv/bin/python benchmarks/placement_recall.py [--reports 3000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from salvagelane.core import SalvagePolicy, salvage
from salvagelane.core import scanner as scanner_module

Item = dict[str, Any]

_TITLES = ["t", 'say "hi"', "a [b] {c}", "x}", "]{", "", "w, v", "plain words here"]
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True, kw_only=True)
class Case:
    text: str
    items: tuple[Item, ...]
    damaged: int
    path: str


def _entry(rng: random.Random, rank: int, ident: str, *, nested: bool) -> Item:
    entry: Item = {
        "rank": rank,
        "id": ident,
        "severity": rng.choice(["low", "high", "critical"]),
        "title": rng.choice(_TITLES),
    }
    if nested and rng.random() < 0.6:
        count = rng.randint(1, 3)
        entry["related"] = [
            _entry(rng, rng.randint(0, 9), f"S-{i}", nested=False) for i in range(count)
        ]
    if rng.random() < 0.3:
        entry["tags"] = rng.sample(["x", "y", "z"], rng.randint(0, 2))
    return entry


def _render(rng: random.Random, items: list[Item]) -> tuple[str, list[tuple[int, int]], str]:
    layout = rng.choice(["compact", "spaced", "pretty"])
    if layout == "pretty":
        body = [json.dumps(item, indent=2).replace("\n", "\n    ") for item in items]
        sep, head, tail = ",\n    ", "[\n    ", "\n  ]"
    elif layout == "compact":
        body = [json.dumps(item, separators=(",", ":")) for item in items]
        sep, head, tail = ",", "[", "]"
    else:
        body = [json.dumps(item) for item in items]
        sep, head, tail = ", ", "[", "]"
    prefix = '{"summary": "s", "findings": ' + head
    spans, pos = [], len(prefix)
    for chunk in body:
        spans.append((pos, pos + len(chunk)))
        pos += len(chunk) + len(sep)
    return prefix + sep.join(body) + tail + ', "count": ' + str(len(items)) + "}", spans, layout


def one_char_edits(rng: random.Random) -> Case:
    items = [_entry(rng, i + 1, f"A-{i + 1}", nested=False) for i in range(rng.randint(2, 8))]
    text, spans, _ = _render(rng, items)
    k = rng.randrange(len(items))
    start, end = spans[k]
    at = rng.randrange(start, end)
    char = rng.choice('"{}[],:\\x ')
    kind = rng.choice(["insert", "delete", "replace"])
    if kind == "insert":
        text = text[:at] + char + text[at:]
    elif kind == "delete":
        text = text[:at] + text[at + 1 :]
    else:
        text = text[:at] + char + text[at + 1 :]
    return Case(text=text, items=tuple(items), damaged=k, path="findings")


def quote_flips(rng: random.Random) -> Case:
    items = [_entry(rng, i + 1, f"A-{i + 1}", nested=True) for i in range(rng.randint(2, 8))]
    text, spans, _ = _render(rng, items)
    k = rng.randrange(len(items))
    start, end = spans[k]
    strings = list(_STRING.finditer(text, start, end))
    chosen = rng.choice(strings)
    flip = rng.choice(["drop_closing", "drop_opening", "insert", "escape_closing"])
    if flip == "drop_closing":
        at = chosen.end() - 1
        text = text[:at] + text[at + 1 :]
    elif flip == "drop_opening":
        at = chosen.start()
        text = text[:at] + text[at + 1 :]
    elif flip == "escape_closing":
        at = chosen.end() - 1
        text = text[:at] + "\\" + text[at:]
    else:
        at = rng.randrange(chosen.start() + 1, max(chosen.start() + 2, chosen.end()))
        text = text[:at] + '"' + text[at:]
    return Case(text=text, items=tuple(items), damaged=k, path="findings")


@dataclass
class Tally:
    intact: int = 0
    kept: int = 0
    false_accepts: int = 0  # sub-items accepted as items
    altered: int = 0  # the damaged item accepted as edited: still valid JSON (no schema here)

    @property
    def recall(self) -> float:
        return self.kept / self.intact if self.intact else 1.0


def measure(cases: Sequence[Case], *, show: bool = False) -> Tally:
    tally = Tally()
    for case in cases:
        result = salvage(case.text, SalvagePolicy(items_path=case.path))
        accepted = [item.data for item in result.items]
        intact = [item for j, item in enumerate(case.items) if j != case.damaged]
        tally.intact += len(intact)
        tally.kept += sum(1 for item in intact if item in accepted)
        for data in accepted:
            if data in case.items:
                continue
            if not (isinstance(data, dict) and str(data.get("id", "")).startswith("S-")):
                tally.altered += 1
            else:
                tally.false_accepts += 1
                if show:
                    print("  false accept:", json.dumps(data), "from", repr(case.text))
    return tally


@contextmanager
def placement_off() -> Iterator[None]:
    """The scanner as it was before issue 15: no placement check, no nested reading."""
    original = scanner_module.place
    nested_reading = scanner_module._Scanner._nested_reading

    def unchanged(text: str, candidates: Any, *_: Any) -> Any:
        return tuple(candidates)

    def never(*_: Any) -> None:
        return None

    scanner_module.place = unchanged  # type: ignore[assignment]
    scanner_module._Scanner._nested_reading = never  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        scanner_module.place = original
        scanner_module._Scanner._nested_reading = nested_reading  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--show", action="store_true", help="print every false accept")
    args = parser.parse_args(argv)
    generators: list[tuple[str, Callable[[random.Random], Case]]] = [
        ("one-character edits", one_char_edits),
        ("quote flips, nested sub-items", quote_flips),
    ]
    print(f"{args.reports} reports per damage set, seed {args.seed}")
    print(f"{'damage':32} {'variant':18} {'recall':>8} {'false accepts':>14} {'altered':>8}")
    for name, generate in generators:
        rng = random.Random(args.seed)
        cases = [generate(rng) for _ in range(args.reports)]
        with placement_off():
            baseline = measure(cases)
        current = measure(cases, show=args.show)
        for variant, tally in (("without placement", baseline), ("with placement", current)):
            print(
                f"{name:32} {variant:18} {tally.recall:8.1%} {tally.false_accepts:14d}"
                f" {tally.altered:8d}"
            )


if __name__ == "__main__":
    main()
