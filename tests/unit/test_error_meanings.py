"""Issue 29.11: the error hierarchy follows what went wrong, and each front end maps it
in one place: the command line to exit codes (docs/reference/cli.md, "Exit status"), the review page
to HTTP statuses. A state conflict used to be a NotFoundError (a 404 on the page)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from salvagelane.cli.app import EXIT_INVALID, EXIT_USAGE, exit_code_for
from salvagelane.errors import (
    AttemptNotStoredError,
    ConfigurationError,
    ConflictError,
    ConnectorError,
    DatabaseOpenError,
    DatabaseUrlError,
    DefinitionError,
    DuplicateFireError,
    FailedOperationError,
    InputError,
    InternalError,
    MissingExtraError,
    NotFoundError,
    OutdatedDatabaseError,
    QueueError,
    RefusedInputError,
    ReviewStateError,
    RunStateError,
    RunTakenError,
    SalvagelaneError,
    ServeLockedError,
    SinkError,
    StoreError,
    UnavailableError,
)
from salvagelane.ui.app import status_for

FIRE = datetime(2026, 1, 1, tzinfo=UTC)

CASES: list[tuple[SalvagelaneError, type[SalvagelaneError] | None, int, int]] = [
    # error, the kind it is, its exit code, its HTTP status
    (NotFoundError("no run"), NotFoundError, EXIT_USAGE, 404),
    (ReviewStateError("it is approved"), ConflictError, EXIT_USAGE, 409),
    (RunStateError("it has ended"), ConflictError, EXIT_USAGE, 409),
    (RunTakenError("r1", "running"), ConflictError, EXIT_USAGE, 409),
    (DuplicateFireError(instruction_id="x", scheduled_for=FIRE), ConflictError, EXIT_USAGE, 409),
    (ConfigurationError("bad option"), RefusedInputError, EXIT_USAGE, 400),
    (InputError("not UTF-8"), RefusedInputError, EXIT_USAGE, 400),
    (DatabaseUrlError("not a URL"), RefusedInputError, EXIT_USAGE, 400),
    (DefinitionError("x.yaml: bad"), RefusedInputError, EXIT_INVALID, 400),
    (DatabaseOpenError("no database"), UnavailableError, EXIT_USAGE, 503),
    (OutdatedDatabaseError("db upgrade"), UnavailableError, EXIT_USAGE, 503),
    (ServeLockedError("held"), UnavailableError, EXIT_USAGE, 503),
    (MissingExtraError("needs the queue", extra="queue"), UnavailableError, EXIT_USAGE, 503),
    (StoreError("disk full"), FailedOperationError, EXIT_INVALID, 503),
    (AttemptNotStoredError("spooled", spool_file=None), FailedOperationError, EXIT_INVALID, 503),
    (ConnectorError("no key"), FailedOperationError, EXIT_INVALID, 500),
    (SinkError("refused", target="x"), FailedOperationError, EXIT_INVALID, 500),
    (QueueError("no queue"), FailedOperationError, EXIT_INVALID, 500),
    (InternalError("a state the code never reaches"), InternalError, EXIT_INVALID, 500),
]

KINDS = (
    RefusedInputError,
    NotFoundError,
    ConflictError,
    UnavailableError,
    FailedOperationError,
    InternalError,
)


def _concrete_errors(base: type[SalvagelaneError]) -> list[type[SalvagelaneError]]:
    found = []
    for sub in base.__subclasses__():
        found.append(sub)
        found.extend(_concrete_errors(sub))
    return found


def test_every_error_class_is_of_a_kind() -> None:
    unplaced = [
        cls.__name__ for cls in _concrete_errors(SalvagelaneError) if not issubclass(cls, KINDS)
    ]
    assert unplaced == []


@pytest.mark.parametrize(("error", "kind", "code", "status"), CASES)
def test_each_error_means_one_thing_to_each_front_end(
    error: SalvagelaneError, kind: type[SalvagelaneError] | None, code: int, status: int
) -> None:
    if kind is not None:
        assert isinstance(error, kind)
    assert exit_code_for(error) == code
    assert status_for(error) == status


def test_a_state_conflict_is_not_a_missing_id() -> None:
    assert not issubclass(ReviewStateError, NotFoundError)
    assert not issubclass(RunStateError, NotFoundError)
    assert status_for(ReviewStateError("already approved")) == 409
