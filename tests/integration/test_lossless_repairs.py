"""Lossless repairs end to end, through the real command line (in this process): ``salvage --repair
lossless``, and a definition with ``accept_repairs: lossless`` whose run stores the repairs,
shows them in ``runs show`` and keeps them through ``fixture capture`` and ``replay``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from salvagelane.store import Store
from tests.support.cli import ROOT
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.run_setup import Project, items
from tests.support.trailing_commas import with_trailing_commas

ITEM_SCHEMA = ROOT / "schemas" / "daily-triage-item.schema.json"
WORKSTREAMS = ROOT / "tests" / "fixtures" / "daily-triage-truncated" / "workstreams.txt"


def _report() -> tuple[str, list[int], list[dict[str, Any]]]:
    """A daily-triage report whose second item has a trailing comma in the item and one in
    its ``wsjf`` object; the commas' offsets in the output; the items as meant."""
    meant = items(3)
    head = '{"summary": "Three workstreams.", "recommendations": [\n'
    texts = [json.dumps(item) for item in meant]
    second, commas = with_trailing_commas(meant[1], lambda: " ")
    assert len(commas) == 2
    raw = head + texts[0] + ",\n"
    start = len(raw)
    raw += second + ",\n" + texts[2] + "\n]}"
    return raw, [start + at for at in commas], meant


def _salvage(raw: str, *args: str) -> subprocess.CompletedProcess[str]:
    return salvagelane(
        "salvage",
        "--schema",
        str(ITEM_SCHEMA),
        "--items",
        "recommendations",
        f"--allow=candidate={WORKSTREAMS}",
        *args,
        input=raw,
    )


def test_salvage_repair_lossless_accepts_the_item_and_records_the_repairs() -> None:
    raw, commas, meant = _report()
    done = _salvage(raw, "--repair", "lossless")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok"
    assert [item["data"] for item in result["items"]] == meant
    assert [item.get("repairs") for item in result["items"]] == [
        None,
        [{"kind": "trailing_comma", "at": at} for at in commas],
        None,
    ]
    assert all(raw[at] == "," for at in commas)

    summary = _salvage(raw, "--repair", "lossless", "--summary")
    assert "accepted     3 of 3 candidates (1 repaired losslessly)" in summary.stdout
    assert (
        f"  item 2: trailing_comma at offset {commas[0]}, trailing_comma at offset {commas[1]}"
        in summary.stdout
    )


def test_salvage_without_repair_quarantines_the_item_as_before() -> None:
    raw, _, meant = _report()
    default = _salvage(raw)
    explicit = _salvage(raw, "--repair", "none")
    assert default.returncode == 0, default.stderr
    assert default.stdout == explicit.stdout
    result = json.loads(default.stdout)
    assert [item["data"] for item in result["items"]] == [meant[0], meant[2]]
    assert [(q["index"], q["reason"]) for q in result["quarantined"]] == [(1, "malformed")]
    assert all("repairs" not in item for item in result["items"])


def test_salvage_refuses_an_unknown_repair_policy() -> None:
    raw, _, _ = _report()
    refused = _salvage(raw, "--repair", "best_effort")
    assert refused.returncode == 2
    assert "'best_effort' is not one of 'none', 'lossless'" in refused.stderr


def _run(
    database_url: str, tmp_path: Path, raw: str, *, lossless: bool
) -> tuple[Project, dict[str, Any]]:
    """``run daily-triage --replay`` of ``raw`` in a copy of the example project, its
    definition with ``accept_repairs: lossless`` or as bundled; the run's JSON outcome."""
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "raw.txt").write_text(raw, encoding="utf-8")
    (replay / "meta.json").write_text(
        '{"instruction": "daily-triage", "finish_reason": "stop"}', encoding="utf-8"
    )
    project = Project.create(tmp_path / "project")
    if lossless:
        project.edit({"  coerce: false\n": "  coerce: false\n  accept_repairs: lossless\n"})
    assert salvagelane("db", "upgrade", database=database_url).returncode == 0
    ran = project.run(database_url, {}, "--replay", str(replay), "--json")
    assert ran.returncode == 0, ran.stderr
    outcome: dict[str, Any] = json.loads(ran.stdout)
    return project, outcome


