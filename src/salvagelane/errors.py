"""The one exception hierarchy of salvagelane.

Foreign exceptions (json, jsonschema, OS errors) are translated once, at the
boundary where they happen, with ``raise ... from exc``. Messages say what was
wrong, where, and what was expected.

The hierarchy follows what went wrong, not how a caller answers it. Each error is of one
of these kinds, and each front end maps the kinds in one place (the command line's exit
codes in :func:`salvagelane.cli.app.exit_code_for`, the review page's HTTP statuses in
:func:`salvagelane.ui.app.status_for`):

- :class:`RefusedInputError`: what was given (an option, a file, a form field, a URL, a
  definition) cannot be used as given;
- :class:`NotFoundError`: an id that names nothing;
- :class:`ConflictError`: something that exists, but not in the state the action needs;
- :class:`UnavailableError`: a database or service that cannot serve the request now;
- :class:`FailedOperationError`: an operation that was tried and failed (a provider
  call, a sink, a database read or write, the task queue);
- :class:`InternalError`: salvagelane broke one of its own rules (a bug to report).
"""

from __future__ import annotations

from datetime import datetime


class SalvagelaneError(Exception):
    """Base class for every error salvagelane raises on purpose."""


class RefusedInputError(SalvagelaneError):
    """What was given (an option, a file, a form field, a URL, a definition) cannot be
    used as given; nothing was done with it. The command line exits 2 (an invalid
    definition: 1), the review page answers 400."""


class NotFoundError(SalvagelaneError):
    """A run, attempt, quarantined item or instruction id that names nothing. The command
    line exits 2, the review page answers 404."""


class ConflictError(SalvagelaneError):
    """Something that exists, but not in the state the action needs (an item reviewed
    already, a run that has ended, a list that changed since it was confirmed); nothing
    was changed. The command line exits 2, the review page answers 409."""


class UnavailableError(SalvagelaneError):
    """A database or service that cannot serve the request now: missing, unreachable,
    behind the code's revision, held by another process. The command line exits 2, the
    review page answers 503."""


class FailedOperationError(SalvagelaneError):
    """An operation that was tried and failed: a provider call, a delivery, a database
    read or write, the task queue. The command line exits 1 (the review page: 503 for the
    database, 500 otherwise)."""


class InternalError(SalvagelaneError):
    """salvagelane broke one of its own rules (a state its code should never reach): a
    bug to report. The command line exits 1, the review page answers 500."""


class MissingExtraError(UnavailableError):
    """A command or option needs packages of an extra that is not installed (``ui`` needs
    ``salvagelane[ui]``, a ``postgresql://`` database ``salvagelane[postgres]``...). The
    message says which to install; the CLI exits 2. ``extra`` names it."""

    def __init__(self, message: str, *, extra: str):
        super().__init__(f"{message}: pip install 'salvagelane[{extra}]'")
        self.extra = extra


class ConfigurationError(RefusedInputError):
    """A definition, schema, allow-list or option is unusable as given."""


class DefinitionError(ConfigurationError):
    """An instruction definition is unusable.

    The message names the file, the field path and what was expected, e.g.
    ``instructions/x.yaml: connector.kind: expected one of "openai", "anthropic",
    "replay", got "gpt"``. ``paths`` holds the dotted field paths at fault and
    ``problems`` each problem as ``path: what was wrong (line N)``, in document order
    (the message joins them all).
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        paths: tuple[str, ...] = (),
        problems: tuple[str, ...] = (),
    ):
        super().__init__(message)
        self.source = source
        self.paths = paths
        self.problems = problems


class SchemaError(ConfigurationError):
    """An item or envelope JSON Schema cannot be loaded or is not a valid schema."""


class AllowListError(ConfigurationError):
    """An allow-list cannot be read or is not well formed."""


class ItemsPathError(ConfigurationError):
    """The dotted items path is not well formed."""


class InputError(RefusedInputError):
    """Raw input could not be read at all (not: could not be salvaged)."""


class ConnectorError(FailedOperationError):
    """An LLM call could not be made: a missing API key, an unusable fixture, a bad setting.

    Messages name environment variables, never their values.
    """


class ProviderError(ConnectorError):
    """The provider did not answer with a usable completion.

    ``status`` is the HTTP status (None when no response arrived, or for an error
    reported inside an HTTP 200 body it is 200), ``code`` the provider's native error
    code when it gave one, ``retryable`` whether asking again may help, and
    ``retry_after`` the wait in seconds the provider asked for, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after


