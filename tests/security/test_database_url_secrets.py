"""A PostgreSQL password given as a query parameter (issue 29.9): libpq reads
``postgresql://u@host/db?password=SECRET`` (and ``?sslpassword=``) as it reads the
userinfo's password, so every place that shows the database URL masks it too: the ``run``
summary's database line, the ``ui`` banner, ``db upgrade``'s output and the messages of a
database that cannot be opened. ``passfile`` names a file, not a secret: it stays.

The commands run as real processes on the test PostgreSQL server (which trusts the test
user, so the password is carried but not needed); a refused connection needs no server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from salvagelane.store import masked_url
from salvagelane.store.engine import describe, url_secrets
from tests.support.cli import FIXTURE, ROOT, salvagelane
from tests.support.databases import _private_state_home, postgres_database
from tests.support.ui_server import running_ui

__all__ = ["_private_state_home", "postgres_database"]  # the fixtures, for this module

SECRET = "s3cret-Query-Pw"
SSL_SECRET = "ssl-Key-Pass-77"


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (
            f"postgresql+psycopg://u@h/db?password={SECRET}",
            "postgresql+psycopg://u@h/db?password=***",
        ),
        (
            f"postgresql+psycopg://u:{SECRET}@h/db?sslpassword={SSL_SECRET}&passfile=/p/.pgpass",
            "postgresql+psycopg://u:***@h/db?passfile=%2Fp%2F.pgpass&sslpassword=***",
        ),
        (
            f"postgresql+psycopg://u@h/db?PASSWORD={SECRET}&password={SSL_SECRET}&password=x",
            "postgresql+psycopg://u@h/db?PASSWORD=***&password=***",
        ),
    ],
)
def test_masked_url_hides_the_password_query_parameters(given: str, shown: str) -> None:
    assert masked_url(given) == shown
    assert SECRET not in masked_url(given)
    assert SSL_SECRET not in masked_url(given)


def test_a_drivers_message_quoting_a_url_secret_is_scrubbed() -> None:
    url = f"postgresql+psycopg://u:{SSL_SECRET}@h/db?password={SECRET}"
    assert url_secrets(url) == [SSL_SECRET, SECRET]
    said = ValueError(f'invalid value "{SECRET}" and "{SSL_SECRET}"\nsecond line')

    assert describe(said, url) == 'invalid value "***" and "***"'


def test_a_connection_error_shows_no_query_password(tmp_path: Path) -> None:
    # Port 1 on the loopback refuses at once: no server is needed to see the message.
    url = f"postgresql://u@127.0.0.1:1/db?password={SECRET}&sslpassword={SSL_SECRET}"

    proc = salvagelane("runs", "list", database=url, cwd=tmp_path, timeout=60)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot open the database" in proc.stderr
    assert "password=***" in proc.stderr
    assert "sslpassword=***" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert SSL_SECRET not in proc.stdout + proc.stderr


# --- on the PostgreSQL server ------------------------------------------------------------------


@pytest.fixture
def url_with_password(postgres_database: Any) -> str:
    postgres_database.reset()
    return f"{postgres_database.url}?password={SECRET}"


@pytest.mark.postgres
def test_db_upgrade_shows_no_query_password(url_with_password: str, tmp_path: Path) -> None:
    proc = salvagelane("db", "upgrade", database=url_with_password, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    assert "?password=***: upgraded from an empty database to" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr


@pytest.mark.postgres
def test_a_missing_database_is_named_without_its_query_password(
    url_with_password: str, tmp_path: Path
) -> None:
    missing = url_with_password.replace("/salvagelane_test_", "/no_such_salvagelane_test_")

    proc = salvagelane("db", "upgrade", database=missing, cwd=tmp_path, timeout=60)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "?password=***: cannot open the database" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


@pytest.mark.postgres
def test_the_run_summary_shows_no_query_password(url_with_password: str, tmp_path: Path) -> None:
    assert salvagelane("db", "upgrade", database=url_with_password, cwd=tmp_path).returncode == 0

    proc = salvagelane(
        "run", "daily-triage", "--replay", str(FIXTURE), "--instructions",
        str(ROOT / "instructions"), database=url_with_password, cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    database_line = next(line for line in proc.stdout.splitlines() if line.startswith("database"))
    assert database_line.endswith("?password=***"), database_line
    assert SECRET not in proc.stdout + proc.stderr


@pytest.mark.postgres
def test_the_ui_banner_shows_no_query_password(url_with_password: str, tmp_path: Path) -> None:
    assert salvagelane("db", "upgrade", database=url_with_password, cwd=tmp_path).returncode == 0

    with running_ui(url_with_password, cwd=tmp_path) as ui:
        banner = ui.banner

    assert any(line.startswith("salvagelane ui on ") for line in banner), banner
    assert any(line.endswith("?password=***") for line in banner), banner
    assert not any(SECRET in line for line in banner)
