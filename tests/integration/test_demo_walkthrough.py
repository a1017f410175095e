"""The quick start's whole loop, as a newcomer types it: ``make demo``'s run of the
truncated output, then the quarantine lane's list, show and approve with a correction,
and ``runs show`` with the corrected item added (issue 30). The real command line, on
SQLite in tmp_path; each step reads what it needs from the previous one's text."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import ROOT, salvagelane, upgraded


def demo_command() -> list[str]:
    """``make demo``'s command line, read from the Makefile so the two cannot drift."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    fixture = re.search(r"^FIXTURE := (\S+)$", makefile, re.MULTILINE)
    recipe = re.search(r"^demo:.*\n\t\$\(BIN\)/salvagelane (.+)$", makefile, re.MULTILINE)
    assert fixture is not None, "the Makefile's FIXTURE moved"
    assert recipe is not None, "the Makefile's demo target moved"
    return recipe.group(1).replace("$(FIXTURE)", fixture.group(1)).split()


def test_the_demo_quarantines_the_cut_off_item_and_an_operator_approves_its_correction(
    tmp_path: Path,
) -> None:
    database = upgraded(f"sqlite:///{tmp_path / 'salvagelane.db'}")

    # 1. make demo: the truncated output is salvaged, 7 items kept, the cut-off 8th held.
    assert demo_command() == [
        "run", "daily-triage", "--replay", "tests/fixtures/daily-triage-truncated",
    ]  # fmt: skip
    run = salvagelane(*demo_command(), database=database)
    assert run.returncode == 0, run.stderr
    summary = dict(line.split(None, 1) for line in run.stdout.splitlines())
    assert summary["status"] == "partial"
    assert summary["kept"] == "7 of 8 candidates"
    assert summary["quarantined"] == "1 (truncated 1)"
    assert summary["attempts"] == "1, report from attempt 1"
    run_id = summary["details"].removeprefix("salvagelane runs show ")

    # 2. quarantine list: one pending row, the 8th item of the output.
    listed = salvagelane("quarantine", "list", database=database)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:9] == [
        "ID", "CREATED", "(UTC)", "INSTRUCTION", "RUN", "ITEM", "REASON", "STATUS", "ERROR",
    ]  # fmt: skip
    (row,) = rows
    item_id, *_, run_prefix, item, reason, status = row.split()[:8]
    assert (run_prefix, item, reason, status) == (run_id, "8", "truncated", "pending")

    # 3. quarantine show ID: where it was cut, and the best-effort repair to start from.
    shown = salvagelane("quarantine", "show", item_id, database=database)
    assert shown.returncode == 0, shown.stderr
    assert "source       item 8 of the output, span 4953-5269" in shown.stdout
    assert "repaired candidate (for review; never accepted on its own):" in shown.stdout
    assert "report       7 items" in shown.stdout

    # 4. quarantine approve ID --file: the operator completes the repaired candidate.
    repaired = json.loads(
        salvagelane("quarantine", "show", item_id, "--json", database=database).stdout
    )["repaired"]
    assert repaired["candidate"] == "postgres-15-upgrade"
    fixed = dict(
        repaired,
        why="The cut-over needs a maintenance window; the team is stretched by billing.",
        confidence=0.6,
        wsjf={
            "business_value": 6,
            "time_criticality": 4,
            "risk_reduction": 8,
            "job_size": 8,
            "score": 2.25,
        },
    )
    corrected = tmp_path / "eighth.json"
    corrected.write_text(json.dumps(fixed, indent=2), encoding="utf-8")
    approved = salvagelane(
        "quarantine", "approve", item_id, "--file", str(corrected), "--by", "newcomer",
        database=database,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert approved.stdout.splitlines() == [
        f"approved #{item_id}: added to the report of run {run_id} (8 items now)",
        f"run {run_id}: partial, kept 8 of 8 candidates, quarantined 0; the model's output "
        "was cut off (truncated): no review makes it ok; 1 item approved by an operator "
        "(origin operator)",
    ]

    # 5. runs show: the corrected item is in the report, marked as the operator's, and
    # the quarantine lane says it was approved.
    report = salvagelane("runs", "show", run_id, database=database)
    assert report.returncode == 0, report.stderr
    text = report.stdout
    assert "report       partial: 8 of 8 candidates kept (1 approved by an operator)" in text
    assert "items (8)" in text
    (eighth,) = [line for line in text.splitlines() if line.startswith("  8. ")]
    assert '"candidate": "postgres-15-upgrade"' in eighth
    assert eighth.endswith("[operator]")
    assert f"  #{item_id} item 8 of attempt 1: truncated [approved]" in text
    assert "quarantine lane (1 item, 0 held back)" in text
