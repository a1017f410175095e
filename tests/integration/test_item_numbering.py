"""One numbering everywhere (issue 30, docs/adr/0018-one-item-numbering.md): a run whose
2nd recommendation is quarantined, and every text a person or a model reads about it
calls it "item 2": the correction prompt, ``runs show``, ``quarantine list`` and
``show``, the review page, a captured fixture, its replay, ``try`` and ``salvage``. The
JSON outputs keep the 0-based ``index``/``source_index`` (1 here): that is data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from salvagelane.core import salvage
from salvagelane.core.attempts import correction_prompt
from salvagelane.core.finish import FinishReason
from salvagelane.definitions import load_instruction
from salvagelane.runtime.plan import plan_run
from salvagelane.store import Store
from salvagelane.ui.app import Settings, create_app
from salvagelane.ui.security import Access
from tests.support.cli import ROOT, upgraded
from tests.support.cli import salvagelane_here as salvagelane
from tests.support.review_page import TOKEN, schema_fixture

ITEM_NUMBER = re.compile(r"\bitem (\d+)\b")


def item_numbers(text: str) -> set[str]:
    """Every N of "item N" in ``text``."""
    return set(ITEM_NUMBER.findall(text))


@pytest.fixture
def surfaces(database_url: str, tmp_path: Path) -> dict[str, str]:
    """Each surface's text about the one run whose 2nd item was quarantined."""
    database = upgraded(database_url)
    fixture = schema_fixture(tmp_path / "schema-reject")
    run = salvagelane("run", "daily-triage", "--replay", str(fixture), "--json", database=database)
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    (held,) = json.loads(salvagelane("quarantine", "list", "--json", database=database).stdout)
    assert (held["source_index"], held["reason"]) == (1, "schema")  # stored 0-based: data
    qid = str(held["id"])

    def cli(*args: str) -> str:
        done = salvagelane(*args, database=database)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    raw = (fixture / "raw.txt").read_text(encoding="utf-8")
    plan = plan_run(load_instruction(ROOT / "instructions" / "daily-triage.yaml"))
    result = salvage(raw, plan.policy, finish_reason="stop")
    texts = {
        # What the next attempt's user prompt ends with (the executor's own call).
        "correction prompt": correction_prompt(
            result, finish_reason=FinishReason.STOP, max_items=8
        ),
        "runs show": cli("runs", "show", run_id),
        "quarantine show": cli("quarantine", "show", qid),
        "fixture capture": cli("fixture", "capture", run_id, "--to", str(tmp_path / "fx")),
        "quarantine export": cli("quarantine", "export", qid, "--to", str(tmp_path / "ex")),
        "try": cli("try", "daily-triage", "--sample", str(fixture / "raw.txt")),
        "salvage": cli(
            "salvage",
            "--summary",
            "--items",
            "recommendations",
            "--schema",
            str(ROOT / "schemas" / "daily-triage-item.schema.json"),
            str(fixture / "raw.txt"),
        ),
    }
    # The captured fixture's replay, after its expected.json was edited to another reason.
    expected_path = tmp_path / "fx" / "expected.json"
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    expected["quarantined"][0]["reason"] = "allow_list"
    expected_path.write_text(json.dumps(expected), encoding="utf-8")
    replayed = salvagelane("replay", str(tmp_path / "fx"))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    texts["fixture replay"] = replayed.stdout

    listing = cli("quarantine", "list")
    header, row = listing.splitlines()
    texts["quarantine list"] = " ".join(
        f"{name.lower()} {value}"
        for name, value in zip(header.split()[5:7], row.split()[5:7], strict=True)
    )  # "item 2 reason schema": the ITEM column, read as its header names it

    with Store.open(database) as store:
        settings = Settings(
            store=store,
            access=Access(token=TOKEN, loopback=True),
            instructions_dir=ROOT / "instructions",
            actor="alice",
        )
        client = TestClient(create_app(settings), base_url="http://127.0.0.1:8765")
        page = client.get(f"/items/{qid}")
        assert page.status_code == 200
        texts["review page"] = page.text
        run_page = client.get(f"/runs/{run_id}")
        assert run_page.status_code == 200
        texts["review page's run"] = run_page.text
        queue = client.get("/")
        assert queue.status_code == 200
        # The queue's item column, read as its header names it.
        headers = re.findall(r"<th>([^<]*)</th>", queue.text)
        (row,) = re.findall(r"<tr data-href=.*?</tr>", queue.text, re.DOTALL)
        cells = re.findall(r"<td[^>]*>(?:<[^>]*>)*([^<]*)", row)
        texts["review queue"] = f"{headers[4]} {cells[4]}"
    return texts


SAYS = {
    "correction prompt": '- item 2, schema at $.action: expected one of ["start"',
    "runs show": " item 2 of attempt 1: schema [pending]",
    "quarantine show": "source       item 2 of the output, span ",
    "quarantine list": "item 2 reason schema",
    "review page": "<dt>source</dt><dd>item 2 of the output, span ",
    "review page's run": '</a> item 2 of the output <span class="reason reason-schema">',
    "review queue": "item 2",
    "fixture capture": "expected     partial: 2 item(s) kept, 1 quarantined (item 2: schema)",
    "quarantine export": "(item 2 of the output): schema",
    "fixture replay": "item 2 reason changed: allow_list -> schema",
    "try": "  item 2 of the output: schema",
    "salvage": "  item 2: schema at $.action: expected one of",
}
"""What each surface says about the item, in its own words."""


def test_every_surface_calls_the_quarantined_2nd_item_item_2(surfaces: dict[str, str]) -> None:
    assert set(surfaces) == set(SAYS)
    assert {name: item_numbers(text) for name, text in surfaces.items()} == {
        name: {"2"} for name in surfaces
    }
    missing = {name: text for name, text in surfaces.items() if SAYS[name] not in text}
    assert missing == {}
