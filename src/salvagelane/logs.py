"""Structured logs for the whole application, built on structlog.

A log line is an event plus fields: ``log.info("run finished", kept=12)``, never
an f-string with values baked into the event. The pipeline is a list of small
processors, each ``(logger, method_name, event_dict) -> event_dict``:

1. merge the fields bound with :func:`bound` (``run_id``, ``instruction``),
2. add the level, the logger's name and an ISO 8601 UTC timestamp,
3. render exceptions to text (so the next step can scrub them),
4. :func:`redact_secrets` (secret-named fields, and registered secret values in the
   encodings :func:`secret_pattern` lists),
5. render: one JSON object per line, or structlog's readable console format (whose
   values first go through :func:`terminal_safe`).

Logs go to stderr: stdout belongs to command output (``--json``).
"""

from __future__ import annotations

import base64
import functools
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from salvagelane.errors import ConfigurationError
from salvagelane.safe_text import UNSAFE, block, line

if TYPE_CHECKING:  # structlog is imported when the first logger is taken (see _Setup)
    import structlog
    from structlog.typing import FilteringBoundLogger

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "EventDict",
    "Processor",
    "SecretPattern",
    "WrappedLogger",
    "add_logger_name",
    "bound",
    "clear_secrets",
    "configure_logging",
    "get_logger",
    "redact_secrets",
    "redact_text",
    "redact_url",
    "register_secret",
    "register_url",
    "scrub_text",
    "secret_field_name",
    "secret_pattern",
    "terminal_safe",
    "url_secrets",
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


@dataclass(frozen=True, kw_only=True, slots=True)
class _Setup:
    """A chosen configuration, applied to structlog when the first logger is taken.

    Deferred because importing structlog costs about 60 ms (it pulls in asyncio), and
    commands that never log (``salvage``, ``check``, ``--help``) should not pay it.
    """

    as_json: bool
    minimum: int
    out: TextIO


_setup_lock = threading.Lock()
_pending: _Setup | None = None
_applied = False


