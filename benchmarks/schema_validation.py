"""Per-item schema validation: jsonschema (the reference, alone before) against jsonschema-rs.

Run from the project root:

    .venv/bin/python benchmarks/schema_validation.py           # about 20 s
    .venv/bin/python benchmarks/schema_validation.py --quick   # a few seconds

Items are salvage_throughput.py's (the daily-triage shape, the same seeded generator),
checked against schemas/daily-triage-item.schema.json. Each figure is the best of
``--reps`` repetitions of a loop over every item, with the garbage collector off:

- ``jsonschema check``: ``ItemSchema.explain``, the reference alone: what every item
  cost before jsonschema-rs (best_match over the sorted errors, none for a valid item);
- ``jsonschema is_valid``: the reference's own boolean, its cheapest verdict;
- ``jsonschema-rs is_valid``: the fast verdict alone;
- ``ItemSchema.check``: the layer now: the fast verdict, and the reference's explanation
  for a rejected item only.

Then a whole ``salvage`` with the item schema and the allow-list on the largest valid
report, compact, with the reference alone (before) and with the fast verdict (now),
beside ``json.loads`` of the same text.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The items come from the throughput benchmark's generator, a sibling script: the same
# seeded documents, so the two benchmarks' figures describe the same items.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from salvage_throughput import (
    ITEMS_PATH,
    load_inputs,
    make_report,
    max_items_for,
)
from salvagelane.core.assembly import SalvagePolicy, salvage
from salvagelane.core.guardrails import Guardrails
from salvagelane.core.schema import ItemSchema


def best_seconds(jobs: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Best time of each job, in interleaved rounds: a burst of load elsewhere on the
    machine costs one repetition of many figures, not every repetition of one."""
    for fn in jobs.values():
        fn()  # warm-up: lazy imports, caches
    best = dict.fromkeys(jobs, float("inf"))
    gc.disable()
    try:
        for _ in range(reps):
            for name, fn in jobs.items():
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def loop_over(check: Callable[[Any], object], items: Sequence[Any]) -> Callable[[], None]:
    def loop() -> None:
        for item in items:
            check(item)

    return loop


def rejected(item: dict[str, Any]) -> dict[str, Any]:
    """The item with one schema error: a score given in words."""
    return {**item, "wsjf": {**item["wsjf"], "score": "high"}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 items, fewer repetitions")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per figure")
    args = parser.parse_args(argv)
    size = 200 if args.quick else 2000
    reps = args.reps or (5 if args.quick else 9)

    inputs = load_inputs()
    schema = ItemSchema.compile(inputs.schema)
    assert schema.fast is not None, schema.reference_only
    reference_alone = dataclasses.replace(schema, fast=None)
    report = make_report(inputs, size)
    valid_items = report["recommendations"]
    bad_items = [rejected(item) for item in valid_items]
    assert all(schema.check(i) is None for i in valid_items)
    assert all(schema.check(i) == schema.explain(i) is not None for i in bad_items[:50])

    print(
        f"python {platform.python_version()} on {platform.machine()}, {size} items, best of {reps}"
    )
    print(f"{'per item (us)':28} {'valid':>9} {'rejected':>9}")
    checks = {
        "jsonschema check (before)": schema.explain,
        "jsonschema is_valid": schema.validator.is_valid,
        "jsonschema-rs is_valid": schema.fast.is_valid,
        "ItemSchema.check (now)": schema.check,
    }
    jobs = {
        f"{name}|{kind}": loop_over(check, items)
        for name, check in checks.items()
        for kind, items in (("valid", valid_items), ("rejected", bad_items))
    }
    best = best_seconds(jobs, reps)
    figures: dict[str, tuple[float, float]] = {}
    for name in checks:
        figures[name] = (
            best[f"{name}|valid"] / size * 1e6,
            best[f"{name}|rejected"] / size * 1e6,
        )
        print(f"{name:28} {figures[name][0]:9.2f} {figures[name][1]:9.2f}")
    before, now = figures["jsonschema check (before)"], figures["ItemSchema.check (now)"]
    print(
        f"{'before / now':28} {before[0] / now[0]:8.1f}x {before[1] / now[1]:8.2f}x"
        "   (rejected: the explanation still comes from jsonschema)"
    )

    text = json.dumps(report, separators=(",", ":"), ensure_ascii=False)
    nbytes = len(text.encode("utf-8"))
    guardrails = Guardrails(
        max_items=max_items_for(size),
        rank_key="rank",
        allow_lists={"candidate": frozenset(inputs.workstreams)},
    )

    def salvage_with(item_schema: ItemSchema) -> Callable[[], object]:
        policy = SalvagePolicy(
            items_path=ITEMS_PATH, item_schema=item_schema, guardrails=guardrails
        )
        return lambda: salvage(text, policy)

    whole = best_seconds(
        {
            "loads": lambda: json.loads(text),
            "old": salvage_with(reference_alone),
            "new": salvage_with(schema),
        },
        reps,
    )
    loads_s, old_s, new_s = whole["loads"], whole["old"], whole["new"]
    print(f"\nwhole salvage, valid-{size}-compact ({nbytes / 1e6:.2f} MB)   MB/s  x json.loads")
    for name, seconds in (
        ("json.loads", loads_s),
        ("salvage, jsonschema alone", old_s),
        ("salvage, jsonschema-rs verdict", new_s),
    ):
        print(f"  {name:32} {nbytes / 1e6 / seconds:7.1f}  {loads_s / seconds:6.3f}")
    print(f"  {'speed-up':32} {old_s / new_s:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
