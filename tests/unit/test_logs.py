"""Logging: JSON lines, bound run context, console output and secret redaction."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from salvagelane.errors import ConfigurationError
from salvagelane.logs import (
    MIN_SECRET_LENGTH,
    REDACTED,
    bound,
    clear_secrets,
    configure_logging,
    get_logger,
    redact_secrets,
    register_secret,
    secret_field_name,
)

SECRET = "sk-test-4f3e2d1c0b9a-never-print"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Each test configures from scratch; later tests see structlog's defaults again."""
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    clear_secrets()


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    lines = stream.getvalue().splitlines()
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(entry, dict) for entry in parsed)
    return parsed


def _configured(**options: Any) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(stream=stream, **options)
    return stream


# --- JSON lines and context ----------------------------------------------------------------


def test_non_tty_stream_gets_one_json_object_per_line_with_bound_run_context() -> None:
    stream = _configured()
    log = get_logger("salvagelane.runner")

    with bound(run_id="run-7", instruction="daily-triage"):
        log.info("attempt started", attempt=1)
        log.warning("output truncated", finish_reason="length")
    log.info("scheduler idle")

    first, second, outside = _json_lines(stream)
    for entry in (first, second):
        assert entry["run_id"] == "run-7"
        assert entry["instruction"] == "daily-triage"
        assert entry["logger"] == "salvagelane.runner"
    assert first["event"] == "attempt started"
    assert first["attempt"] == 1
    assert (first["level"], second["level"]) == ("info", "warning")
    assert "run_id" not in outside
    assert "instruction" not in outside
    stamp = datetime.fromisoformat(first["timestamp"])
    assert stamp.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - stamp) < timedelta(minutes=5)


def test_bound_restores_the_outer_values_when_nested() -> None:
    stream = _configured()
    log = get_logger()

    with bound(run_id="outer", instruction="a"):
        with bound(run_id="inner"):
            log.info("nested")
        log.info("back")

    nested, back = _json_lines(stream)
    assert (nested["run_id"], nested["instruction"]) == ("inner", "a")
    assert (back["run_id"], back["instruction"]) == ("outer", "a")


def test_logs_go_to_stderr_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    get_logger().info("to stderr", n=1)

    captured = capsys.readouterr()
    assert captured.out == ""
    assert json.loads(captured.err)["event"] == "to stderr"


def test_configuring_twice_replaces_the_setup_and_earlier_loggers_follow() -> None:
    log = get_logger("salvagelane.early")  # taken at import time, before configuration
    first = _configured()
    second = _configured()

    log.info("once")

    assert first.getvalue() == ""
    assert [entry["event"] for entry in _json_lines(second)] == ["once"]


def test_level_filters_lower_levels() -> None:
    stream = _configured(level="warning")
    log = get_logger()

    log.info("hidden")
    log.debug("hidden too")
    log.error("shown")

    assert [entry["event"] for entry in _json_lines(stream)] == ["shown"]


def test_unknown_level_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"log level: expected one of .*got 'loud'"):
        configure_logging(level="loud", stream=io.StringIO())


# --- Console output ------------------------------------------------------------------------


def test_console_mode_off_a_terminal_is_readable_text_without_colours() -> None:
    stream = _configured(json=False)

    with bound(run_id="run-7"):
        get_logger("salvagelane.cli").info("run finished", kept=12)

    text = stream.getvalue()
    assert text.count("\n") == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert "run finished" in text
    assert "kept=12" in text
    assert "run_id=run-7" in text
    assert "[salvagelane.cli]" in text
    assert "\x1b[" not in text


def test_a_terminal_gets_the_console_format_with_colours() -> None:
    terminal = _Terminal()
    configure_logging(stream=terminal)

    get_logger().info("hello", kept=1)

    text = terminal.getvalue()
    assert "hello" in text
    assert "\x1b[" in text
    assert not text.lstrip().startswith("{")


def test_json_can_be_forced_at_a_terminal() -> None:
    terminal = _Terminal()
    configure_logging(stream=terminal, json=True)

    get_logger().info("hello")

    assert json.loads(terminal.getvalue())["event"] == "hello"


def test_capture_logs_sees_events_as_data_with_fields_not_formatted_text() -> None:
    configure_logging(stream=io.StringIO())

    with capture_logs() as entries:
        get_logger("salvagelane.runner").info("run finished", kept=12, quarantined=3)

    assert entries == [{"event": "run finished", "kept": 12, "quarantined": 3, "log_level": "info"}]


