"""Take the review page's screenshots (docs/img/*.png, in docs/guides/review.md) with Playwright.

Builds a scratch project the way a new user has one: the daily-triage instruction of
this checkout, six scheduled fires on the last days (four with a complete answer of
seven recommendations, one cut off as in the quick start, one missed), and the quick
start's own run; then starts ``salvagelane ui`` and photographs the item view of the
cut-off item and the health view in Debian's headless chromium.

    .venv/bin/python scripts/ui_screenshots.py            # writes docs/img/ui-*.png
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
OUT = ROOT / "docs" / "img"


def salvagelane(*args: str, cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "salvagelane", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(f"salvagelane {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def scheduled_fires(home: Path, today: datetime, fires: list[tuple[int, Path | None]]) -> None:
    """Fires of the daily-triage schedule on past days, as ``serve`` runs them (the
    executor, trigger ``schedule``, at that time), answered from a fixture; None: a fire
    no node was up for, recorded missed."""
    import httpx

    from salvagelane.definitions.ids import instruction_by_id
    from salvagelane.logs import configure_logging
    from salvagelane.runtime.executor import Executor, connector_factory, sinks_factory
    from salvagelane.store import Store
    from salvagelane.vocabulary import Trigger

    configure_logging(json=False, level="warning")
    definition = instruction_by_id("daily-triage", home / "instructions")
    with Store.open(f"sqlite:///{home / 'salvagelane.db'}") as store, httpx.Client() as client:
        for back, fixture in fires:
            fire = today - timedelta(days=back)
            if fixture is None:
                store.record_missed(
                    instruction_id="daily-triage",
                    definition_sha256=definition.definition_sha256,
                    scheduled_for=fire,
                    now=fire + timedelta(hours=1),
                    reason="no node was up",
                )
                continue
            executor = Executor(
                store,
                connector_for=connector_factory(client, replay=fixture),
                sinks_for=sinks_factory(client),
                clock=lambda fire=fire: fire,
            )
            executor.run(definition, trigger=Trigger.SCHEDULE, scheduled_for=fire)


def main() -> int:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        shutil.copytree(ROOT / "instructions", home / "instructions")
        shutil.copytree(ROOT / "schemas", home / "schemas")
        complete = json.loads((FIXTURE / "complete.json").read_text(encoding="utf-8"))
        complete["recommendations"] = complete["recommendations"][:7]
        clean = home / "clean"
        clean.mkdir()
        (clean / "raw.txt").write_text(json.dumps(complete, indent=2), encoding="utf-8")
        shutil.copy(FIXTURE / "meta.json", clean / "meta.json")
        meta = json.loads((clean / "meta.json").read_text(encoding="utf-8"))
        meta.update(finish_reason="stop", native_finish_reason="stop")
        (clean / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("SALVAGELANE_")
        }
        env["PYTHONPATH"] = str(ROOT / "src")
        env["SALVAGELANE_UI_TOKEN"] = "screenshots"
        today = datetime.now(UTC).replace(hour=5, minute=20, second=0, microsecond=0)
        fires = [(6, FIXTURE), (5, None), (4, clean), (3, clean), (2, clean), (1, clean)]
        scheduled_fires(home, today, fires)
        salvagelane("run", "daily-triage", "--replay", str(FIXTURE), cwd=home, env=env)
        server = subprocess.Popen(
            [sys.executable, "-m", "salvagelane", "ui", "--port", "0"],
            cwd=home,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = next(
                line.split(" ", 1)[1].strip() for line in server.stdout if line.startswith("open ")
            )
            base = url.split("/?", 1)[0]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox"]
                )
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(url)
                page.click("#queue tbody tr a")
                # ui.js has scrolled the raw output to the span; the whole page shows it.
                page.screenshot(path=str(OUT / "ui-item.png"), full_page=True)
                page.goto(base + "/health")
                page.screenshot(path=str(OUT / "ui-health.png"), full_page=False)
                browser.close()
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    print(f"wrote {', '.join(p.name for p in sorted(OUT.glob('ui-*.png')))} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
