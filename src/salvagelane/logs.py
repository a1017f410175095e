"""Structured logs for the whole application, built on structlog.

A log line is an event plus fields: ``log.info("run finished", kept=12)``, never
an f-string with values baked into the event. The pipeline is a list of small
processors, each ``(logger, method_name, event_dict) -> event_dict``:

1. merge the fields bound with :func:`bound` (``run_id``, ``instruction``),
2. add the level, the logger's name and an ISO 8601 UTC timestamp,
3. render exceptions to text (so the next step can scrub them),
4. :func:`redact_secrets`,
5. render: one JSON object per line, or structlog's readable console format (whose
   values first go through :func:`terminal_safe`).

Logs go to stderr: stdout belongs to command output (``--json``).
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import structlog
from structlog.contextvars import bound_contextvars
from structlog.typing import FilteringBoundLogger

from salvagelane.errors import ConfigurationError
from salvagelane.safe_text import UNSAFE, block, line

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "EventDict",
    "Processor",
    "WrappedLogger",
    "add_logger_name",
    "bound",
    "clear_secrets",
    "configure_logging",
    "get_logger",
    "redact_secrets",
    "register_secret",
    "secret_field_name",
    "terminal_safe",
]

WrappedLogger = Any
"""The output logger at the end of the pipeline (structlog's ``PrintLogger`` here)."""

EventDict = MutableMapping[str, Any]
"""One log event: ``event``, ``level``, ``timestamp`` and the fields."""

Processor = Callable[[WrappedLogger, str, EventDict], EventDict]
"""One step of the pipeline: takes the event dict and returns it, changed or not."""

REDACTED = "[REDACTED]"

MIN_SECRET_LENGTH = 8
"""Shorter values are not registered as secrets: scrubbing a 3-letter value from
every string would mangle ordinary words in events and tracebacks, and no real API
key or token is that short."""

_LEVELS: Mapping[str, int] = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "error": 40,
    "critical": 50,
}


# --- Configuration -------------------------------------------------------------------------


