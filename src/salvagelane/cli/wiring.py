"""What the commands are run with: the store, the HTTP client with the connectors and sinks
over it, the definitions. Written once here, so every command opens them the same way.

Everything heavy (SQLAlchemy, httpx, the executor) is imported inside the functions: a
command module imports this at its top, and ``--help`` must not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvagelane.errors import NotFoundError, SalvagelaneError
from salvagelane.safe_text import block, line

if TYPE_CHECKING:
    from salvagelane.definitions import DefinitionSet, Instruction
    from salvagelane.definitions.model import Schedule
    from salvagelane.events import EventStream
    from salvagelane.runtime.executor import ConnectorFactory, SinkFactory
    from salvagelane.runtime.metrics import Metrics
    from salvagelane.runtime.notifications import NotificationsFor, Notifier
    from salvagelane.sinks import Sink
    from salvagelane.store import DeliveryRun, Store


@contextmanager
def open_store(database: str | None, *, read_only: bool = False) -> Iterator[Store]:
    """The store at ``database`` (or the environment's default), upgraded if new, with
    the model outputs spooled while it refused them imported.

    ``read_only`` (the commands that only read, listed in docs/reference/cli.md): the database is
    opened read-only, never created, migrated or fed the spool; a missing SQLite file is
    "no database at PATH" (exit 2).

    A database that keeps nothing (in-memory SQLite) is refused by the store's URL check
    (DatabaseUrlError, exit 2), for every command, before anything runs."""
    from salvagelane import environment
    from salvagelane.store import Store

    url = environment.database_url(database)
    with Store.open(url, read_only=read_only) as store:
        if not read_only:
            recover_spooled(store, url)
        yield store


def recover_spooled(store: Store, url: str) -> None:
    """Import the outputs spooled for ``store`` (at ``url``) before a command's own work.

    Never fatal: what cannot be imported stays in the spool, is logged, and
    ``salvagelane db recover`` reports it.
    """
    from salvagelane import environment
    from salvagelane.errors import SpoolError, StoreError
    from salvagelane.logs import get_logger
    from salvagelane.store.spool import Spool, recover

    log = get_logger("salvagelane.spool")
    try:
        spool = Spool(environment.spool_dir(url))
        recovery = recover(store, spool)
    except (SpoolError, StoreError) as exc:
        log.warning("spool.not_recovered", error=str(exc))
        return
    for done in recovery.files:
        if done.entry is not None and done.removed:
            log.info(
                f"spool.{done.outcome}",
                run_id=done.entry.run_id,
                attempt=done.entry.number,
                spool_file=str(done.path),
            )
        elif not done.other_database:
            log.warning("spool.kept", spool_file=str(done.path), problem=done.problem)


def require_known_instruction(store: Store, instruction_id: str) -> None:
    """A filter's instruction id, refused (exit 2) unless some stored run has it: a typo
    must not read as "nothing stored". The known ids are listed."""
    from salvagelane.definitions.ids import shown

    known = store.instruction_ids()
    if instruction_id in known:
        return
    listed = ", ".join(line(known_id) for known_id in known)
    raise click.BadParameter(
        f"no stored run has instruction {shown(instruction_id)}; "
        + (
            f"instructions with stored runs in {line(store.url)}: {listed}"
            if known
            else f"{line(store.url)} holds no runs yet"
        ),
        param_hint="'--instruction'",
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Wired:
    """What runs and deliveries of a command use, over its one HTTP client."""

    connector_for: ConnectorFactory
    sinks_for: SinkFactory
    notifications_for: NotificationsFor

    def notifier(
        self, store: Store, definitions: Callable[[], Mapping[str, Instruction]]
    ) -> Notifier:
        """The notifier of the runs of ``definitions`` (by id), over this client."""
        from salvagelane.runtime.notifications import Notifier

        return Notifier(store, definitions=definitions, notifications_for=self.notifications_for)

    def notifying(self, store: Store, *instructions: Instruction) -> EventStream:
        """A logged event stream whose runs of ``instructions`` notify as their
        definitions say (``notify``)."""
        from salvagelane.events import logged_stream

        stream = logged_stream()
        known = {instruction.id: instruction for instruction in instructions}
        self.notifier(store, lambda: known).subscribe(stream)
        return stream


@contextmanager
def wired(*, replay: Path | None = None) -> Iterator[Wired]:
    """One HTTP client, closed on the way out, with each instruction's connector
    (``replay``: a fixture answers instead, ``run --replay``) and sinks over it."""
    import httpx

    from salvagelane import environment
    from salvagelane.runtime.executor import connector_factory, sinks_factory
    from salvagelane.runtime.notifications import notifications_of

    review_url = environment.review_url()
    with httpx.Client() as client:
        yield Wired(
            connector_for=connector_factory(client, replay=replay),
            sinks_for=sinks_factory(client),
            notifications_for=lambda instruction: notifications_of(
                instruction, client, review_url=review_url
            ),
        )


def schedules_of(definitions: Mapping[str, Instruction]) -> dict[str, Schedule]:
    """Each instruction's schedule, by id: what the metrics' newest-fire gauge reads."""
    return {instruction_id: found.schedule for instruction_id, found in definitions.items()}


def loadable_definitions(directory: Path) -> DefinitionSet:
    """Every definition in ``directory`` that loads; refused when none does (DefinitionError,
    exit 1) or there is none (ConfigurationError, exit 2)."""
    from salvagelane.definitions import load_definitions, require_loadable

    found = load_definitions(directory)
    require_loadable(found, directory)
    return found


class DefinitionSinks:
    """The sinks of each run's instruction, from the definitions in a directory (each
    definition loaded once): what ``runs redeliver --pending`` delivers to."""

    def __init__(
        self,
        directory: Path,
        sinks_for: SinkFactory,
        notifications_for: NotificationsFor | None = None,
    ) -> None:
        self._directory = directory
        self._sinks_for = sinks_for
        self._notifications_for = notifications_for
        self._sinks: dict[str, list[Sink] | str] = {}

    def sinks_for_run(self, run: DeliveryRun) -> list[Sink]:
        from salvagelane.definitions.ids import instruction_by_id

        if run.instruction_id not in self._sinks:
            try:
                definition = instruction_by_id(run.instruction_id, self._directory)
                sinks = list(self._sinks_for(definition))
                if self._notifications_for is not None:
                    sinks.extend(self._notifications_for(definition))
                self._sinks[run.instruction_id] = sinks
            except SalvagelaneError as exc:
                self._sinks[run.instruction_id] = str(exc)
        found = self._sinks[run.instruction_id]
        if isinstance(found, str):
            raise NotFoundError(found)
        return found


def expose_metrics(serving: ExitStack, metrics: Metrics, port: int, host: str) -> str:
    """Serve ``metrics`` on ``host:port`` until ``serving`` closes; return its URL.

    A port in use is a ConfigurationError (exit 2); an address off loopback is served,
    with a warning, since the endpoint has no authentication.
    """
    from salvagelane.runtime.metrics import expose

    endpoint = expose(port, host, registry=metrics.registry)
    serving.callback(endpoint.close)
    if not endpoint.loopback:
        click.echo(
            block(
                f"warning: metrics listen on {host}, not 127.0.0.1: anyone who can reach it "
                "reads them (instruction ids, run counts); there is no authentication"
            ),
            err=True,
        )
    return endpoint.url