def test_a_definition_with_accept_repairs_lossless_stores_and_shows_the_repairs(
    database_url: str, tmp_path: Path
) -> None:
    raw, commas, meant = _report()
    project, outcome = _run(database_url, tmp_path, raw, lossless=True)
    checked = salvagelane("check", str(project.instructions))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (outcome["status"], outcome["kept"]) == ("ok", 3)
    run_id = outcome["run_id"]

    shown = salvagelane("runs", "show", run_id, "--json", database=database_url)
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)["report"]["items"]
    assert [item["data"] for item in stored] == meant
    assert [item["repairs"] for item in stored] == [
        None,
        [{"kind": "trailing_comma", "at": at} for at in commas],
        None,
    ]
    # What a sink receives says which item was repaired, as it says who wrote an item.
    with Store.open(database_url, read_only=True) as store:
        payload = store.get_report_payload(run_id)
    assert payload["items"] == meant
    assert payload["item_repairs"] == [[], stored[1]["repairs"], []]
    human = salvagelane("runs", "show", run_id, database=database_url)
    assert (
        f"      repaired: trailing_comma at offset {commas[0]}, "
        f"trailing_comma at offset {commas[1]}" in human.stdout
    )
    assert human.stdout.count("repaired:") == 1

    # The regression fixture remembers the item was repaired; replay agrees with itself.
    captured_dir = tmp_path / "captured"
    captured = salvagelane(
        "fixture", "capture", run_id, "--to", str(captured_dir), database=database_url
    )
    assert captured.returncode == 0, captured.stderr
    expected = json.loads((captured_dir / "expected.json").read_text(encoding="utf-8"))
    assert [item.get("repairs") for item in expected["items"]] == [
        None,
        [{"kind": "trailing_comma", "at": at} for at in commas],
        None,
    ]
    replayed = salvagelane("replay", str(captured_dir))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "same" in replayed.stdout


def test_without_accept_repairs_the_same_run_quarantines_the_item(
    database_url: str, tmp_path: Path
) -> None:
    raw, _, meant = _report()
    _, outcome = _run(database_url, tmp_path, raw, lossless=False)
    assert (outcome["status"], outcome["kept"], outcome["quarantined"]) == ("partial", 2, 1)
    shown = salvagelane("runs", "show", outcome["run_id"], "--json", database=database_url)
    detail = json.loads(shown.stdout)
    assert [(q["source_index"], q["reason"]) for q in detail["quarantined"]] == [(1, "malformed")]
    stored = detail["report"]["items"]
    assert [item["data"] for item in stored] == [meant[0], meant[2]]
    assert [item["repairs"] for item in stored] == [None, None]
    with Store.open(database_url, read_only=True) as store:
        assert "item_repairs" not in store.get_report_payload(outcome["run_id"])


def test_an_operators_approved_item_is_repaired_and_recorded_under_the_runs_definition(
    database_url: str, tmp_path: Path
) -> None:
    meant = items(3)
    # The model's 2nd item has a duplicate key as well as a trailing comma: not lossless.
    damaged = '{"rank": 2, ' + json.dumps(meant[1])[1:-1] + ",}"
    raw = (
        '{"summary": "Three workstreams.", "recommendations": [\n'
        + ",\n".join([json.dumps(meant[0]), damaged, json.dumps(meant[2])])
        + "\n]}"
    )
    project, outcome = _run(database_url, tmp_path, raw, lossless=True)
    run_id = outcome["run_id"]
    listed = salvagelane("quarantine", "list", "--json", database=database_url)
    [held] = json.loads(listed.stdout)
    assert held["reason"] == "malformed"

    corrected, commas = with_trailing_commas(meant[1], lambda: "\n")
    path = tmp_path / "item.json"
    path.write_text(corrected, encoding="utf-8")
    approved = salvagelane(
        "quarantine", "approve", str(held["id"]), "--file", str(path), "--by", "alice",
        "--instructions", str(project.instructions), database=database_url,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    shown = salvagelane("runs", "show", run_id, "--json", database=database_url)
    report = json.loads(shown.stdout)["report"]
    [added] = [item for item in report["items"] if item["origin"] == "operator"]
    assert added["data"] == meant[1]
    # Offsets into the operator's text, as the item's check counts them.
    assert added["repairs"] == [{"kind": "trailing_comma", "at": at} for at in commas]
    assert all(corrected[at] == "," for at in commas)