def configure_logging(
    *, json: bool | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog for the application; calling it again replaces the setup.

    ``json=None`` chooses JSON lines unless ``stream`` (stderr by default) is a
    terminal, where the console format is easier to read. Colours only at a terminal.
    """
    minimum = _LEVELS.get(level.lower())
    if minimum is None:
        raise ConfigurationError(f"log level: expected one of {', '.join(_LEVELS)}, got {level!r}")
    out = sys.stderr if stream is None else stream
    tty = out.isatty()
    as_json = not tty if json is None else json

    renderer: structlog.typing.Processor
    if as_json:
        renderer = structlog.processors.JSONRenderer()
    else:
        # plain_traceback renders the text format_exc_info left in "exception", so
        # tracebacks stay scrubbed. Pretty (rich) tracebacks would format the live
        # exception after redaction and could print a key held in a local variable.
        renderer = structlog.dev.ConsoleRenderer(
            colors=tty, exception_formatter=structlog.dev.plain_traceback
        )
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact_secrets,
        *([] if as_json else [terminal_safe]),
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(minimum),
        context_class=dict,
        logger_factory=_LoggerFactory(out),
        # Not cached: a logger taken at import time must follow a later
        # configure_logging() (the CLI configures after imports; tests reconfigure).
        cache_logger_on_first_use=False,
    )


def get_logger(name: str | None = None) -> FilteringBoundLogger:
    """A logger; ``name`` (usually ``__name__``) becomes the ``logger`` field.

    Safe at import time: the logger follows a later :func:`configure_logging`.
    """
    # The name travels as a logger factory argument: binding it as a field would build
    # the bound logger now, from the configuration of now.
    logger: FilteringBoundLogger = (
        structlog.get_logger() if name is None else structlog.get_logger(name)
    )
    return logger


class _NamedPrintLogger(structlog.PrintLogger):
    """structlog's PrintLogger, remembering the name given to :func:`get_logger`."""

    def __init__(self, file: TextIO, name: str | None) -> None:
        super().__init__(file)
        self.name = name


@dataclass(frozen=True, slots=True)
class _LoggerFactory:
    """Makes the output logger of each log call; ``args`` are :func:`get_logger`'s."""

    file: TextIO

    def __call__(self, *args: Any) -> _NamedPrintLogger:
        name = args[0] if args and isinstance(args[0], str) else None
        return _NamedPrintLogger(self.file, name)


def add_logger_name(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor: the ``logger`` field, from the name given to :func:`get_logger`."""
    name = getattr(logger, "name", None)
    if isinstance(name, str):
        event_dict.setdefault("logger", name)
    return event_dict


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log line in the block (and in the code it calls).

    Context-local, so concurrent runs in threads or tasks keep their own fields;
    the previous values of the same names are restored on leaving.
    """
    with bound_contextvars(**fields):
        yield


# --- Redaction -----------------------------------------------------------------------------

# A pattern matching any registered secret, or None while there is none: the common
# case then costs one comparison per string. Rebuilt (never mutated) on registration,
# so a thread logging meanwhile sees either the old or the new pattern.
_secrets: frozenset[str] = frozenset()
_secret_pattern: re.Pattern[str] | None = None
_registration = threading.Lock()

# Words of a field name that make it secret wherever they appear ...
_SECRET_WORDS = frozenset({"password", "passwd", "secret", "authorization"})
# ... and words that do when they end the name: "access_token", but not "token_env",
# which names an environment variable, nor "max_tokens".
_SECRET_LAST_WORDS = frozenset({"token", "apikey"})
# "key" alone, or after one of these: "api_key", "x-api-key", "private_key"; not
# "rank_key", which names a field of the report.
_KEY_QUALIFIERS = frozenset({"api", "access", "private", "secret", "signing"})

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


@functools.lru_cache(maxsize=1024)  # a program logs few distinct field names, often
def secret_field_name(name: str) -> bool:
    """Whether a field called ``name`` holds a secret (``api_key``, ``Authorization``...)."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or words[-1] in _SECRET_LAST_WORDS:
        return True
    return words[-1] == "key" and (len(words) == 1 or words[-2] in _KEY_QUALIFIERS)


def register_secret(value: str) -> None:
    """Scrub ``value`` from every string of every later log line.

    Values shorter than :data:`MIN_SECRET_LENGTH` are ignored (see there).
    """
    global _secrets, _secret_pattern
    if len(value) < MIN_SECRET_LENGTH:
        return
    # Locked: two connectors registering their keys at once must not lose one.
    with _registration:
        if value in _secrets:
            return
        _secrets = _secrets | {value}
        # Longest first, so a secret containing another is replaced whole.
        ordered = sorted(_secrets, key=len, reverse=True)
        _secret_pattern = re.compile("|".join(re.escape(secret) for secret in ordered))


def clear_secrets() -> None:
    """Forget every registered secret (for tests)."""
    global _secrets, _secret_pattern
    with _registration:
        _secrets = frozenset()
        _secret_pattern = None


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor: replace secret-named fields and registered secret values.

    Nested mappings and lists are rebuilt where something changes, never altered in
    place: they may be the caller's own data.
    """
    pattern = _secret_pattern
    for name, value in event_dict.items():
        if secret_field_name(name):
            event_dict[name] = REDACTED
        else:
            scrubbed = _scrub(value, pattern)
            if scrubbed is not value:
                event_dict[name] = scrubbed
    return event_dict


_PLAIN = (int, float, bool, type(None))


def _scrub(value: Any, pattern: re.Pattern[str] | None) -> Any:
    """``value`` with secrets replaced; the same object when there was nothing to replace."""
    if isinstance(value, str):
        if pattern is None:
            return value
        return pattern.sub(REDACTED, value)
    if isinstance(value, Mapping):
        changed = False
        copied: dict[Any, Any] = {}
        for key, item in value.items():
            secret = isinstance(key, str) and secret_field_name(key)
            new = REDACTED if secret else _scrub(item, pattern)
            changed = changed or new is not item
            copied[key] = new
        return copied if changed else value
    if isinstance(value, list | tuple):
        items = [_scrub(item, pattern) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items
    if pattern is None or isinstance(value, _PLAIN):
        return value
    # Anything else is rendered with repr() (an exception passed as a field, a Path):
    # when that text holds a secret, log the scrubbed text instead.
    text = repr(value)
    if pattern.search(text) is None:
        return value
    return pattern.sub(REDACTED, text)


# --- The console -----------------------------------------------------------------------------

_MULTI_LINE_FIELDS = frozenset({"exception", "stack"})


def terminal_safe(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Processor (console format only): no field reaches the terminal raw.

    The console renderer prints the event, and a string field without spaces, as it is;
    a field may carry a model's output or a provider's error. Such a value has its
    control characters shown as escapes (:mod:`salvagelane.safe_text`), newlines too, so
    it cannot forge a log line; a traceback keeps its lines. Values the renderer shows
    by ``repr()`` are safe as they are, unless an object's own ``repr`` is not. JSON lines
    need none of this: JSON escapes every control character.
    """
    for name, value in event_dict.items():
        text = value if isinstance(value, str) else repr(value)
        if UNSAFE.search(text) is None:
            continue  # what an honest value prints is left exactly as it was
        event_dict[name] = block(text) if name in _MULTI_LINE_FIELDS else line(text)
    return event_dict