class StoreError(FailedOperationError):
    """The database could not be opened, migrated, read or written.

    Messages name the database (with any password masked) and the operation. A write or
    read that failed is a failed operation (the command line exits 1; the review page
    answers 503); the subclasses that are also an :class:`UnavailableError` or a
    :class:`RefusedInputError` are refusals before anything started (exit 2).
    """


class OutdatedDatabaseError(StoreError, UnavailableError):
    """The database's schema is not the one this salvagelane needs: the operator runs
    ``salvagelane db upgrade`` (the CLI exits 2, as for anything the user must fix)."""


class DatabaseOpenError(StoreError, UnavailableError):
    """The database cannot be opened for the command: no SQLite file where a read command
    looks (read commands never create one), a directory in which SQLite cannot create or
    write its files, a server that refuses the connection. Nothing was read or written;
    the CLI exits 2, as for anything the user must fix."""


class ServeLockedError(StoreError, UnavailableError):
    """Another ``salvagelane serve`` already leads on this SQLite database (it holds the
    serve lock beside the file). Refused before anything starts; the CLI exits 2."""


class SpoolError(StoreError):
    """A spool file (a model output the database could not take) could not be written,
    read or removed. The message names the file."""


class AttemptNotStoredError(StoreError):
    """The database refused an attempt, so its record and raw output went to the spool
    file ``spool_file`` instead, which ``salvagelane db recover`` imports. None when
    spooling failed too; the message then says both failures."""

    def __init__(self, message: str, *, spool_file: str | None):
        super().__init__(message)
        self.spool_file = spool_file


class DatabaseUrlError(StoreError, RefusedInputError):
    """A database URL that cannot be used as given: not well formed, an unsupported
    database, or one that keeps nothing (an in-memory or temporary SQLite database, where
    every run, report and review would vanish with the process). The CLI exits 2."""


class UnresolvedCallableError(ConfigurationError):
    """A ``module:function`` reference (a context callable, a callable sink, a scheduler
    target) that names no callable. ``problem`` says which step failed: ``module`` (its
    import raised; the exception is chained), ``attribute`` (``part``, missing; chained) or
    ``not_callable`` (the value found is a ``part``). Each caller says it in its own words."""

    def __init__(self, reference: str, *, problem: str, part: str) -> None:
        super().__init__(f"{reference}: {problem} {part}")
        self.reference = reference
        self.problem = problem
        self.part = part


class ReviewStateError(ConflictError):
    """A quarantined item that exists but not in the state a review action needs: approving
    or rejecting an item that is not pending, approving one whose run has no report, a
    bulk reject whose items changed since they were confirmed. Nothing was changed."""


class SinkError(FailedOperationError):
    """A report sink could not deliver the report. ``target`` names where it was going
    (a path, URL or callable, never a secret)."""

    def __init__(self, message: str, *, target: str, retryable: bool = False):
        super().__init__(message)
        self.target = target
        self.retryable = retryable


class DuplicateFireError(ConflictError):
    """A scheduled fire (instruction and fire time) that already has a run row.

    Raised when a second claim is made for a fire time that was already claimed (by this
    or another process): the fire is being, or was, run (or recorded as missed) elsewhere.
    ``where`` optionally names the database (password masked).
    """

    def __init__(self, *, instruction_id: str, scheduled_for: datetime, where: str = ""):
        prefix = f"{where}: " if where else ""
        super().__init__(
            f"{prefix}instruction {instruction_id!r} already has a run for its fire at "
            f"{scheduled_for.isoformat()}: it was claimed by another run"
        )
        self.instruction_id = instruction_id
        self.scheduled_for = scheduled_for


def not_utf8(exc: UnicodeDecodeError) -> str:
    """A UTF-8 decoding error, said the same way everywhere: ``byte 0xE9 at offset 123 is
    not valid UTF-8`` (the offset counts bytes from the start of what was decoded)."""
    bad = exc.object[exc.start : exc.start + 1]
    byte = f"byte 0x{bad[0]:02X}" if bad else "a byte"
    return f"{byte} at offset {exc.start} is not valid UTF-8"


class QueueError(FailedOperationError):
    """The task queue (``serve --dispatch queue``, ``salvagelane worker``; docs/adr/0013)
    refused or failed: a job could not be enqueued, cancelled or run."""


class RunTakenError(ConflictError):
    """A queued run that is no longer ``queued`` when a worker comes to take it: another
    worker took it, or it was cancelled. The worker does nothing (at most once)."""

    def __init__(self, run_id: str, status: str, where: str = ""):
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}run {run_id} is {status}, not queued: it is not taken again")
        self.run_id = run_id
        self.status = status


class RunStateError(ConflictError):
    """A command asked to act on a run in a state it does not act on (``runs cancel`` of
    a run that has ended): like acting twice on a quarantined item."""
