"""Throughput of salvagelane against json.loads and json_repair, on the same documents.

Run from the project root:

    .venv/bin/python benchmarks/salvage_throughput.py            # full run (~1-2 min)
    .venv/bin/python benchmarks/salvage_throughput.py --quick    # smoke run (seconds)
    .venv/bin/python benchmarks/salvage_throughput.py --json     # figures as JSON on stdout
    .venv/bin/python benchmarks/salvage_throughput.py --profile  # cProfile of scan+parse

Documents are generated deterministically (seeded ``random.Random``) in the
daily-triage item shape (schemas/daily-triage-item.schema.json), with sentences
taken from tests/fixtures/daily-triage-truncated/complete.json. Valid reports
come in several sizes, pretty-printed and compact; each is then broken four ways
(truncated mid-item, a missing comma deep in the list, an unescaped quote pair
deep in the list, prose plus a code fence around it).

Every figure is the best of several repetitions (``time.perf_counter``; each
repetition runs the call enough times to take at least ``--min-rep`` seconds),
with the garbage collector off during timing unless ``--gc`` is given, as
``timeit`` does. After one untimed warm-up call and a calibration repetition per
figure, the remaining repetitions run in interleaved rounds (one repetition of
every figure per round), so a burst of load from elsewhere on the machine costs
one repetition of many figures rather than every repetition of one. MB/s is
UTF-8 input bytes of the whole document / 10**6 / seconds per call. The verdict
on each target is taken on the worst document set; a target is never reported
as met unless every set meets it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import importlib.metadata
import io
import json
import math
import os
import platform
import pstats
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

import salvagelane
from salvagelane.core import speedups
from salvagelane.core.assembly import SalvagePolicy, salvage, sha256_of
from salvagelane.core.guardrails import Guardrails
from salvagelane.core.records import (
    SalvageResult,
    new_accepted,
    new_quarantined,
    new_signal,
    new_span,
)
from salvagelane.core.scanner import ItemsPath, scan
from salvagelane.core.schema import ItemSchema
from salvagelane.core.strict import Parsed, Unparsable, parse_item, read_strict_document

try:
    import json_repair
except ImportError:  # pragma: no cover - the bench extra is missing
    sys.exit("json_repair is not installed: pip install -e '.[bench]'")

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261121
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
SCHEMA_PATH = ROOT / "schemas" / "daily-triage-item.schema.json"
ITEMS_PATH: ItemsPath = ("recommendations",)
FULL_SIZES = (16, 200, 2000)
QUICK_SIZES = (16, 200)
FORMATS = ("pretty", "compact")
BROKEN_VARIANTS = ("truncated", "comma", "quote", "fenced")
VARIANT_NOTES = {
    "valid": "the report as generated",
    "truncated": "cut in the middle of the 'why' string of the item 3/4 of the way down",
    "comma": "the comma after 'action' removed in the item 3/4 of the way down",
    "quote": "an unescaped quote pair inside 'why' of the item 3/4 of the way down",
    "fenced": "prose before and after, report inside a ```json code fence",
}
PROSE_BEFORE = "Here is today's triage report, ranked by WSJF score.\n\n```json\n"
PROSE_AFTER = (
    "\n```\n\nLet me know if you want the deferred items broken down further, "
    "or the scores recomputed with different job sizes.\n"
)

TARGET_LOADS = 3.0  # json.loads MB/s / scan+parse MB/s on valid reports: at most
TARGET_SALVAGE_VS_LOADS = 0.5  # whole salvage / json.loads on valid reports: at least
TARGET_SP_VS_REPAIR = 30.0  # scan+parse / json_repair on broken reports: at least
TARGET_SALVAGE_VS_REPAIR = 30.0  # whole salvage / json_repair on broken reports: at least
TARGET_FENCED = 0.8  # fenced report's salvage speed / the same report unfenced: at least


# --------------------------------------------------------------------- corpus


@dataclass(frozen=True, slots=True)
class Doc:
    name: str
    variant: str
    size: int  # items in the valid report it was made from
    fmt: str
    text: str
    nbytes: int
    broken_rank: int | None  # rank of the damaged item, if any

    @property
    def valid(self) -> bool:
        return self.variant == "valid"


@dataclass(frozen=True, slots=True)
class Inputs:
    summary: str
    sentences: tuple[str, ...]
    workstreams: tuple[str, ...]
    actions: tuple[str, ...]
    schema: dict[str, Any]


def load_inputs() -> Inputs:
    complete = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
    sentences: list[str] = []
    for item in complete["recommendations"]:
        sentences.extend(s for s in re.split(r"(?<=[.!?])\s+", item["why"]) if s)
    lines = (FIXTURE / "workstreams.txt").read_text(encoding="utf-8").splitlines()
    workstreams = tuple(sorted({x.strip() for x in lines if x.strip() and x[0] != "#"}))
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return Inputs(
        summary=complete["summary"],
        sentences=tuple(sentences),
        workstreams=workstreams,
        actions=tuple(schema["properties"]["action"]["enum"]),
        schema=schema,
    )


def make_report(inputs: Inputs, size: int) -> dict[str, Any]:
    """A valid daily-triage report with ``size`` items; the same for the same size."""
    rng = random.Random(f"{SEED}-{size}")
    items = []
    for index in range(size):
        picked = rng.sample(inputs.sentences, rng.randint(1, 3))
        why = picked[0]
        for sentence in picked[1:]:
            if len(why) + 1 + len(sentence) > 600:  # the schema's maxLength
                break
            why += ("\n" if rng.random() < 0.1 else " ") + sentence
        bv, tc, rr = rng.randint(1, 20), rng.randint(1, 20), rng.randint(1, 20)
        job = rng.randint(1, 13)
        items.append(
            {
                "rank": index + 1,
                "candidate": rng.choice(inputs.workstreams),
                "action": rng.choice(inputs.actions),
                "why": why,
                "confidence": round(rng.uniform(0.5, 0.97), 2),
                "wsjf": {
                    "business_value": bv,
                    "time_criticality": tc,
                    "risk_reduction": rr,
                    "job_size": job,
                    "score": round((bv + tc + rr) / job, 2),
                },
            }
        )
    return {"summary": inputs.summary, "recommendations": items}


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "pretty":
        return json.dumps(report, indent=2, ensure_ascii=False)
    return json.dumps(report, separators=(",", ":"), ensure_ascii=False)


def _item_start(text: str, fmt: str, rank: int) -> int:
    token = f'"rank": {rank},' if fmt == "pretty" else f'"rank":{rank},'
    at = text.find(token)
    if at < 0:
        raise RuntimeError(f"generator: item with rank {rank} not found")
    return text.rfind("{", 0, at)


def _why_string(text: str, fmt: str, item_start: int) -> tuple[int, int]:
    """Offsets of the opening quote and just past the closing quote of the item's 'why'."""
    key = '"why": "' if fmt == "pretty" else '"why":"'
    opening = text.find(key, item_start) + len(key) - 1
    _, end = json.JSONDecoder().raw_decode(text, opening)
    return opening, end