def configure_logging(
    *, json: bool | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure the application's logs; calling it again replaces the setup.

    ``json=None`` chooses JSON lines unless ``stream`` (stderr by default) is a
    terminal, where the console format is easier to read. Colours only at a terminal.
    The stream is resolved now; structlog is configured when a logger is first taken.
    """
    global _pending
    minimum = _LEVELS.get(level.lower())
    if minimum is None:
        raise ConfigurationError(f"log level: expected one of {', '.join(_LEVELS)}, got {level!r}")
    out = sys.stderr if stream is None else stream
    setup = _Setup(as_json=not out.isatty() if json is None else json, minimum=minimum, out=out)
    with _setup_lock:
        _pending = setup
        if _applied:
            _apply(setup)


def _ensure_configured() -> None:
    global _applied
    if _applied and _pending is None:
        return
    with _setup_lock:
        if not _applied:
            # Nobody configured logs (a library user): the defaults, on stderr.
            _apply(_pending or _default_setup())
            _applied = True
        elif _pending is not None:
            _apply(_pending)


def _default_setup() -> _Setup:
    return _Setup(as_json=not sys.stderr.isatty(), minimum=_LEVELS["info"], out=sys.stderr)


def _apply(setup: _Setup) -> None:
    import structlog

    global _pending
    _pending = None
    as_json, tty, out = setup.as_json, setup.out.isatty(), setup.out
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
        wrapper_class=structlog.make_filtering_bound_logger(setup.minimum),
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
    import structlog

    _ensure_configured()
    # The name travels as a logger factory argument: binding it as a field would build
    # the bound logger now, from the configuration of now.
    logger: FilteringBoundLogger = (
        structlog.get_logger() if name is None else structlog.get_logger(name)
    )
    return logger


@dataclass(frozen=True, slots=True)
class _LoggerFactory:
    """Makes the output logger of each log call; ``args`` are :func:`get_logger`'s."""

    file: TextIO

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        import structlog

        # structlog's PrintLogger, remembering the name given to get_logger (for
        # add_logger_name); an attribute, not a subclass, so structlog loads lazily.
        logger = structlog.PrintLogger(self.file)
        logger.name = args[0] if args and isinstance(args[0], str) else None  # type: ignore[attr-defined]
        return logger


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
    from structlog.contextvars import bound_contextvars

    with bound_contextvars(**fields):
        yield


# --- Redaction -----------------------------------------------------------------------------

# A pattern matching any registered secret in any of the encodings below, or None while
# there is none: the common case then costs one comparison per string. Rebuilt (never
# mutated) on registration, so a thread logging meanwhile sees either the old or the new
# pattern.
_secrets: frozenset[str] = frozenset()
_secret_pattern: SecretPattern | None = None
_registration = threading.Lock()

# Words of a field name that make it secret wherever they appear ...
_SECRET_WORDS = frozenset({"password", "passwd", "secret", "authorization"})
# ... and words that do when they end the name: "access_token", but not "token_env",
# which names an environment variable, nor "max_tokens".
_SECRET_LAST_WORDS = frozenset({"token", "apikey"})
# "key" alone, or after one of these: "api_key", "x-api-key", "private_key"; not
# "rank_key", which names a field of the report.
_KEY_QUALIFIERS = frozenset({"api", "access", "private", "secret", "signing"})
# Words of a URL query parameter's name that make its value a secret besides those of
# secret_field_name: signed URLs (sig, X-Amz-Signature, X-Amz-Credential), OAuth codes.
_QUERY_SECRET_WORDS = frozenset(
    {"sig", "signature", "credential", "auth", "code", "key", "token", "pass", "pwd"}
)
# A path segment of a URL read from the environment at least this long is registered
# as a secret: webhook URLs carry their token in the path (/services/T0/B0/<token>).
_SECRET_SEGMENT_LENGTH = 16

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
    """Scrub ``value`` from every string of every later log line, and from every text
    passed to :func:`scrub_text` or :func:`redact_text`, in any of the encodings
    :func:`secret_pattern` lists.

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
        _secret_pattern = secret_pattern(_secrets)


def clear_secrets() -> None:
    """Forget every registered secret (for tests)."""
    global _secrets, _secret_pattern
    with _registration:
        _secrets = frozenset()
        _secret_pattern = None


def secret_pattern(secrets: Iterable[str]) -> SecretPattern | None:
    r"""One pattern matching each of ``secrets`` as it is or as a provider might echo
    it back:

    - in any letter case;
    - percent-encoded (``quote``, ``quote_plus``, any mix of encoded and plain
      characters, either case of hex digit);
    - as JSON ``\uXXXX`` escapes, for all of its characters or some, and ``\/``;
    - base64, standard or URL-safe, with or without padding: the secret alone, and the
      part of it any longer encoded text must contain. Base64 encodes 3 bytes at a
      time, so where the secret starts in that text (its offset modulo 3) changes its
      encoding: each of the 3 alignments gives its own run of whole 3-byte groups
      (matched in any case too: a false match of 8 or more case-folded base64
      characters is not a practical risk).

    None when ``secrets`` is empty.
    """
    alternatives: dict[str, int] = {}  # regex source -> length of the text it matches
    for secret in secrets:
        folded = secret.lower()
        rest = "".join(map(_character, folded[1:]))
        # One alternative per form of the first character, so that every alternative
        # starts with a literal: the regex engine then skips, at C speed, every position
        # where none of them can start (a model output may be megabytes long).
        for first in _forms(folded[0]):
            alternatives[first + rest] = len(secret)
        for encoded in _base64_forms(secret):
            alternatives[re.escape(encoded.lower())] = len(encoded)
    if not alternatives:
        return None
    # Longest first, so a secret containing another (or a padded base64 form containing
    # its unpadded core) is replaced whole.
    source = "|".join(sorted(alternatives, key=lambda source: -alternatives[source]))
    return SecretPattern(folded=re.compile(source), anycase=re.compile(source, re.IGNORECASE))


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """Registered secrets, matched in lower-cased text (``folded``, fast: see
    :func:`secret_pattern`), or with ``anycase`` when lower-casing changes the text's
    length (U+0130), so positions in the lower-cased text are not those of the text."""

    folded: re.Pattern[str]
    anycase: re.Pattern[str]

    def subn(self, text: str, replacement: str = REDACTED) -> tuple[str, int]:
        """``text`` with each match replaced by ``replacement`` (:data:`REDACTED`), and
        how many there were."""
        lowered = text.lower()
        if len(lowered) != len(text):
            return self.anycase.subn(replacement.replace("\\", "\\\\"), text)
        pieces: list[str] = []
        last = 0
        for match in self.folded.finditer(lowered):
            pieces += (text[last : match.start()], replacement)
            last = match.end()
        if not pieces:
            return text, 0
        pieces.append(text[last:])
        return "".join(pieces), len(pieces) // 2

    def search(self, text: str) -> bool:
        lowered = text.lower()
        if len(lowered) != len(text):
            return self.anycase.search(text) is not None
        return self.folded.search(lowered) is not None


def _forms(char: str) -> list[str]:
    r"""Regexes for a lower-case ``char`` in lower-cased text: itself, and the
    percent-encoding and JSON escape of it or of its upper case (lower-casing the text
    leaves the hex digits of ``%4B`` or ``\u004B`` naming the upper-case letter)."""
    forms = [re.escape(char)]
    for variant in dict.fromkeys((char, char.upper())):
        if len(variant) != 1:  # "ß".upper() == "SS": no single escape stands for it
            continue
        forms.append("".join(f"%{byte:02x}" for byte in variant.encode("utf-8")))
        point = ord(variant)
        if point < 0x10000:
            forms.append(f"\\\\u{point:04x}")
        else:  # a surrogate pair in JSON
            point -= 0x10000
            forms.append(f"\\\\u{0xD800 + (point >> 10):04x}\\\\u{0xDC00 + (point & 0x3FF):04x}")
    if char == " ":
        forms.append(r"\+")
    elif char == "/":
        forms.append(r"\\/")
    point = ord(char)
    if point < 0x20 or 0x7F <= point <= 0x9F:
        # As repr() and JSON write a control character: `\n`, `\x0b`.
        forms.append(f"\\\\x{point:02x}")
        named = _NAMED_ESCAPES.get(char)
        if named is not None:
            forms.append("\\\\" + named)
    if point > 0x7E:
        # As a bytes repr writes it (an HTTP client quoting a header it refused), and as
        # a str repr writes an unprintable one (`\xa0`; `\U0001f600`, lower-cased here).
        forms.append("".join(f"\\\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass")))
        if point <= 0xFF:
            forms.append(f"\\\\x{point:02x}")
        elif point > 0xFFFF:
            forms.append(f"\\\\u{point:08x}")  # `\U0001f600`: 4 digits are the JSON form
    return forms


_NAMED_ESCAPES = {"\n": "n", "\t": "t", "\r": "r", "\b": "b", "\f": "f"}


def _character(char: str) -> str:
    """A regex matching ``char`` (lower case) in any of its :func:`_forms`."""
    return "(?:" + "|".join(_forms(char)) + ")"


def _base64_forms(secret: str) -> set[str]:
    data = secret.encode("utf-8")
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode("ascii")
        forms |= {whole, whole.rstrip("=")}
        for start in range(3):
            groups = (len(data) - start) // 3 * 3
            if groups >= 6:  # 8 characters or more: long enough never to match by chance
                forms.add(encode(data[start : start + groups]).decode("ascii"))
    return forms


def scrub_text(text: str, *also: str | None) -> str:
    """``text`` with every registered secret (see :func:`secret_pattern` for the
    encodings) replaced by :data:`REDACTED`. The values in ``also`` are registered first:
    a value worth scrubbing from one message is worth scrubbing from every later one."""
    return redact_text(text, *also)[0]


def redact_text(text: str, *also: str | None, replacement: str = REDACTED) -> tuple[str, int]:
    """:func:`scrub_text`, and how many replacements were made (each by ``replacement``)."""
    for value in also:
        if value:
            register_secret(value)
    pattern = _secret_pattern
    if pattern is None:
        return text, 0
    return pattern.subn(text, replacement)


def redact_url(url: str, *, keep_path: bool = True) -> str:
    """``url`` as it may be logged, printed and stored: scheme, host, port and path kept;
    userinfo (``user:password@``), query string and fragment replaced by
    :data:`REDACTED`. Without ``keep_path`` the path goes too (a URL that is a secret as
    a whole, such as a webhook URL whose path is its token). Text that does not parse as
    an absolute URL is replaced whole when it holds ``@``, ``?`` or ``#``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return REDACTED
    if not parts.scheme or not parts.netloc:
        # Not an absolute URL: shown as it is unless it could hold userinfo or a query.
        return REDACTED if any(mark in url for mark in "@?#") else url
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if "@" in parts.netloc:
        netloc = f"{REDACTED}@{netloc}"
    path = parts.path
    if not keep_path and path not in ("", "/"):
        path = "/" + REDACTED
    return urlunsplit(
        (
            parts.scheme,
            netloc,
            path,
            REDACTED if parts.query else "",
            REDACTED if parts.fragment else "",
        )
    )


def register_url(url: str, *, whole: bool = False) -> None:
    """Register the secrets a URL carries: its userinfo (the password, or a username
    used as a token), and the values of query parameters named like secrets (``token``,
    ``key``, ``sig``...). ``whole`` (a URL read from the environment): the URL itself and
    every long path segment too."""
    for secret in url_secrets(url, whole=whole):
        register_secret(secret)


def url_secrets(url: str, *, whole: bool = False) -> list[str]:
    """The values :func:`register_url` registers for ``url``."""
    found = [url] if whole else []
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return found
    if "@" in parts.netloc:
        found.append(parts.netloc.rpartition("@")[0])
        if password:
            found.append(unquote(password))
        elif username:
            found.append(unquote(username))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        words = {word.lower() for word in _WORD.findall(name)}
        if secret_field_name(name) or words & _QUERY_SECRET_WORDS:
            found.append(value)
    if whole:
        found.extend(
            unquote(segment)
            for segment in parts.path.split("/")
            if len(segment) >= _SECRET_SEGMENT_LENGTH
        )
    return found


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


def _scrub(value: Any, pattern: SecretPattern | None) -> Any:
    """``value`` with secrets replaced; the same object when there was nothing to replace."""
    if isinstance(value, str):
        if pattern is None:
            return value
        return pattern.subn(value)[0]
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
    if not pattern.search(text):
        return value
    return pattern.subn(text)[0]


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
