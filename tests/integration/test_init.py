"""``salvagelane init``: the example project, and the documentation's library example
(docs/reference/library.md) run in it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from salvagelane.cli.init_commands import THEN
from salvagelane.example_project import example_files
from tests.support.cli import ROOT, clean_env, salvagelane

EXAMPLE = [
    "fixtures/daily-triage-truncated/complete.json",
    "fixtures/daily-triage-truncated/definition.json",
    "fixtures/daily-triage-truncated/expected.json",
    "fixtures/daily-triage-truncated/meta.json",
    "fixtures/daily-triage-truncated/raw.txt",
    "fixtures/daily-triage-truncated/workstreams.txt",
    "instructions/context/workstreams.yaml",
    "instructions/daily-triage.yaml",
    "schemas/daily-triage-item.schema.json",
    "schemas/daily-triage-report.schema.json",
    "schemas/instruction.schema.json",
    "schemas/quarantine-export.schema.json",
]


def _files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def _init(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return salvagelane("init", *args, cwd=where)


def test_init_writes_the_example_from_the_checkout(tmp_path: Path) -> None:
    done = _init(tmp_path, "demo")
    assert done.returncode == 0, done.stderr
    demo = tmp_path / "demo"
    assert _files(demo) == EXAMPLE
    # Byte for byte the repository's files: the checkout is the source of truth.
    assert (demo / "instructions/daily-triage.yaml").read_bytes() == (
        ROOT / "instructions/daily-triage.yaml"
    ).read_bytes()
    assert (demo / "fixtures/daily-triage-truncated/raw.txt").read_bytes() == (
        ROOT / "tests/fixtures/daily-triage-truncated/raw.txt"
    ).read_bytes()
    assert done.stdout.splitlines() == [
        "wrote 12 files in demo:",
        *(f"  {path}" for path in EXAMPLE),
        "next: cd demo && salvagelane run daily-triage --replay fixtures/daily-triage-truncated",
        f"then: {THEN}",
    ]


def test_the_example_is_what_the_wheel_ships() -> None:
    # init in a checkout reads the same force-include table the wheel is built from.
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = table["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    shipped = {k: v for k, v in include.items() if v.startswith("salvagelane/example/")}
    assert shipped  # the example is package data
    assert [str(f.path) for f in example_files()] == EXAMPLE


def test_the_written_project_runs_the_quick_start(tmp_path: Path) -> None:
    assert _init(tmp_path, "demo").returncode == 0
    demo = tmp_path / "demo"
    checked = salvagelane("check", cwd=demo)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("ok  daily-triage")
    # The quick start, from the project directory, on its default database there.
    run = salvagelane(
        "run", "daily-triage", "--replay", "fixtures/daily-triage-truncated", cwd=demo
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"^status\s+partial$", run.stdout, re.MULTILINE)
    assert re.search(r"^kept\s+7 of 8 candidates$", run.stdout, re.MULTILINE)
    assert (demo / "salvagelane.db").is_file()
    replayed = salvagelane("replay", "fixtures", cwd=demo)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 fixture(s): 1 same" in replayed.stdout


def test_init_into_the_current_directory(tmp_path: Path) -> None:
    done = _init(tmp_path)
    assert done.returncode == 0, done.stderr
    assert _files(tmp_path) == EXAMPLE
    assert done.stdout.splitlines()[0] == f"wrote 12 files in {tmp_path.resolve()}:"
    assert done.stdout.splitlines()[-2:] == [
        "next: salvagelane run daily-triage --replay fixtures/daily-triage-truncated",
        f"then: {THEN}",
    ]


def test_init_never_overwrites(tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    (demo / "instructions").mkdir(parents=True)
    (demo / "instructions/daily-triage.yaml").write_text("mine\n", encoding="utf-8")
    (demo / "schemas").write_text("a file where a directory goes\n", encoding="utf-8")
    done = _init(tmp_path, "demo")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "salvagelane: error: demo: 2 of the example's paths already exist; nothing was "
        "written (move them away or choose another directory): "
        "instructions/daily-triage.yaml, schemas\n"
    )
    # Nothing written, nothing changed.
    assert _files(demo) == ["instructions/daily-triage.yaml", "schemas"]
    assert (demo / "instructions/daily-triage.yaml").read_text(encoding="utf-8") == "mine\n"


def test_init_refuses_a_file_as_the_directory(tmp_path: Path) -> None:
    (tmp_path / "demo").write_text("x", encoding="utf-8")
    done = _init(tmp_path, "demo")
    assert done.returncode == 2
    assert "demo: 1 of the example's paths already exist" in done.stderr
    assert (tmp_path / "demo").read_text(encoding="utf-8") == "x"


# --- The documentation's "Use as a library" example ----------------------------------------


def _library_example() -> tuple[str, str]:
    """The python block of docs/reference/library.md and the text block that shows what
    it prints."""
    page = (ROOT / "docs" / "reference" / "library.md").read_text(encoding="utf-8")
    code = re.search(r"^```python\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    shown = re.search(r"^```text\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    assert code is not None, "docs/reference/library.md has no python block"
    assert shown is not None, "docs/reference/library.md does not show what it prints"
    assert code.start() < shown.start()
    return code.group(1), shown.group(1)


def test_the_library_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    # As a reader would: salvagelane init demo, then the block pasted into Python in demo.
    code, shown = _library_example()
    assert _init(tmp_path, "demo").returncode == 0
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path / "demo",
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown
    assert done.stdout.startswith("partial 7 kept,")


def test_init_loads_no_heavy_library(tmp_path: Path) -> None:
    # init copies files: it must start as fast as --help (no store, no schema validator).
    probe = (
        "import json, sys\n"
        "from salvagelane.cli import main\n"
        "try:\n"
        "    main(['init', 'demo'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    heavy = {"sqlalchemy", "alembic", "psycopg", "httpx", "apscheduler", "jsonschema", "jinja2"}
    assert not loaded & heavy, sorted(loaded & heavy)
    assert _files(tmp_path / "demo") == EXAMPLE
