"""A realistic day of broken model output through ``salvage --batch``, against json_repair.

Run from the project root:

    .venv/bin/python benchmarks/realistic_mix.py            # 240 outputs, 7 repetitions
    .venv/bin/python benchmarks/realistic_mix.py --quick    # 60 outputs, 3 repetitions

The outputs are incident-triage reports (8 to 40 findings each, generated from a
fixed seed) whose item schema is what real item schemas look like: an id with a
``pattern`` (``^INC-[0-9]{4}$``), an ``enum``, strings with ``maxLength``, a
``format: date``, a team checked against an allow-list. Each output carries one kind
of damage models make (issue 28): cut off, a missing comma, an unescaped quote pair,
prose and a fence around it, JSON Lines with a broken line, a bare array, a fenced
block per item, comments, an item written as a Python literal, a raw newline in a
string, bare keys, values that need normalising (``"yes"``, ``""``, ``"db, latency"``,
``12 November 2025``), an envelope that breaks its schema, and items that break the
schema (a bad id, an unknown severity, a long title, an unknown team).

Timed, best of the repetitions:

- ``salvage --batch --coerce --repair lossless`` as a fresh process over all the
  outputs (start-up, imports and schema compilation included), the way a cron job or
  a replay of a day's outputs runs it;
- ``json_repair.repair_json(text, return_objects=True)`` over the same outputs, in
  this process (no start-up: the comparison favours json_repair), and as a fresh
  process too.

The goal (issue 28.7) is salvage at least 4x faster than json_repair in-process. The
outcome lines say what each kept: json_repair returns whatever it made of the text,
with no schema, no quarantine and no record of what it changed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import json_repair
except ImportError:  # pragma: no cover - the bench extra is missing
    sys.exit("json_repair is not installed: pip install -e '.[bench]'")

from salvagelane.core import speedups

SEED = 20261128
TARGET = 4.0  # salvage --batch (start-up included) / json_repair in-process: at least
TEAMS = ("payments", "search", "identity", "storage", "billing", "mobile", "web", "data")
SEVERITIES = ("low", "medium", "high", "critical")
TAGS = ("db", "latency", "auth", "deploy", "cache", "dns", "queue", "ui", "cost", "alerts")
WORDS = [
    "checkout",
    "latency",
    "spikes",
    "after",
    "the",
    "cache",
    "eviction",
    "change",
    "on",
    "the",
    "primary",
    "cluster",
    "login",
    "retries",
    "exhaust",
    "the",
    "token",
    "bucket",
    "during",
    "the",
    "morning",
    "peak",
    "for",
    "mobile",
    "clients",
    "nightly",
    "export",
    "misses",
    "rows",
    "when",
    "the",
    "replica",
    "lags",
    "behind",
    "the",
    "writer",
    "by",
    "minutes",
    "dashboard",
    "alerts",
    "fire",
    "twice",
    "because",
    "two",
    "schedulers",
    "claim",
    "the",
    "same",
    "window",
]

ITEM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["id", "severity", "title", "team", "tags", "resolved", "owner", "due"],
    "properties": {
        "id": {"type": "string", "pattern": "^INC-[0-9]{4}$"},
        "severity": {"enum": list(SEVERITIES)},
        "title": {"type": "string", "minLength": 1, "maxLength": 120},
        "team": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 8},
        "resolved": {"type": "boolean"},
        "owner": {"type": ["string", "null"], "maxLength": 60},
        "due": {"type": "string", "format": "date"},
    },
}
ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["summary", "findings"],
    "properties": {"summary": {"type": "string", "maxLength": 400}, "findings": {"type": "array"}},
}


def make_items(rng: random.Random, count: int) -> list[dict[str, Any]]:
    items = []
    for _ in range(count):
        start = rng.randrange(len(WORDS) - 12)
        items.append(
            {
                "id": f"INC-{rng.randrange(10_000):04d}",
                "severity": rng.choice(SEVERITIES),
                "title": " ".join(WORDS[start : start + rng.randint(5, 12)]).capitalize(),
                "team": rng.choice(TEAMS),
                "tags": rng.sample(TAGS, rng.randint(0, 3)),
                "resolved": rng.random() < 0.3,
                "owner": rng.choice([None, "ana", "bo", "chen", "dee"]),
                "due": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            }
        )
    return items


def document(items: list[dict[str, Any]], pretty: bool, summary: object = "Open incidents") -> str:
    report = {"summary": summary, "findings": items}
    return json.dumps(report, indent=2 if pretty else None)


def _deep(text: str, items: list[dict[str, Any]]) -> int:
    """Where the item 3/4 of the way down opens."""
    return text.index(json.dumps(items[len(items) * 3 // 4]["id"]))


# One function per kind of damage: (items, rng, pretty) -> the output text.
def truncated(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, pretty)
    return text[: _deep(text, items) + 40]


def missing_comma(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, pretty)
    comma = text.index(",", _deep(text, items))
    return text[:comma] + text[comma + 1 :]


def quote_pair(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, pretty)
    title = text.index('"title"', _deep(text, items)) + 12
    return text[:title] + '"urgent" ' + text[title:]


def fenced(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    return "Here is the triage.\n\n```json\n" + document(items, True) + "\n```\nAsk for more.\n"


def lines(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    out = [json.dumps({"summary": "Open incidents"})] + [json.dumps(i) for i in items]
    broken = len(out) // 2
    out[broken] = out[broken][:-1]  # a line that lost its closing brace
    out[-1] = out[-1][: len(out[-1]) // 2]  # and a last line cut off
    return "\n".join(out)


def bare_array(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    return json.dumps(items, indent=2 if pretty else None)


def fence_per_item(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    parts = ["Findings, one per block:\n"]
    for item in items:
        parts.append(f"\n```json\n{json.dumps(item, indent=2)}\n```\n")
    return "".join(parts)


def comments(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, True)
    at = text.index('"title"', _deep(text, items))
    text = text[:at] + "// the model explains itself\n      " + text[at:]
    at = text.index('"team"', _deep(text, items))
    return text[:at] + "/* double-check */ " + text[at:]


def python_literal(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, False)  # compact: the item's own text is found in it
    item = items[len(items) // 2]
    literal = repr(item)  # single quotes, True/False/None
    return text.replace(json.dumps(item), literal, 1)


def raw_newline(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, pretty)
    title = text.index('"title"', _deep(text, items)) + 14
    return text[:title] + "\n" + text[title:]


def bare_keys(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    text = document(items, pretty)
    deep = _deep(text, items)
    end = text.index("}", deep)
    part = text[deep:end]
    for key in ("severity", "title", "team"):
        part = part.replace(f'"{key}":', f"{key}:", 1)
    return text[:deep] + part + text[end:]


def needs_normalising(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    odd = [dict(item) for item in items]
    for item in odd[::3]:
        item["resolved"] = rng.choice(["yes", "no", "1", "0", "on", "off"])
    for item in odd[1::4]:
        item["owner"] = ""
    for item in odd[2::4]:
        item["tags"] = ", ".join(item["tags"]) or "db"
    for item in odd[::5]:
        year, month, day = item["due"].split("-")
        item["due"] = f"{int(day)} {_MONTHS[int(month) - 1]} {year}"
    return document(odd, pretty)


_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def envelope_violation(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    return document(items, pretty, summary=12345)


def schema_violations(items: list[dict[str, Any]], rng: random.Random, pretty: bool) -> str:
    bad = [dict(item) for item in items]
    bad[1]["id"] = "INC-12"
    bad[2]["severity"] = "urgent"
    bad[3]["title"] = "x" * 150
    bad[4]["team"] = "marketing"  # not on the allow-list
    return document(bad, pretty)


DAMAGE: dict[str, Callable[[list[dict[str, Any]], random.Random, bool], str]] = {
    "truncated": truncated,
    "missing comma": missing_comma,
    "quote pair": quote_pair,
    "fenced": fenced,
    "json lines": lines,
    "bare array": bare_array,
    "fence per item": fence_per_item,
    "comments": comments,
    "python literal": python_literal,
    "raw newline": raw_newline,
    "bare keys": bare_keys,
    "normalise": needs_normalising,
    "envelope": envelope_violation,
    "schema": schema_violations,
}


def corpus(count: int) -> list[tuple[str, str]]:
    """``count`` (damage kind, output) pairs, every kind in turn."""
    rng = random.Random(SEED)
    kinds = list(DAMAGE)
    out = []
    for n in range(count):
        kind = kinds[n % len(kinds)]
        items = make_items(rng, rng.randint(8, 40))
        out.append((kind, DAMAGE[kind](items, rng, rng.random() < 0.5)))
    return out


# -------------------------------------------------------------------------- timing


def best_of(reps: int, fn: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def salvage_command(workdir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "salvagelane",
        "salvage",
        "--batch",
        "--schema",
        str(workdir / "item.schema.json"),
        "--envelope-schema",
        str(workdir / "envelope.schema.json"),
        "--items",
        "findings",
        "--allow",
        f"team={workdir / 'teams.txt'}",
        "--coerce",
        "--repair",
        "lossless",
    ]


def run_salvage(command: Sequence[str], batch: bytes) -> bytes:
    done = subprocess.run(command, input=batch, capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"salvage --batch failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return done.stdout


JSON_REPAIR_PROCESS = (
    "import json, sys, json_repair\n"
    "for line in sys.stdin.buffer:\n"
    "    json_repair.repair_json(json.loads(line)['raw'], return_objects=True)\n"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 outputs, 3 repetitions")
    parser.add_argument("--outputs", type=int, help="how many outputs (default 240)")
    parser.add_argument("--reps", type=int, help="repetitions (best is kept)")
    args = parser.parse_args(argv)
    count = args.outputs or (60 if args.quick else 240)
    reps = args.reps or (3 if args.quick else 7)
    outputs = corpus(count)
    texts = [text for _, text in outputs]
    batch = b"".join(json.dumps({"raw": text}).encode() + b"\n" for text in texts)
    nbytes = sum(len(text.encode()) for text in texts)

    with tempfile.TemporaryDirectory(prefix="salvagelane-bench-") as scratch:
        workdir = Path(scratch)
        (workdir / "item.schema.json").write_text(json.dumps(ITEM_SCHEMA), encoding="utf-8")
        (workdir / "envelope.schema.json").write_text(json.dumps(ENVELOPE_SCHEMA), "utf-8")
        (workdir / "teams.txt").write_text("\n".join(TEAMS) + "\n", encoding="utf-8")
        command = salvage_command(workdir)
        results = [json.loads(line) for line in run_salvage(command, batch).splitlines()]
        salvage_best, salvage_median = best_of(reps, lambda: run_salvage(command, batch))
        start_best, _ = best_of(reps, lambda: run_salvage(command, b""))

    repaired = [json_repair.repair_json(text, return_objects=True) for text in texts]
    repair_best, repair_median = best_of(
        reps, lambda: [json_repair.repair_json(text, return_objects=True) for text in texts]
    )
    process = [sys.executable, "-c", JSON_REPAIR_PROCESS]
    repair_process_best, _ = best_of(
        reps, lambda: subprocess.run(process, input=batch, capture_output=True, check=True)
    )

    out = sys.stdout
    out.write(
        f"realistic broken mix: {count} outputs, {nbytes / 1000:.0f} KB, {len(DAMAGE)} kinds "
        f"of damage; best of {reps}\n"
        f"host: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, scan loops "
        f"{'compiled' if speedups.COMPILED else 'pure Python'}, "
        f"load {os.getloadavg()[0]:.2f}\n\n"
    )
    rows = [
        ("salvage --batch (a fresh process)", salvage_best, salvage_median),
        ("  of which start-up (empty batch)", start_best, None),
        ("json_repair, in this process", repair_best, repair_median),
        ("json_repair, a fresh process", repair_process_best, None),
    ]
    for label, best, median in rows:
        extra = "" if median is None else f"  (median {median * 1e3:7.1f} ms)"
        out.write(f"  {label:<36}{best * 1e3:8.1f} ms  {nbytes / 1e6 / best:6.2f} MB/s{extra}\n")
    ratio = repair_best / salvage_best
    verdict = "PASS" if ratio >= TARGET else "MISS"
    out.write(
        f"\n  json_repair in-process / salvage --batch: {ratio:.2f}x "
        f"(target >= {TARGET:g}x) -> {verdict}\n"
        f"  json_repair as a process / salvage --batch: {repair_process_best / salvage_best:.2f}x\n"
    )
    out.write(outcomes(outputs, results, repaired))
    return 0 if ratio >= TARGET else 1


def outcomes(
    outputs: Sequence[tuple[str, str]], results: Sequence[dict[str, Any]], repaired: Sequence[Any]
) -> str:
    """Per kind of damage: what salvage kept, held and changed; what json_repair returned."""
    table: dict[str, Counter[str]] = {}
    for (kind, _), result, fixed in zip(outputs, results, repaired, strict=True):
        row = table.setdefault(kind, Counter())
        row["outputs"] += 1
        row["accepted"] += len(result["items"])
        row["quarantined"] += len(result["quarantined"])
        row["envelope issues"] += len(result["envelope_issues"])
        row["coerced items"] += sum(1 for item in result["items"] if item["coercions"])
        row["repaired items"] += sum(1 for item in result["items"] if item.get("repairs"))
        row[result["status"]] += 1
        found = fixed.get("findings") if isinstance(fixed, dict) else fixed
        row["jr objects"] += (
            sum(1 for x in found if isinstance(x, dict)) if isinstance(found, list) else 0
        )
    columns = [
        "outputs",
        "ok",
        "partial",
        "failed",
        "accepted",
        "quarantined",
        "envelope issues",
        "coerced items",
        "repaired items",
        "jr objects",
    ]
    lines = ["", "outcomes (outside timing; jr objects: dicts json_repair returned as findings)"]
    lines.append(f"  {'damage':<16}" + "".join(f"{c:>12}" for c in columns))
    for kind, row in table.items():
        lines.append(f"  {kind:<16}" + "".join(f"{row[c]:>12}" for c in columns))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