def break_report(text: str, fmt: str, size: int, variant: str) -> tuple[str, int | None]:
    if variant == "fenced":
        return PROSE_BEFORE + text + PROSE_AFTER, None
    rank = size * 3 // 4 + 1  # deep in the list: the item 3/4 of the way down
    start = _item_start(text, fmt, rank)
    opening, end = _why_string(text, fmt, start)
    if variant == "truncated":
        cut = opening + 1 + (end - opening - 2) // 2
        while text[cut - 1] == "\\":  # do not end inside an escape sequence
            cut -= 1
        return text[:cut], rank
    if variant == "comma":
        comma = text.rfind(",", start, opening)  # the one after the 'action' value
        return text[:comma] + text[comma + 1 :], rank
    if variant == "quote":
        space = text.find(" ", opening + (end - opening) // 3)
        return text[: space + 1] + '"urgent" ' + text[space + 1 :], rank
    raise ValueError(variant)


def build_corpus(inputs: Inputs, sizes: Sequence[int]) -> list[Doc]:
    docs: list[Doc] = []
    broken: list[Doc] = []
    for size in sizes:
        report = make_report(inputs, size)
        for fmt in FORMATS:
            text = render(report, fmt)
            docs.append(_doc("valid", size, fmt, text, None))
            for variant in BROKEN_VARIANTS:
                damaged, rank = break_report(text, fmt, size, variant)
                broken.append(_doc(variant, size, fmt, damaged, rank))
    order = {v: i for i, v in enumerate(BROKEN_VARIANTS)}
    broken.sort(key=lambda d: (order[d.variant], d.size, FORMATS.index(d.fmt)))
    return docs + broken


def _doc(variant: str, size: int, fmt: str, text: str, rank: int | None) -> Doc:
    return Doc(
        name=f"{variant}-{size}-{fmt}",
        variant=variant,
        size=size,
        fmt=fmt,
        text=text,
        nbytes=len(text.encode("utf-8")),
        broken_rank=rank,
    )


def corpus_digest(docs: Sequence[Doc]) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(doc.name.encode() + b"\0" + doc.text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------- operations


def scan_and_parse(text: str) -> list[Parsed | Unparsable]:
    """scan() plus the strict parse of every complete candidate's span."""
    result = scan(text, ITEMS_PATH)
    return [
        parse_item(c.span.text(text), offset=c.span.start) for c in result.candidates if c.complete
    ]


def policy_for(doc: Doc, schema: ItemSchema, workstreams: Sequence[str]) -> SalvagePolicy:
    return SalvagePolicy(
        items_path=ITEMS_PATH,
        item_schema=schema,
        guardrails=Guardrails(
            max_items=max_items_for(doc.size),
            rank_key="rank",
            allow_lists={"candidate": frozenset(workstreams)},
        ),
    )


def max_items_for(size: int) -> int:
    """Keep half the items, like the daily-triage demo keeps 7 of 16: over_limit does work."""
    return max(1, size // 2)


# ------------------------------------------------------------------- timing


@dataclass(frozen=True, slots=True)
class Config:
    min_rep_s: float
    reps: int
    min_reps: int
    budget_s: float  # soft cap on the timed part of one measurement
    keep_gc: bool


@dataclass(frozen=True, slots=True)
class Timing:
    best_s: float  # seconds per call, best repetition
    median_s: float
    reps: int
    number: int  # calls per repetition

    def mb_s(self, nbytes: int) -> float:
        return nbytes / 1e6 / self.best_s

    @property
    def spread(self) -> float:
        return self.median_s / self.best_s - 1.0


def _timed(fn: Callable[[], object], number: int, keep_gc: bool) -> float:
    gc_was_enabled = gc.isenabled()
    if not keep_gc:
        gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass(slots=True)
class Job:
    """One figure being measured: a call, how often per repetition, the times so far."""

    fn: Callable[[], object]
    number: int = 1
    reps: int = 0
    times: list[float] = field(default_factory=list)

    def timing(self) -> Timing:
        return Timing(
            best_s=min(self.times),
            median_s=statistics.median(self.times),
            reps=len(self.times),
            number=self.number,
        )


def calibrate(fn: Callable[[], object], cfg: Config) -> tuple[Job, object]:
    """Warm up, find the calls per repetition, time the first repetition."""
    result = fn()  # warm-up, untimed; the result feeds the outcome table
    gc.collect()
    number = 1
    elapsed = _timed(fn, number, cfg.keep_gc)
    while elapsed < cfg.min_rep_s:
        wanted = math.ceil(number * 1.2 * cfg.min_rep_s / max(elapsed, 1e-7))
        number = min(number * 10, max(number * 2, wanted))
        elapsed = _timed(fn, number, cfg.keep_gc)
    reps = cfg.reps
    if elapsed * reps > cfg.budget_s:
        reps = max(cfg.min_reps, int(cfg.budget_s / elapsed))
    return Job(fn=fn, number=number, reps=reps, times=[elapsed / number]), result


def run_rounds(jobs: Sequence[Job], cfg: Config, progress: bool) -> None:
    """The remaining repetitions, one per job per round, so that a burst of load from
    elsewhere on the machine hits one repetition of many figures, not every repetition
    of one figure."""
    rounds = max((job.reps for job in jobs), default=1)
    for round_no in range(1, rounds):
        if progress:
            print(f"\rround {round_no + 1}/{rounds}{'':<30}", end="", file=sys.stderr, flush=True)
        for job in jobs:
            if len(job.times) < job.reps:
                if cfg.keep_gc:
                    gc.collect()  # start each repetition from the same collector state
                job.times.append(_timed(job.fn, job.number, cfg.keep_gc) / job.number)


# ------------------------------------------------------------------- running


@dataclass(slots=True)
class Row:
    doc: Doc
    items_checked: int = 0  # items the schema-only figure validates
    jobs: dict[str, Job] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    outcome: dict[str, Any] = field(default_factory=dict)

    def mb_s(self, measure_name: str) -> float | None:
        timing = self.timings.get(measure_name)
        return None if timing is None else timing.mb_s(self.doc.nbytes)

    def ratio(self, numerator: str, denominator: str) -> float | None:
        top, bottom = self.mb_s(numerator), self.mb_s(denominator)
        return None if top is None or bottom is None else top / bottom


def prepare_doc(doc: Doc, schema: ItemSchema, workstreams: Sequence[str], cfg: Config) -> Row:
    """Calibrate every figure for ``doc`` and record what each tool made of it."""
    row = Row(doc=doc)
    text = doc.text
    policy = policy_for(doc, schema, workstreams)
    parsed = scan_and_parse(text)
    items = [p.value for p in parsed if isinstance(p, Parsed) and isinstance(p.value, dict)]
    row.items_checked = len(items)
    check = schema.check

    def check_all() -> None:
        for item in items:
            check(item)

    salvaged_once = salvage(text, policy)
    records = records_builder(text, salvaged_once, policy)
    least = least_salvage(text, salvaged_once, schema, records) if doc.valid else None

    calls: dict[str, Callable[[], object]] = {
        "loads": lambda: json.loads(text),
        "orjson": lambda: orjson.loads(text),
        "scan_parse": lambda: scan_and_parse(text),
        "schema": check_all,
        "salvage": lambda: salvage(text, policy),
        "repair": lambda: json_repair.repair_json(text, return_objects=True),
        "records": records,
    }
    if least is not None:
        calls["least"] = least
    if not doc.valid:
        del calls["loads"], calls["orjson"]  # both raise on every broken set
        del calls["records"]  # only compared with json.loads
    results: dict[str, object] = {}
    for name, fn in calls.items():
        row.jobs[name], results[name] = calibrate(fn, cfg)
    salvaged = results["salvage"]
    assert isinstance(salvaged, SalvageResult)
    row.outcome = outcome_of(doc, salvaged, results["repair"], items, schema)
    return row


def records_builder(text: str, result: SalvageResult, policy: SalvagePolicy) -> Callable[[], None]:
    """Build the records ``result`` holds, and nothing else: one ``AcceptedItem`` (with its
    span) per kept item, one ``QuarantinedItem`` (with its span, signal, snippet and hash)
    per quarantined one. Any salvage that returns these records pays at least this."""
    snippet_chars = policy.guardrails.snippet_chars

    def build() -> None:
        # As salvage builds them: by position, past the frozen __init__ (speedups.builder).
        for a in result.items:
            new_accepted(
                a.index, a.data, new_span(a.span.start, a.span.end), a.coercions, a.repairs
            )
        for q in result.quarantined:
            held = text[q.span.start : q.span.end]
            new_quarantined(
                q.index,
                q.reason,
                new_signal(
                    q.error.code, q.error.path, q.error.expected, q.error.received, q.error.detail
                ),
                new_span(q.span.start, q.span.end),
                held[:snippet_chars],
                sha256_of(held),
                q.repaired,
            )

    return build


def least_salvage(
    text: str, result: SalvageResult, schema: ItemSchema, records: Callable[[], None]
) -> Callable[[], None]:
    """A lower bound for a whole salvage of a valid report: one strict read of the whole
    document (the compiled check, then orjson once), one jsonschema-rs call over all the
    items at once (no per-item call), and the records. It finds no spans and runs no
    allow-list, ranking or envelope check, so no salvage can be faster."""
    count = len(result.items) + len(result.quarantined)
    verdict, _, values = read_strict_document(text, ITEMS_PATH, count)
    if not verdict or values is None:
        raise RuntimeError("least_salvage: the report is not one strict document")
    every_item = jsonschema_rs.validator_for({"type": "array", "items": dict(schema.schema)})
    if every_item.is_valid(values) != all(schema.check(v) is None for v in values):
        raise RuntimeError("least_salvage: one call over the items disagrees with ItemSchema")

    def least() -> None:
        _, _, items = read_strict_document(text, ITEMS_PATH, count)
        every_item.is_valid(items)
        records()

    return least


def outcome_of(
    doc: Doc,
    result: SalvageResult,
    repaired: object,
    items: Sequence[object],
    schema: ItemSchema,
) -> dict[str, Any]:
    """What each tool made of the document, and whether salvage did what the set intends."""
    counts = result.counts()
    reasons: dict[str, int] = dict(counts["by_reason"])
    limit = max_items_for(doc.size)
    expected: dict[str, int]
    if doc.variant in ("valid", "fenced"):
        expected = {"over_limit": doc.size - limit} if doc.size > limit else {}
        expect_candidates = doc.size
    elif doc.variant == "truncated":
        assert doc.broken_rank is not None
        survivors = doc.broken_rank - 1
        expected = {"truncated": 1}
        if survivors > limit:
            expected["over_limit"] = survivors - limit
        expect_candidates = doc.broken_rank
    else:
        survivors = doc.size - 1
        expected = {"malformed": 1}
        if survivors > limit:
            expected["over_limit"] = survivors - limit
        expect_candidates = doc.size
    ok = reasons == expected and counts["candidates"] == expect_candidates
    repaired_items = repaired.get("recommendations") if isinstance(repaired, dict) else None
    repaired_valid = (
        sum(1 for x in repaired_items if schema.check(x) is None)
        if isinstance(repaired_items, list)
        else 0
    )
    return {
        "status": str(result.status),
        "candidates": counts["candidates"],
        "accepted": counts["accepted"],
        "by_reason": reasons,
        "expected_by_reason": expected,
        "as_expected": ok,
        "parsed_items": len(items),
        "json_repair_items": len(repaired_items) if isinstance(repaired_items, list) else None,
        "json_repair_schema_valid": repaired_valid,
    }


# ------------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class Verdict:
    label: str
    target: str
    values: tuple[tuple[str, float], ...]  # (document, ratio)
    passes: Callable[[float], bool]

    @property
    def worst(self) -> tuple[str, float]:
        failing = [v for v in self.values if not self.passes(v[1])]
        pool = failing or list(self.values)
        # the worst is the one farthest from passing: smallest for >=/>, largest for <=
        if self.passes(0.0):
            return max(pool, key=lambda v: v[1])
        return min(pool, key=lambda v: v[1])

    @property
    def n_pass(self) -> int:
        return sum(1 for _, v in self.values if self.passes(v))

    @property
    def ok(self) -> bool:
        return bool(self.values) and self.n_pass == len(self.values)

    def by_variant(self) -> str:
        """The worst ratio per document variant (the name's first part)."""
        worst: dict[str, float] = {}
        for name, value in self.values:
            variant = name.split("-", 1)[0]
            if variant not in worst or self.passes(0.0) == (value > worst[variant]):
                worst[variant] = value
        return ", ".join(f"{k} {_fmt(v, 0)}x" for k, v in worst.items())

    @property
    def geomean(self) -> float:
        return math.exp(statistics.fmean(math.log(v) for _, v in self.values))


def verdicts(rows: Sequence[Row]) -> list[Verdict]:
    valid = [r for r in rows if r.doc.valid]
    # "Broken" for the repair targets means JSON that json_repair has to repair. A fenced
    # report holds valid JSON, which json_repair hands straight to the C decoder: that is
    # a parse, not a repair, so the fenced sets get their own (informational) line.
    broken = [r for r in rows if not r.doc.valid and r.doc.variant != "fenced"]
    wrapped = [r for r in rows if r.doc.variant == "fenced"]

    def collect(pool: Sequence[Row], top: str, bottom: str) -> tuple[tuple[str, float], ...]:
        out = []
        for row in pool:
            value = row.ratio(top, bottom)
            if value is not None:
                out.append((row.doc.name, value))
        return tuple(out)

    return [
        Verdict(
            label="json.loads / scan+parse   (valid reports)",
            target=f"<= {TARGET_LOADS:g}x",
            values=collect(valid, "loads", "scan_parse"),
            passes=lambda v: v <= TARGET_LOADS,
        ),
        Verdict(
            label="salvage / json.loads      (valid reports)",
            target=f">= {TARGET_SALVAGE_VS_LOADS:g}x",
            values=collect(valid, "salvage", "loads"),
            passes=lambda v: v >= TARGET_SALVAGE_VS_LOADS,
        ),
        Verdict(
            label="scan+parse / json_repair  (broken reports)",
            target=f">= {TARGET_SP_VS_REPAIR:g}x",
            values=collect(broken, "scan_parse", "repair"),
            passes=lambda v: v >= TARGET_SP_VS_REPAIR,
        ),
        Verdict(
            label="salvage / json_repair     (broken reports)",
            target=f">= {TARGET_SALVAGE_VS_REPAIR:g}x",
            values=collect(broken, "salvage", "repair"),
            passes=lambda v: v >= TARGET_SALVAGE_VS_REPAIR,
        ),
        Verdict(
            label="salvage fenced / unfenced (the same report, seconds per call)",
            target=f">= {TARGET_FENCED:g}x",
            values=fenced_against_unfenced(rows),
            passes=lambda v: v >= TARGET_FENCED,
        ),
        Verdict(
            label="records only / json.loads (valid reports; no target)",
            target="-",
            values=collect(valid, "records", "loads"),
            passes=lambda v: True,
        ),
        Verdict(
            label="lower bound / json.loads  (valid reports; no target)",
            target="-",
            values=collect(valid, "least", "loads"),
            passes=lambda v: True,
        ),
        Verdict(
            label="scan+parse / json_repair  (fenced, valid inside; no target)",
            target="-",
            values=collect(wrapped, "scan_parse", "repair"),
            passes=lambda v: True,
        ),
    ]


def fenced_against_unfenced(rows: Sequence[Row]) -> tuple[tuple[str, float], ...]:
    """Per fenced set: the unfenced report's salvage time over the fenced one's (the
    same report, with prose and a fence around it; 1x is no cost for the wrapping)."""
    valid = {(r.doc.size, r.doc.fmt): r for r in rows if r.doc.valid}
    out = []
    for row in rows:
        plain = valid.get((row.doc.size, row.doc.fmt))
        if row.doc.variant != "fenced" or plain is None:
            continue
        fenced_t, plain_t = row.timings.get("salvage"), plain.timings.get("salvage")
        if fenced_t is not None and plain_t is not None:
            out.append((row.doc.name, plain_t.best_s / fenced_t.best_s))
    return tuple(out)


def context() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "json_repair": _version("json_repair"),
        "jsonschema": _version("jsonschema"),
        "salvagelane_rev": _git_rev(),
        "scan_loops": "compiled" if speedups.COMPILED else "pure Python",
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        info["loadavg_1min_at_start"] = round(os.getloadavg()[0], 2)
    return info


def _cpu_model() -> str:
    """The host's CPU model: ratios between C and Python code move with it, so a
    verdict met by a thin margin on one host can be missed on another."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _git_rev() -> str:
    """The commit salvagelane was imported from, or where it was imported from."""
    package = Path(salvagelane.__file__).resolve().parent
    if not package.is_relative_to(ROOT / "src"):
        return f"imported from {package}"
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "?"
    return rev + ("+uncommitted src changes" if dirty else "")


def source_fingerprint() -> str:
    """A hash of the package's source files: tells whether they changed during the run."""
    package = Path(salvagelane.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _fmt(value: float | None, width: int) -> str:
    if value is None:
        return "-".rjust(width)
    if value >= 100:
        return f"{value:{width}.0f}"
    if value >= 10:
        return f"{value:{width}.1f}"
    return f"{value:{width}.2f}"


def _ratio(value: float | None, ok: bool | None, width: int) -> str:
    if value is None:
        return "-".rjust(width)
    mark = "" if ok is None else (" ok" if ok else " !!")
    return (_fmt(value, 0) + "x" + mark).rjust(width)


def print_report(
    rows: Sequence[Row], cfg: Config, ctx: dict[str, Any], digest: str, elapsed: float
) -> None:
    out = sys.stdout
    out.write(
        f"machine: {ctx['python']} | {ctx['platform']} | {ctx['cpu_model']},"
        f" cpu_count={ctx['cpu_count']}"
        + (f" (usable {ctx['cpus_usable']})" if "cpus_usable" in ctx else "")
        + f" | json_repair {ctx['json_repair']} | jsonschema {ctx['jsonschema']}"
        + f" | salvagelane {ctx['salvagelane_rev']} ({ctx['scan_loops']} scan loops)"
        + (
            f" | load avg {ctx['loadavg_1min_at_start']} at start"
            if "loadavg_1min_at_start" in ctx
            else ""
        )
        + "\n"
    )
    out.write(
        f"timing: best of {cfg.reps} reps in interleaved rounds (min {cfg.min_reps} for slow"
        f" calls), each rep >= {cfg.min_rep_s * 1000:g} ms, gc {'on' if cfg.keep_gc else 'off'};"
        f" MB/s = UTF-8 input bytes / 1e6 / s; corpus seed {SEED}, digest {digest}\n\n"
    )
    head = (
        f"{'document':<24}{'items':>6}{'KB':>8} |{'loads':>7}{'orjson':>8}{'scan+':>8}"
        f"{'schema':>8}{'schema':>8}{'salvage':>9}{'json_':>8} |{'loads/':>10}{'salv/':>10}"
        f"{'s+p/':>10}{'salv/':>10}\n"
        f"{'':<24}{'':>6}{'':>8} |{'':>7}{'':>8}{'parse':>8}{'only':>8}{'us/item':>8}{'':>9}"
        f"{'repair':>8} |{'scan+parse':>10}{'loads':>10}{'repair':>10}{'repair':>10}\n"
        f"{'':<24}{'':>6}{'':>8} |{'MB/s':>7}{'MB/s':>8}{'MB/s':>8}{'MB/s':>8}{'':>8}"
        f"{'MB/s':>9}{'MB/s':>8} |{'<=3x':>10}{'>=0.5x':>10}{'>=30x':>10}{'>=30x':>10}\n"
    )
    out.write(head)
    rule = "-" * (len(head.splitlines()[0])) + "\n"
    out.write(rule)
    previous = None
    for row in rows:
        doc = row.doc
        if previous is not None and previous != doc.variant:
            out.write(rule)
        previous = doc.variant
        schema_t = row.timings["schema"]
        per_item = schema_t.best_s / row.items_checked * 1e6 if row.items_checked else None
        r1 = row.ratio("loads", "scan_parse") if doc.valid else None
        r0 = row.ratio("salvage", "loads") if doc.valid else None
        r2 = None if doc.valid else row.ratio("scan_parse", "repair")
        r3 = None if doc.valid else row.ratio("salvage", "repair")
        out.write(
            f"{doc.name:<24}{doc.size:>6}{doc.nbytes / 1000:>8.1f} |"
            f"{_fmt(row.mb_s('loads'), 7)}{_fmt(row.mb_s('orjson'), 8)}"
            f"{_fmt(row.mb_s('scan_parse'), 8)}"
            f"{_fmt(row.mb_s('schema'), 8)}{_fmt(per_item, 8)}{_fmt(row.mb_s('salvage'), 9)}"
            f"{_fmt(row.mb_s('repair'), 8)} |"
            f"{_ratio(r1, None if r1 is None else r1 <= TARGET_LOADS, 10)}"
            f"{_ratio(r0, None if r0 is None else r0 >= TARGET_SALVAGE_VS_LOADS, 10)}"
            f"{_ratio(r2, None if r2 is None else r2 >= TARGET_SP_VS_REPAIR, 10)}"
            f"{_ratio(r3, None if r3 is None else r3 >= TARGET_SALVAGE_VS_REPAIR, 10)}\n"
        )
    out.write(rule)
    out.write(
        "schema only: ItemSchema.check on each already-parsed item (MB/s over the whole"
        " document's bytes); salvage: scan, size/depth checks, strict parse, schema, allow-list"
        " 'candidate', max_items=N/2 by 'rank', envelope, document validity.\n\n"
    )

    out.write("targets (verdict on the worst document set; geometric mean for context)\n")
    for v in verdicts(rows):
        name, value = v.worst
        out.write(
            f"  {v.label}  target {v.target:<7} worst {_fmt(value, 0)}x ({name}),"
            f" geomean {_fmt(v.geomean, 0)}x, {v.n_pass}/{len(v.values)} sets meet it"
            f"  -> {('PASS' if v.ok else 'MISS') if v.target != '-' else 'info'}\n"
        )
        out.write(f"      worst by set: {v.by_variant()}\n")

    out.write("\noutcomes (outside timing): salvage counts, and what json_repair returned\n")
    out.write(
        f"  {'document':<24}{'status':>8}{'cand':>6}{'acc':>6}  {'quarantined by reason':<34}"
        f"{'check':>6}{'jr items':>10}{'jr valid':>9}\n"
    )
    for row in rows:
        o = row.outcome
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(o["by_reason"].items())) or "-"
        jr = o["json_repair_items"]
        out.write(
            f"  {row.doc.name:<24}{o['status']:>8}{o['candidates']:>6}{o['accepted']:>6}  "
            f"{reasons:<34}{'ok' if o['as_expected'] else 'UNEXP':>6}"
            f"{'-' if jr is None else jr:>10}{o['json_repair_schema_valid']:>9}\n"
        )
    unexpected = [r.doc.name for r in rows if not r.outcome["as_expected"]]
    if unexpected:
        out.write(
            "  UNEXPECTED salvage outcome (expected by_reason shown in --json): "
            + ", ".join(unexpected)
            + "\n"
        )
    spreads = sorted((t.spread, f"{r.doc.name}/{m}") for r in rows for m, t in r.timings.items())
    mid = statistics.median(s for s, _ in spreads)
    worst, where = spreads[-1]
    out.write(
        f"\nrepeatability: median/best - 1 over {len(spreads)} measurements: median"
        f" {mid * 100:.1f}%, worst {worst * 100:.1f}% ({where}); total {elapsed:.0f} s\n"
    )


def as_json(
    rows: Sequence[Row], cfg: Config, ctx: dict[str, Any], digest: str, elapsed: float
) -> dict[str, Any]:
    return {
        "context": ctx,
        "config": {
            "seed": SEED,
            "corpus_digest": digest,
            "min_rep_s": cfg.min_rep_s,
            "reps": cfg.reps,
            "min_reps": cfg.min_reps,
            "gc_during_timing": cfg.keep_gc,
            "mb": "1e6 bytes of UTF-8 input",
            "elapsed_s": round(elapsed, 1),
        },
        "documents": [
            {
                "name": r.doc.name,
                "variant": r.doc.variant,
                "variant_note": VARIANT_NOTES[r.doc.variant],
                "items": r.doc.size,
                "format": r.doc.fmt,
                "bytes": r.doc.nbytes,
                "broken_rank": r.doc.broken_rank,
                "items_schema_checked": r.items_checked,
                "figures": {
                    m: {
                        "mb_s": round(t.mb_s(r.doc.nbytes), 3),
                        "best_s": t.best_s,
                        "median_s": t.median_s,
                        "reps": t.reps,
                        "calls_per_rep": t.number,
                    }
                    for m, t in r.timings.items()
                },
                "schema_us_per_item": (
                    r.timings["schema"].best_s / r.items_checked * 1e6 if r.items_checked else None
                ),
                "ratios": {
                    "loads_over_scan_parse": r.ratio("loads", "scan_parse"),
                    "scan_parse_over_repair": r.ratio("scan_parse", "repair"),
                    "salvage_over_repair": r.ratio("salvage", "repair"),
                },
                "outcome": r.outcome,
            }
            for r in rows
        ],
        "targets": [
            {
                "label": " ".join(v.label.split()),
                "target": v.target,
                "worst": {"document": v.worst[0], "ratio": v.worst[1]},
                "geomean": v.geomean,
                "sets_meeting": v.n_pass,
                "sets": len(v.values),
                "verdict": "PASS" if v.ok else "MISS",
            }
            for v in verdicts(rows)
        ],
    }


def profile(docs: Sequence[Doc], top: int) -> None:
    """cProfile of scan+parse on the largest valid pretty-printed report."""
    doc = max((d for d in docs if d.valid and d.fmt == "pretty"), key=lambda d: d.nbytes)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(5):
        scan_and_parse(doc.text)
    profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.sort_stats("tottime").print_stats(top)
    print(f"cProfile: scan+parse x5 on {doc.name} ({doc.nbytes / 1000:.0f} KB), by own time")
    print(buffer.getvalue())


# --------------------------------------------------------------------- main


# Inputs built to make a naive scanner quadratic: quotes that never close on one line,
# open brackets, and one-line reports with quote damage in every item (each damaged item
# sends the scan through sub-item placement).
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "open quotes": lambda n: '{"recommendations": [' + '{"rank": 1, "why": "x, ' * n,
    "open brackets": lambda n: '{"recommendations": [' + "[{" * (4 * n),
    "unclosed array items": lambda n: '{"recommendations": [' + '{"rank": 1}, [{"rank": 2}, ' * n,
    "quote damage each item": lambda n: (
        '{"recommendations": ['
        + ", ".join(
            f'{{"rank": {i}, "why": "a, "related": [{{"rank": {i}, "why": "b"}}]}}'
            for i in range(n)
        )
        + "]}"
    ),
}
GROWTH_SIZES = (500, 1000, 2000, 4000)


def growth(quick: bool) -> list[tuple[str, list[tuple[int, float]]]]:
    """Seconds per salvage() call of each adversarial input at growing sizes."""
    sizes = GROWTH_SIZES[:3] if quick else GROWTH_SIZES
    policy = SalvagePolicy(items_path=ITEMS_PATH)
    out = []
    for name, make in ADVERSARIAL.items():
        points = []
        for n in sizes:
            text = make(n)
            best = min(_timed(lambda text=text: salvage(text, policy), 1, False) for _ in range(3))
            points.append((len(text), best))
        out.append((name, points))
    return out


def print_growth(series: list[tuple[str, list[tuple[int, float]]]]) -> None:
    out = sys.stdout
    out.write("\nlinear growth on adversarial inputs (whole salvage; us per KB should stay flat)\n")
    for name, points in series:
        base = points[0][1] / points[0][0]
        cells = "  ".join(
            f"{size / 1000:.0f} KB {t * 1e3:.1f} ms ({t / size / base:.2f}x)" for size, t in points
        )
        out.write(f"  {name:<24}{cells}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small documents, few reps")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--gc", action="store_true", help="keep the GC enabled while timing")
    parser.add_argument("--reps", type=int, help="repetitions per figure (best is kept)")
    parser.add_argument("--min-rep", type=float, help="seconds one repetition lasts at least")
    parser.add_argument("--profile", action="store_true", help="only profile scan+parse")
    args = parser.parse_args(argv)

    cfg = Config(
        min_rep_s=args.min_rep or (0.01 if args.quick else 0.04),
        reps=args.reps or (3 if args.quick else 7),
        min_reps=min(args.reps or 7, 3 if args.quick else 5),
        budget_s=0.5 if args.quick else 1.5,
        keep_gc=args.gc,
    )
    inputs = load_inputs()
    docs = build_corpus(inputs, QUICK_SIZES if args.quick else FULL_SIZES)
    if args.profile:
        profile(docs, top=25)
        return 0
    schema = ItemSchema.compile(inputs.schema, source=str(SCHEMA_PATH))
    ctx, digest = context(), corpus_digest(docs)  # before timing: src may change meanwhile
    fingerprint = source_fingerprint()
    progress = not args.json and sys.stderr.isatty()
    started = time.perf_counter()
    rows = []
    for number, doc in enumerate(docs, 1):
        if progress:
            print(f"\r[{number}/{len(docs)}] {doc.name:<28}", end="", file=sys.stderr, flush=True)
        rows.append(prepare_doc(doc, schema, inputs.workstreams, cfg))
    run_rounds([job for row in rows for job in row.jobs.values()], cfg, progress)
    for row in rows:
        row.timings = {name: job.timing() for name, job in row.jobs.items()}
    if progress:
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started
    ctx["source_fingerprint"] = fingerprint
    if source_fingerprint() != fingerprint:
        ctx["source_changed_during_run"] = True
        print(
            "warning: salvagelane's source files changed during the run; the figures are for"
            " the code imported at the start",
            file=sys.stderr,
        )
    if args.json:
        json.dump(as_json(rows, cfg, ctx, digest, elapsed), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(rows, cfg, ctx, digest, elapsed)
        print_growth(growth(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
