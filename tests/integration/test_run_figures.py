"""Every view of a run tells the same story, whatever runs and reviews came before.

A Hypothesis property drives random sequences of runs (the real executor through
``salvagelane run --replay``, on outputs written here and the bundled truncated fixture),
approvals (accepted and refused), rejections and notes, all through the CLI in-process,
and after each step compares every view of every run with a model kept by the test:
the store's summary (``list_runs``), ``get_run`` and its report, the report payload a
sink receives, ``runs list --json``, ``runs show --json``, the run's and report's rows
as a query of the tables sees them, and, when a step printed one, ``run --json`` and the
approval's answer. Compared: status, partial, kept, quarantined, candidates, finish
reason (ADR 0007, "One truth for a run's figures"). SQLite, and PostgreSQL with fewer
examples.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import structlog
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from salvagelane.cli import cli
from salvagelane.store import Store, upgrade
from salvagelane.store import database_url as normalise_url
from tests.support.cli import FIXTURE, ROOT
from tests.support.postgres import PostgresDatabase

COMPLETE = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
GOOD = COMPLETE["recommendations"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Variant:
    """A recorded model answer and what a run of it must end as: ``held`` are the
    reasons of the chosen attempt's rejects, ``cut`` whether the output counts as cut
    off, ``report`` whether a report is stored, ``empty_status`` the status of a report
    without items."""

    raw: str | None
    finish: str
    kept: int
    held: tuple[str, ...]
    candidates: int
    cut: bool
    report: bool = True
    empty_status: str = "failed"


def _items(count: int, **broken: dict[str, Any]) -> list[dict[str, Any]]:
    """``count`` valid recommendations; ``broken`` maps a 1-based rank to changes."""
    out = [dict(GOOD[i], rank=i + 1) for i in range(count)]
    for rank, changes in broken.items():
        out[int(rank) - 1].update(changes)
    return out


def _report(items: list[dict[str, Any]]) -> str:
    return json.dumps({"summary": "Today.", "recommendations": items}, indent=2)


PANIC = {"action": "panic"}
MADE_UP = {"candidate": "made-up-stream"}
VARIANTS = {
    "clean": Variant(
        raw=_report(_items(3)), finish="stop", kept=3, held=(), candidates=3, cut=False
    ),
    "one_bad": Variant(
        raw=_report(_items(3, **{"2": PANIC})),
        finish="stop",
        kept=2,
        held=("schema",),
        candidates=3,
        cut=False,
    ),
    "two_bad": Variant(
        raw=_report(_items(4, **{"2": PANIC, "4": MADE_UP})),
        finish="stop",
        kept=2,
        held=("schema", "allow_list"),
        candidates=4,
        cut=False,
    ),
    # Nothing usable: failed, with a report of no items; retried once, so the other
    # attempt's rejects are superseded and must never be counted.
    "all_bad": Variant(
        raw=_report(_items(2, **{"1": PANIC, "2": PANIC})),
        finish="stop",
        kept=0,
        held=("schema", "schema"),
        candidates=2,
        cut=False,
    ),
    # A duplicated envelope member: partial with nothing else wrong, and an approval of
    # the bad item cannot make it ok.
    "envelope": Variant(
        raw='{"summary": "a", "summary": "b", "recommendations": '
        + json.dumps(_items(2, **{"2": PANIC}))
        + "}",
        finish="stop",
        kept=1,
        held=("schema",),
        candidates=2,
        cut=True,
    ),
    "truncated": Variant(
        raw=(FIXTURE / "raw.txt").read_text(encoding="utf-8"),
        finish="length",
        kept=7,
        held=("truncated",),
        candidates=8,
        cut=True,
    ),
    "no_list": Variant(
        raw="I cannot help with triage today.",
        finish="stop",
        kept=0,
        held=(),
        candidates=0,
        cut=False,
    ),
    # (A replay of a missing output is no longer a failed run: it is refused before
    # anything is stored, exit 2; tests/integration/test_exit_codes.py has that row.)
}


@dataclass(kw_only=True)
class RunModel:
    """What the test knows of one run: its variant, and its held-back items by state."""

    name: str
    variant: Variant
    pending: dict[int, str] = field(default_factory=dict)  # quarantine id -> reason
    approved: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)

    def expected(self) -> dict[str, Any]:
        v = self.variant
        kept = v.kept + len(self.approved)
        held = len(self.pending) + len(self.rejected)
        if not v.report:
            status = "failed"
        elif kept == 0:
            status = v.empty_status
        else:
            status = "partial" if held or v.cut else "ok"
        by_reason: dict[str, int] = {}
        for reason in [*self.pending.values(), *self.rejected.values()]:
            by_reason[reason] = by_reason.get(reason, 0) + 1
        return {
            "status": status,
            "partial": status == "partial",
            "kept": kept,
            "quarantined": held,
            "by_reason": by_reason,
            "candidates": v.candidates,
            "finish_reason": v.finish,
            "operator_approved": len(self.approved),
        }


# --- the world of one example ---------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    """The bundled definitions (their max_items of 8 leaves room for the truncated
    fixture's cut item, so it can be approved) and one fixture directory per variant."""
    with tempfile.TemporaryDirectory(prefix="figures-") as directory:
        root = Path(directory)
        shutil.copytree(ROOT / "instructions", root / "instructions")
        shutil.copytree(ROOT / "schemas", root / "schemas")
        assert "  max_items: 8\n" in (root / "instructions" / "daily-triage.yaml").read_text()
        for name, variant in VARIANTS.items():
            fixture = root / "fixtures" / name
            fixture.mkdir(parents=True)
            if variant.raw is not None:
                (fixture / "raw.txt").write_text(variant.raw, encoding="utf-8")
                meta = {"finish_reason": variant.finish, "model": "recorded"}
                (fixture / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        yield root


@pytest.fixture(scope="module")
def runner() -> Iterator[CliRunner]:
    # Each invocation points the log at its own captured stderr; put the logging set-up
    # back as it was for the tests that follow.
    saved = structlog.get_config()
    yield CliRunner()
    structlog.configure(**saved)


class World:
    """One database, the CLI on it, and the model of every run stored in it."""

    def __init__(self, url: str, project: Path, runner: CliRunner) -> None:
        self.url = url
        self.project = project
        self.runner = runner
        self.runs: dict[str, RunModel] = {}
        self.printed: dict[str, dict[str, Any]] = {}  # run id -> what the last step printed

    def cli(self, *args: str, input: str | None = None) -> tuple[int, str]:
        result = self.runner.invoke(
            cli,
            ["--log-level", "error", *args, "--database", self.url],
            input=input,
            catch_exceptions=False,
        )
        return result.exit_code, result.stdout

    # --- steps ------------------------------------------------------------------------------

    def run(self, name: str) -> None:
        code, out = self.cli(
            "run", "daily-triage",
            "--instructions", str(self.project / "instructions"),
            "--replay", str(self.project / "fixtures" / name),
            "--json",
        )  # fmt: skip
        printed = json.loads(out)
        model = RunModel(name=name, variant=VARIANTS[name])
        assert code == (1 if model.expected()["status"] == "failed" else 0), printed
        with Store.open(self.url) as store:
            held = store.get_run(printed["run_id"]).quarantined
        model.pending = {q.id: q.reason for q in held if q.review_status == "pending"}
        assert sorted(model.pending.values()) == sorted(model.variant.held)
        self.runs[printed["run_id"]] = model
        self.printed = {printed["run_id"]: _run_json_figures(printed)}

    def approve(self, pick: int, *, good: bool) -> None:
        target = self._pending(pick)
        if target is None:
            return
        run_id, quarantine_id = target
        model = self.runs[run_id]
        item = dict(GOOD[10], rank=9) if good else dict(GOOD[10], rank=9, action="panic")
        code, out = self.cli(
            "quarantine", "approve", str(quarantine_id), "--stdin", "--json",
            "--by", "prop", "--instructions", str(self.project / "instructions"),
            input=json.dumps(item),
        )  # fmt: skip
        answer = json.loads(out)
        if not good:
            assert (code, answer["approved"], answer["reason"]) == (1, False, "schema")
            self.printed = {}
            return
        assert code == 0, out
        del model.pending[quarantine_id]
        model.approved.append(quarantine_id)
        self.printed = {run_id: _summary_figures(answer["run"])}
        report = answer["counts"]
        assert (answer["status"], answer["partial"], answer["items"]) == (
            answer["run"]["status"],
            answer["run"]["partial"],
            answer["run"]["kept_count"],
        )
        assert (report["accepted"], report["quarantined"]) == (
            answer["run"]["kept_count"],
            answer["run"]["quarantined_count"],
        )

    def reject(self, pick: int) -> None:
        target = self._pending(pick)
        if target is None:
            return
        run_id, quarantine_id = target
        code, out = self.cli(
            "quarantine", "reject", str(quarantine_id), "--note", "not real", "--by", "prop"
        )
        assert code == 0, out
        model = self.runs[run_id]
        model.rejected[quarantine_id] = model.pending.pop(quarantine_id)
        self.printed = {}

    def note(self, pick: int) -> None:
        ids = sorted(q for m in self.runs.values() for q in [*m.pending, *m.approved, *m.rejected])
        self.printed = {}
        if not ids:
            return
        code, out = self.cli("quarantine", "note", str(ids[pick % len(ids)]), "looked at it")
        assert code == 0, out

    def _pending(self, pick: int) -> tuple[str, int] | None:
        """The run and id of one pending item (``pick`` modulo how many there are)."""
        pending = sorted(
            (quarantine_id, run_id)
            for run_id, model in self.runs.items()
            for quarantine_id in model.pending
        )
        if not pending:
            return None
        quarantine_id, run_id = pending[pick % len(pending)]
        return run_id, quarantine_id

    # --- the check --------------------------------------------------------------------------

    def check(self) -> None:
        """Every view of every run against the model."""
        code, out = self.cli("runs", "list", "--json", "--limit", "1000")
        assert code == 0, out
        listed = {run["id"]: _summary_figures(run) for run in json.loads(out)}
        assert set(listed) == set(self.runs)
        rows = _rows(self.url)
        with Store.open(self.url) as store:
            summaries = {run.id: run for run in store.list_runs(limit=1000)}
            for run_id, model in self.runs.items():
                expected = model.expected()
                views: dict[str, dict[str, Any]] = {
                    "runs list --json": listed[run_id],
                    "list_runs": _summary_figures(_plain(summaries[run_id])),
                }
                detail = store.get_run(run_id)
                views["get_run"] = _summary_figures(_plain(detail))
                code, out = self.cli("runs", "show", run_id, "--json")
                assert code == 0, out
                shown = json.loads(out)
                views["runs show --json"] = _summary_figures(shown)
                if run_id in self.printed:
                    views["printed by the step"] = self.printed[run_id]
                for report_view, report in (
                    ("get_run().report", _plain(detail.report)),
                    ("runs show --json .report", shown["report"]),
                ):
                    assert (report is not None) == model.variant.report, report_view
                    if report is not None:
                        views[report_view] = _report_figures(report, expected)
                if model.variant.report:
                    views["report payload"] = _report_figures(
                        store.get_report_payload(run_id), expected
                    )
                    views["rows"] = _report_figures(rows[run_id], expected)
                else:
                    assert rows[run_id]["status"] == expected["status"]
                for name, figures in views.items():
                    wanted = {key: expected[key] for key in figures}
                    assert figures == wanted, f"{name} of a {model.name} run disagrees"


FIGURES = ("status", "partial", "kept", "quarantined", "candidates", "finish_reason")


def _summary_figures(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of a run summary as JSON (``runs list``/``runs show``/an approval)."""
    return {
        "status": run["status"],
        "partial": run["partial"],
        "kept": run["kept_count"],
        "quarantined": run["quarantined_count"],
        "by_reason": run["quarantined_by_reason"],
        "candidates": run["candidates"],
        "finish_reason": run["finish_reason"],
        "operator_approved": run["operator_approved"],
    }


def _run_json_figures(printed: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": printed["status"],
        "partial": printed["partial"],
        "kept": printed["kept"],
        "quarantined": printed["quarantined"],
        "by_reason": printed["quarantined_by_reason"],
        "candidates": printed["candidates"],
        "finish_reason": printed["finish_reason"],
        "operator_approved": printed["operator_approved"],
    }


def _report_figures(report: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """A report's figures (a stored row, a view, a payload). Its counts hold the figures;
    a report stored by the executor and never reviewed has no ``operator_approved``."""
    counts = report["counts"]
    figures = {
        "status": report["status"],
        "partial": report["partial"],
        "kept": counts["accepted"],
        "quarantined": counts["quarantined"],
        "candidates": counts["candidates"],
        "finish_reason": report["finish_reason"],
    }
    if "items" in report:
        assert len(report["items"]) == counts["accepted"]
    if "item_origins" in report:
        assert report["item_origins"].count("operator") == expected["operator_approved"]
    return figures


def _plain(record: Any) -> Any:
    from salvagelane.cli.render import to_json

    return to_json(record)


def _rows(url: str) -> dict[str, dict[str, Any]]:
    """The runs' and reports' rows as a plain query sees them."""
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.connect() as connection:
            found = connection.execute(
                sa.text(
                    "SELECT runs.id, runs.status, reports.status, reports.partial, "
                    "reports.counts, reports.finish_reason "
                    "FROM runs LEFT JOIN reports ON reports.run_id = runs.id"
                )
            ).all()
    finally:
        engine.dispose()
    rows: dict[str, dict[str, Any]] = {}
    for run_id, run_status, status, partial, counts, finish in found:
        if status is not None:
            # The run's row and its report's agree, or this is not one story.
            assert run_status == status, (run_id, run_status, status)
        rows[run_id] = {
            "status": run_status,
            "partial": None if partial is None else bool(partial),
            "counts": None if counts is None else json.loads(counts),
            "finish_reason": finish,
        }
    return rows


# --- the property -----------------------------------------------------------------------------

STEP = st.one_of(
    st.tuples(st.just("run"), st.sampled_from(sorted(VARIANTS))),
    st.tuples(st.just("approve"), st.integers(0, 50)),
    st.tuples(st.just("refused"), st.integers(0, 50)),
    st.tuples(st.just("reject"), st.integers(0, 50)),
    st.tuples(st.just("note"), st.integers(0, 50)),
)
SCENARIO = st.tuples(st.sampled_from(sorted(VARIANTS)), st.lists(STEP, max_size=7))


def play(world: World, first: str, steps: list[tuple[str, Any]]) -> None:
    world.run(first)
    world.check()
    actions: dict[str, Callable[[Any], None]] = {
        "run": world.run,
        "approve": lambda pick: world.approve(pick, good=True),
        "refused": lambda pick: world.approve(pick, good=False),
        "reject": world.reject,
        "note": world.note,
    }
    for action, argument in steps:
        actions[action](argument)
        world.check()


@settings(
    max_examples=14,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=SCENARIO)
def test_every_view_of_every_run_agrees_on_sqlite(
    scenario: tuple[str, list[tuple[str, Any]]], project: Path, runner: CliRunner
) -> None:
    with tempfile.TemporaryDirectory(prefix="figures-db-") as directory:
        url = f"sqlite:///{Path(directory) / 'figures.db'}"
        upgrade(url)
        play(World(url, project, runner), *scenario)


@pytest.mark.postgres
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=SCENARIO)
def test_every_view_of_every_run_agrees_on_postgres(
    scenario: tuple[str, list[tuple[str, Any]]],
    project: Path,
    runner: CliRunner,
    postgres_database: PostgresDatabase,
) -> None:
    postgres_database.reset()
    upgrade(postgres_database.url)
    play(World(postgres_database.url, project, runner), *scenario)


def test_the_scenarios_reach_every_kind_of_step(project: Path, runner: CliRunner) -> None:
    """One fixed scenario through every variant and step, so the property's oracle is
    seen to hold for each at least once whatever Hypothesis draws."""
    with tempfile.TemporaryDirectory(prefix="figures-db-") as directory:
        url = f"sqlite:///{Path(directory) / 'figures.db'}"
        upgrade(url)
        steps: list[tuple[str, Any]] = [("run", name) for name in sorted(VARIANTS)]
        steps += [("refused", 0), ("approve", 0), ("reject", 0), ("note", 3), ("approve", 1)]
        steps += [("approve", 0)] * 6
        world = World(url, project, runner)
        play(world, "one_bad", steps)
        models = list(world.runs.values())
        assert {m.expected()["status"] for m in models} == {"ok", "partial", "failed"}
        assert any(m.approved for m in models)
        assert any(m.rejected for m in models)
        # An approval that clears what was held back makes a run ok, unless cut off.
        assert any(m.approved and m.expected()["status"] == "ok" for m in models)
        assert any(m.approved and not m.pending and m.variant.cut for m in models)