# --- Redaction -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "API_KEY",
        "apiKey",
        "apikey",
        "x-api-key",
        "key",
        "Key",
        "private_key",
        "token",
        "access_token",
        "authorization",
        "Authorization",
        "Proxy-Authorization",
        "password",
        "db_password",
        "secret",
        "client_secret",
        "secret_key",
    ],
)
def test_secret_looking_field_names(name: str) -> None:
    assert secret_field_name(name)


@pytest.mark.parametrize(
    "name",
    # Names of environment variables, of report fields and counts: useful, not secret.
    ["api_key_env", "token_env", "rank_key", "max_tokens", "keys", "monkey", "event", "run_id"],
)
def test_names_that_only_resemble_secrets_are_kept(name: str) -> None:
    assert not secret_field_name(name)


def test_secret_fields_are_redacted_also_in_nested_dicts_and_lists() -> None:
    stream = _configured()
    headers = {"Authorization": "Bearer abc", "Accept": "application/json"}
    request = {"url": "https://example.test", "headers": headers, "attempts": [{"token": "t"}]}

    get_logger().info("calling", api_key="k-123", request=request, api_key_env="OPENAI_API_KEY")

    (entry,) = _json_lines(stream)
    assert entry["api_key"] == REDACTED
    assert entry["api_key_env"] == "OPENAI_API_KEY"
    assert entry["request"] == {
        "url": "https://example.test",
        "headers": {"Authorization": REDACTED, "Accept": "application/json"},
        "attempts": [{"token": REDACTED}],
    }
    # The caller's own data is never altered by logging it.
    assert headers["Authorization"] == "Bearer abc"
    assert request["attempts"] == [{"token": "t"}]


def test_registered_secret_is_scrubbed_from_event_fields_and_nested_strings() -> None:
    stream = _configured()
    register_secret(SECRET)

    get_logger().info(
        f"provider rejected {SECRET}",  # the event text is scrubbed too
        detail=f"key {SECRET} is invalid",
        response={"body": [f"echo: {SECRET}"]},
    )

    raw = stream.getvalue()
    assert SECRET not in raw
    (entry,) = _json_lines(stream)
    assert entry["event"] == f"provider rejected {REDACTED}"
    assert entry["detail"] == f"key {REDACTED} is invalid"
    assert entry["response"] == {"body": [f"echo: {REDACTED}"]}


@pytest.mark.parametrize("as_json", [True, False])
def test_registered_secret_is_scrubbed_from_exception_tracebacks(as_json: bool) -> None:
    stream = _configured(json=as_json)
    register_secret(SECRET)
    log = get_logger()

    try:
        raise ValueError(f"bad credentials {SECRET}")
    except ValueError as exc:
        log.exception("call failed")
        log.error("call failed again", error=exc)

    raw = stream.getvalue()
    assert SECRET not in raw
    assert "ValueError: bad credentials [REDACTED]" in raw
    assert "Traceback (most recent call last)" in raw
    if as_json:
        failed, again = _json_lines(stream)
        assert "ValueError" in failed["exception"]
        assert again["error"] == "ValueError('bad credentials [REDACTED]')"


def test_secrets_shorter_than_the_minimum_are_ignored() -> None:
    stream = _configured()
    short = "a" * (MIN_SECRET_LENGTH - 1)
    register_secret(short)
    register_secret("")

    get_logger().info(f"{short} stays", word=short)

    (entry,) = _json_lines(stream)
    assert entry["event"] == f"{short} stays"
    assert entry["word"] == short


def test_a_secret_containing_another_is_replaced_whole() -> None:
    stream = _configured()
    register_secret("abcdefgh")
    register_secret("abcdefgh-ijklmnop")

    get_logger().info("keys", both="abcdefgh-ijklmnop abcdefgh")

    (entry,) = _json_lines(stream)
    assert entry["both"] == f"{REDACTED} {REDACTED}"


def test_redaction_copies_nothing_when_nothing_needs_redacting() -> None:
    nested = {"counts": {"kept": 3}, "items": [{"title": "a"}]}
    event: dict[str, Any] = {"event": "report", "report": nested}

    result = redact_secrets(None, "info", event)

    assert result is event
    assert result["report"] is nested
    assert result["report"]["items"] is nested["items"]
