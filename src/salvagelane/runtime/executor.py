"""One run of one instruction: render, call, store the raw output, salvage, retry, persist.

The order is the contract: the raw output of every attempt is committed to the
database before it is parsed, so a crash or a bug in salvage can never lose what the
model said; the report, its items and the quarantine are then written in one
transaction, so a failure there leaves no half-written report (the run stays
``running`` until the scheduler marks it interrupted). Sinks run last and can only
record their own failure: they never touch the stored report. Each delivery is
written ``pending`` with the report (see :mod:`salvagelane.runtime.delivery`), so a process that
dies while delivering leaves it due, never silently undelivered.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from salvagelane.call_cut import CallCut
from salvagelane.connectors import Completion, CompletionRequest, Connector, build_connector
from salvagelane.context_sources import reference_time
from salvagelane.core import SalvageResult, salvage
from salvagelane.core.assembly import bytes_over_cap
from salvagelane.core.attempts import Scored, best_attempt, correction_prompt
from salvagelane.core.finish import FinishReason
from salvagelane.definitions import (
    DefinitionSnapshot,
    Instruction,
    snapshot_for_run,
    with_snapshot,
)
from salvagelane.definitions.snapshot import without_secrets
from salvagelane.errors import (
    AttemptNotStoredError,
    ConnectorError,
    DefinitionError,
    NotFoundError,
    ProviderError,
    SalvagelaneError,
    SpoolError,
    StoreError,
)
from salvagelane.logs import bound, get_logger, scrub_text
from salvagelane.runtime.delivery import (
    DEFAULT_POLICY,
    DeliveryPolicy,
    deliver_claimed,
    pending_deliveries,
)
from salvagelane.runtime.delivery import deliver_report as deliver_report  # its former home
from salvagelane.runtime.plan import (
    build_run_sinks,
    plan_run,
    provider_retry_cause,
    redacted,
    request_summary,
    run_status,
)
from salvagelane.runtime.plan import failure as failure_of
from salvagelane.runtime.telemetry import NO_TELEMETRY, RunObserver, error_kind, usage_tokens
from salvagelane.sinks import DeliveryOutcome, Sink, build_sinks, run_address
from salvagelane.store import (
    ClaimedDelivery,
    DefinitionRecord,
    QuarantineRecord,
    ReportItemRecord,
    ReportRecord,
    Store,
    bound_raw,
)
from salvagelane.store.spool import Spool, SpooledAttempt
from salvagelane.vocabulary import Clock, ItemOrigin, ReviewStatus, RunStatus, Trigger, utc_now

if TYPE_CHECKING:
    import httpx

log = get_logger("salvagelane.executor")

ConnectorFactory = Callable[[Instruction], Connector]
SinkFactory = Callable[[Instruction], Sequence[Sink]]
ClaimObserver = Callable[[str], None]
"""Told the run id as soon as a run has claimed its fire (``serve`` tracks runs in flight)."""
StopRequest = Callable[[], bool]
"""Asked at each check point of a run (before each model call, and before the report is
written): True when the operator cancelled it (``runs cancel``, through the task queue)."""


class _Cancelled(Exception):
    """A run's stop request was seen at a check point (internal to the executor)."""


def mark_abandoned(
    store: Store, abandoned: Mapping[str, str], *, reason: str, timeout: float, now: datetime
) -> None:
    """Mark runs still going at a shutdown timeout (run id -> instruction) interrupted.

    ``serve`` and ``worker`` stop alike: the raw outputs stored so far stay, and a
    scheduled run's fire gets its one retry from the leader.
    """
    for run_id, instruction_id in sorted(abandoned.items()):
        with bound(run_id=run_id, instruction=instruction_id):
            try:
                marked = store.mark_interrupted(
                    run_id,
                    now=now,
                    error=(
                        f"interrupted: {reason} and the run did not finish within the "
                        f"{timeout:g} s shutdown timeout; its raw outputs so far are kept"
                    ),
                )
            except SalvagelaneError:
                log.exception("run.interrupt_failed")
                continue
            if marked:
                log.warning("run.interrupted", reason="shutdown timeout")


def connector_factory(client: httpx.Client, *, replay: Path | None = None) -> ConnectorFactory:
    """Each instruction's connector over ``client``, bounded by its schedule's deadline;
    with ``replay`` (``run --replay``) the fixture answers whatever the definition names."""

    def connector_for(instruction: Instruction) -> Connector:
        return build_connector(
            instruction.connector,
            client=client,
            deadline_seconds=instruction.schedule.deadline_seconds,
            replay=replay,
        )

    return connector_for


def sinks_factory(client: httpx.Client) -> SinkFactory:
    """Each instruction's sinks, its webhooks posting over ``client``."""

    def sinks_for(instruction: Instruction) -> Sequence[Sink]:
        return build_sinks(instruction.sinks, client=client)

    return sinks_for


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    """How a run ended, for the scheduler and the log. Its figures are those the store
    records (:mod:`salvagelane.store.figures`); the CLI prints the stored run itself."""

    run_id: str
    instruction_id: str
    status: RunStatus
    kept: int
    candidates: int
    quarantined: Mapping[str, int]
    finish_reason: str | None
    native_finish_reason: str | None
    attempts: int
    best_attempt: int | None
    error: str | None
    deliveries: tuple[DeliveryOutcome, ...] = ()
    # Of ``quarantined``, those past guardrails.max_quarantined: counted, not stored.
    folded: Mapping[str, int] = field(default_factory=dict)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())


@dataclass(kw_only=True, slots=True)
class _Attempt:
    number: int
    attempt_id: str
    completion: Completion | None = None
    result: SalvageResult | None = None
    provider_error: str | None = None


@dataclass(kw_only=True, slots=True)
class _RunState:
    run_id: str
    attempts: list[_Attempt] = field(default_factory=list)
    deadline_passed: bool = False
    sinks: tuple[Sink, ...] = ()
    claims: list[ClaimedDelivery] = field(default_factory=list)


class Executor:
    """Runs instructions against a store. Connectors and sinks come from factories so
    the CLI, the scheduler and tests choose them (a replay fixture, a local server)."""

    def __init__(
        self,
        store: Store,
        *,
        connector_for: ConnectorFactory,
        sinks_for: SinkFactory = lambda instruction: (),
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        heartbeat_seconds: float = 15.0,
        on_claimed: ClaimObserver | None = None,
        spool: Spool | None = None,
        delivery_policy: DeliveryPolicy = DEFAULT_POLICY,
        should_stop: StopRequest | None = None,
        telemetry: RunObserver = NO_TELEMETRY,
        stop_poll_seconds: float = 1.0,
    ):
        self._store = store
        self._should_stop = should_stop
        # How often a model call in flight asks should_stop (a cancel cuts the call).
        self._stop_poll_seconds = stop_poll_seconds
        self._telemetry = telemetry  # told each run's events (metrics, issue 17)
        # Where an attempt goes when the database refuses it; by default the spool
        # directory the environment names for this database.
        self._spool = spool
        self._delivery_policy = delivery_policy
        self._on_claimed = on_claimed
        self._connector_for = connector_for
        self._sinks_for = sinks_for
        self._clock = clock
        self._monotonic = monotonic
        self._heartbeat_seconds = heartbeat_seconds

    def run(
        self,
        instruction: Instruction,
        *,
        trigger: Trigger = Trigger.MANUAL,
        scheduled_for: datetime | None = None,
        retry_of: str | None = None,
        forced: bool = False,
        queued_run: str | None = None,
    ) -> RunOutcome:
        """One run, from render to delivery. Returns how it ended.

        ``queued_run``: the id of a run a ``serve --dispatch queue`` leader claimed
        ``queued``; the run takes it (RunTakenError when another worker has, or it was
        cancelled) instead of claiming a fire (``trigger``, ``scheduled_for`` and
        ``retry_of`` are then the queued run's own, for the log).

        With ``scheduled_for`` the run first claims that fire (``retry_of``: the one retry
        of an interrupted run of it): DuplicateFireError, before anything else is
        written, when it is already claimed. ``forced`` records that ``scheduled_for`` is
        not a fire time of the schedule (the caller checked, the operator insisted).

        The definition's version (its text and the files it names, read now) is stored
        with the run, and the run reads those files from it: what the store keeps is what
        the run used. Raises when the database fails or on a bug: the run is then
        recorded ``failed`` if the database still answers, and stays ``running``
        otherwise; its raw outputs are stored either way.
        """
        started = self._clock()
        began = self._monotonic()  # telemetry: the run's duration
        unreadable: DefinitionError | None = None
        snapshot: DefinitionSnapshot | None = None
        try:
            snapshot = snapshot_for_run(instruction)
        except DefinitionError as exc:
            unreadable = exc  # the run is recorded failed with it, once it is claimed
        # What is stored has no secret (a URL's credentials); the run reads the files as
        # they are. Nothing is stored when a secret could not be taken out.
        kept = None if snapshot is None else without_secrets(snapshot, instruction.definition)
        if snapshot is not None and kept is None:
            log.warning(
                "definition.not_stored",
                instruction=instruction.id,
                reason="a credential in a URL of the definition could not be redacted",
            )
        record = (
            None
            if kept is None
            else DefinitionRecord(
                sha256=kept.sha256,
                instruction_id=instruction.id,
                definition_sha256=instruction.definition_sha256,
                content=kept.to_json(),
            )
        )
        if queued_run is not None:
            run_id = self._store.queued.take(
                queued_run,
                now=started,
                definition_sha256=instruction.definition_sha256,
                definition=record,
            ).id
        else:
            run_id = self._store.start_run(
                instruction_id=instruction.id,
                definition_sha256=instruction.definition_sha256,
                trigger=trigger,
                scheduled_for=scheduled_for,
                now=started,
                retry_of=retry_of,
                definition=record,
                forced=forced,
            )
        if self._on_claimed is not None:
            self._on_claimed(run_id)
        # --- telemetry (issue 17) ---
        self._telemetry.run_started(
            instruction_id=instruction.id,
            trigger=trigger,
            scheduled_for=scheduled_for,
            started_at=started,
            retry_of=retry_of,
        )
        # --- end telemetry ---
        state = _RunState(run_id=run_id)
        with bound(run_id=run_id, instruction=instruction.id):
            log.info(
                "run.started",
                trigger=trigger,
                scheduled_for=None if scheduled_for is None else scheduled_for.isoformat(),
                retry_of=retry_of,
            )
            try:
                with self._heartbeat(run_id), reference_time(scheduled_for or started):
                    state.sinks = self._build_sinks(instruction)
                    if unreadable is not None:
                        raise unreadable
                    assert snapshot is not None
                    outcome = self._execute(with_snapshot(instruction, snapshot), state)
            except DefinitionError as exc:
                outcome = self._fail(instruction, state, f"definition: {exc}")
            except _Cancelled:
                outcome = self._fail(
                    instruction,
                    state,
                    f"cancelled: the operator asked the run to stop (salvagelane runs cancel); "
                    f"it stopped after {len(state.attempts)} attempt(s), whose raw outputs "
                    "are kept",
                    status=RunStatus.CANCELLED,
                )
            except AttemptNotStoredError as exc:
                # The database refused an attempt: its output is in the spool file the
                # error names. Say so on the run if the database takes that much.
                try:
                    self._store.fail_run(
                        run_id, finished_at=self._clock(), error=scrub_text(str(exc))
                    )
                except (StoreError, NotFoundError) as also:
                    log.warning("run.fail_not_recorded", error=str(also))
                raise
            except Exception as exc:
                # A bug must not leave the run looking alive: record it, then let it surface.
                log.exception("run.crashed", error_type=type(exc).__name__)
                self._store.fail_run(
                    run_id,
                    finished_at=self._clock(),
                    error=scrub_text(f"internal error: {type(exc).__name__}: {exc}"),
                )
                # --- telemetry (issue 17) ---
                self._telemetry.run_finished(
                    instruction_id=instruction.id,
                    status=RunStatus.FAILED,
                    seconds=self._monotonic() - began,
                    kept=0,
                    quarantined={},
                )
                # --- end telemetry ---
                raise
            if state.claims:
                outcome = self._deliver(state, outcome)
            # --- telemetry (issue 17) ---
            self._telemetry.run_finished(
                instruction_id=instruction.id,
                status=outcome.status,
                seconds=self._monotonic() - began,
                kept=outcome.kept,
                quarantined=outcome.quarantined,
                folded=outcome.folded,
            )
            # --- end telemetry ---
            log.info(
                "run.finished",
                status=outcome.status,
                kept=outcome.kept,
                quarantined=outcome.quarantined_total,
                finish_reason=outcome.finish_reason,
                attempts=outcome.attempts,
                error=outcome.error,
            )
            return outcome

    @contextmanager
    def _cut_when_stopped(self, cut: CallCut | None) -> Iterator[None]:
        """While a model call is in flight, ask should_stop every stop_poll_seconds and
        cut the call once it says so: a cancelled run does not wait for a provider that
        never answers. The check point after the call ends the run."""
        if cut is None or self._should_stop is None:
            yield
            return
        asks = self._should_stop
        done = threading.Event()

        def watch() -> None:
            while not done.wait(self._stop_poll_seconds):
                try:
                    stop = asks()
                except Exception:  # an unanswered question leaves the call running
                    log.warning("run.cancel_check_failed", exc_info=True)
                    continue
                if stop:
                    log.info("run.call_cut")
                    cut.cut()
                    return

        thread = threading.Thread(target=watch, name="cancel-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    @contextmanager
    def _heartbeat(self, run_id: str) -> Iterator[None]:
        """Beat while the run executes, so a scheduler can tell a live run from one whose
        process died (the beats stop) without guessing from its age."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self._heartbeat_seconds):
                try:
                    self._store.heartbeat(run_id, self._clock())
                except Exception:  # a missed beat must never fail the run itself
                    log.warning("run.heartbeat_failed", exc_info=True)

        thread = threading.Thread(target=beat, name=f"heartbeat-{run_id[:8]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # --- the attempts ---------------------------------------------------------------------

    def _execute(self, instruction: Instruction, state: _RunState) -> RunOutcome:
        plan = plan_run(instruction)
        connector = self._connector_for(instruction)
        retry = instruction.retry
        budget = plan.first_budget
        correction: str | None = None
        deadline = instruction.schedule.deadline_seconds
        run_began = self._monotonic()

        def time_left() -> float | None:
            return None if deadline is None else deadline - (self._monotonic() - run_began)

        def past_deadline() -> bool:
            left = time_left()
            return left is not None and left <= 0

        for number in range(1, retry.attempts + 1):
            self._check_point()
            if past_deadline():
                # Attempts already stored still compete for the report; the deadline only
                # stops asking again.
                break
            attempts_left = retry.attempts - number
            request = plan.request(
                max_output_tokens=budget,
                correction=correction,
                # The call, with its own retries, ends when the run's deadline does.
                time_limit_seconds=time_left(),
                cut=None if self._should_stop is None else CallCut(),
            )
            started = self._clock()
            call_began = self._monotonic()  # telemetry: the call's duration
            try:
                with self._cut_when_stopped(request.cut):
                    completion = connector.complete(request)
            except ConnectorError as exc:
                if request.cut is not None and request.cut.requested:
                    # Cut by a cancel, not failed by the provider: stored, then the check
                    # point ends the run.
                    self._telemetry.model_call(
                        instruction_id=instruction.id,
                        seconds=self._monotonic() - call_began,
                        outcome="cancelled",
                    )
                    self._store_failed_call(
                        instruction, state, number, request, exc, started, cut=True
                    )
                    continue
                # --- telemetry (issue 17) ---
                self._telemetry.model_call(
                    instruction_id=instruction.id,
                    seconds=self._monotonic() - call_began,
                    outcome="error",
                )
                self._telemetry.provider_error(
                    instruction_id=instruction.id,
                    kind=error_kind(
                        exc.status if isinstance(exc, ProviderError) else None,
                        provider=isinstance(exc, ProviderError),
                    ),
                )
                # --- end telemetry ---
                attempt = self._store_failed_call(instruction, state, number, request, exc, started)
                trigger = provider_retry_cause(exc)
                if not plan.wants_retry(trigger, attempts_left=attempts_left):
                    break
                self._telemetry.retry(instruction_id=instruction.id, cause=str(trigger))
                log.info("attempt.retry", attempt=number, trigger=str(trigger))
                correction = correction_prompt(
                    None, finish_reason=None, provider_error=attempt.provider_error
                )
                continue

            # --- telemetry (issue 17) ---
            self._telemetry.model_call(
                instruction_id=instruction.id, seconds=self._monotonic() - call_began, outcome="ok"
            )
            self._telemetry.tokens(
                instruction_id=instruction.id,
                prompt=usage_tokens(completion.usage, "prompt_tokens"),
                completion=usage_tokens(completion.usage, "completion_tokens"),
            )
            # --- end telemetry ---
            # A key echoed in the answer is redacted before anything stores or parses it.
            completion, redactions = redacted(completion)
            attempt = self._store_completion(
                instruction, state, number, request, completion, started, redactions
            )
            # plan.salvage, through this module's name: the crash tests replace it here.
            result = salvage(
                completion.text, plan.policy, finish_reason=str(completion.finish_reason)
            )
            attempt.result = result
            trigger = plan.retry_cause(result)
            self._store.set_attempt_outcome(
                attempt.attempt_id,
                {
                    "status": str(result.status),
                    "document_valid": result.document_valid,
                    "truncated": result.truncated,
                    "framing": result.framing,
                    "counts": result.counts(),
                    "envelope_issues": [issue.to_json() for issue in result.envelope_issues],
                    "retry_trigger": None if trigger is None else str(trigger),
                },
            )
            log.info(
                "attempt.salvaged",
                attempt=number,
                status=str(result.status),
                accepted=len(result.items),
                quarantined=result.quarantined_total,
                folded=result.folded_total,
                truncated=result.truncated,
            )
            if trigger is None or not plan.wants_retry(trigger, attempts_left=attempts_left):
                break
            budget = plan.next_budget(budget, cause=trigger, completion=completion)
            self._telemetry.retry(instruction_id=instruction.id, cause=str(trigger))
            log.info(
                "attempt.retry", attempt=number, trigger=str(trigger), max_output_tokens=budget
            )
            correction = correction_prompt(
                result,
                finish_reason=completion.finish_reason,
                max_items=instruction.guardrails.max_items,
            )

        # The last check point: the attempts are stored, the report is not written yet.
        self._check_point()
        state.deadline_passed = past_deadline()
        if state.deadline_passed:
            log.warning("run.deadline", attempts=len(state.attempts), deadline_seconds=deadline)
        return self._persist(instruction, state)

    def _check_point(self) -> None:
        if self._should_stop is not None and self._should_stop():
            log.info("run.cancel_seen")
            raise _Cancelled

    def _store_completion(
        self,
        instruction: Instruction,
        state: _RunState,
        number: int,
        request: CompletionRequest,
        completion: Completion,
        started: datetime,
        redactions: int = 0,
    ) -> _Attempt:
        cap = instruction.guardrails.max_output_bytes
        summary = request_summary(instruction, request)
        if redactions:
            summary["redactions"] = [{"kind": "secret", "count": redactions}]
        attempt_id = self._add_attempt(
            state.run_id,
            number=number,
            started_at=started,
            request=summary,
            raw_output=completion.text,
            finish_reason=str(completion.finish_reason),
            native_finish_reason=completion.native_finish_reason,
            usage=dict(completion.usage),
            model=completion.model,
            request_id=completion.request_id,
            latency_seconds=completion.latency_seconds,
            http_status=completion.http_status,
            provider_error=None,
            stream_error=completion.stream_error,
            finished_at=self._clock(),
            max_raw_bytes=cap,
        )
        log.info(
            "attempt.stored",
            attempt=number,
            chars=len(completion.text),
            # Over the cap only its first ``cap`` bytes were stored, and salvage skips it.
            over_cap=bytes_over_cap(completion.text, cap) is not None,
            finish_reason=str(completion.finish_reason),
            native_finish_reason=completion.native_finish_reason,
            http_status=completion.http_status,
            stream_error=completion.stream_error,
            **({"redactions": redactions} if redactions else {}),
        )
        attempt = _Attempt(number=number, attempt_id=attempt_id, completion=completion)
        state.attempts.append(attempt)
        return attempt

    def _store_failed_call(
        self,
        instruction: Instruction,
        state: _RunState,
        number: int,
        request: CompletionRequest,
        exc: ConnectorError,
        started: datetime,
        *,
        cut: bool = False,
    ) -> _Attempt:
        message = scrub_text(str(exc))
        attempt_id = self._add_attempt(
            state.run_id,
            number=number,
            started_at=started,
            request=request_summary(instruction, request),
            raw_output=None,
            finish_reason=str(FinishReason.ERROR),
            native_finish_reason=None,
            usage=None,
            model=None,
            request_id=None,
            latency_seconds=None,
            http_status=exc.status if isinstance(exc, ProviderError) else None,
            provider_error=message,
            stream_error=None,
            finished_at=self._clock(),
        )
        if cut:
            log.info("attempt.cut", attempt=number, error=message)
        else:
            log.warning("attempt.provider_error", attempt=number, error=message)
        attempt = _Attempt(number=number, attempt_id=attempt_id, provider_error=message)
        state.attempts.append(attempt)
        return attempt

    def _add_attempt(self, run_id: str, *, number: int, **fields: Any) -> str:
        """``Store.add_attempt``; when the database refuses it, the attempt goes to the
        spool and AttemptNotStoredError (naming the spool file) ends the run."""
        try:
            return self._store.add_attempt(run_id, number=number, **fields)
        except (StoreError, NotFoundError) as refused:  # NotFound: the run row is gone
            what = "output" if fields["raw_output"] is not None else "record"
            where = f"attempt {number} of run {run_id}"
            try:
                path = self._spool_for().write(
                    _spooled(self._store.identity, run_id, number, fields)
                )
            except SpoolError as also:
                log.error(
                    "attempt.not_stored", attempt=number, error=str(refused), spool_error=str(also)
                )
                raise AttemptNotStoredError(
                    f"{where} could not be stored ({refused}), and spooling its {what} "
                    f"failed too ({also}): it is lost",
                    spool_file=None,
                ) from refused
            log.error("attempt.spooled", attempt=number, error=str(refused), spool_file=str(path))
            raise AttemptNotStoredError(
                f"{where} could not be stored ({refused}); its {what} was spooled to {path}: "
                "`salvagelane db recover` (or the next command that opens the database) "
                "imports it",
                spool_file=str(path),
            ) from refused

    def _spool_for(self) -> Spool:
        if self._spool is None:
            from salvagelane import environment

            self._spool = Spool(environment.spool_dir(self._store.url))
        return self._spool

    # --- the outcome ----------------------------------------------------------------------

    def _persist(self, instruction: Instruction, state: _RunState) -> RunOutcome:
        scored = [
            Scored(number=a.number, result=a.result) for a in state.attempts if a.result is not None
        ]
        best = best_attempt(scored)
        if best is None:
            errors = [a.provider_error for a in state.attempts if a.provider_error]
            error = errors[-1] if errors else "no attempt was made"
            return self._fail(instruction, state, _deadline_note(instruction, state, error))
        chosen = next(a for a in state.attempts if a.number == best.number)
        assert chosen.completion is not None
        assert chosen.result is not None
        result, completion = chosen.result, chosen.completion
        status = run_status(result, completion)
        # Envelope issues are counted with the report: a damaged envelope is a cut no
        # approval undoes, so the store must know of it when a review settles the status.
        counts = {**result.counts(), "envelope_issues": len(result.envelope_issues)}
        failure: str | None = None
        if status is RunStatus.FAILED:
            failure = _deadline_note(instruction, state, failure_of(result))

        quarantined: list[QuarantineRecord] = []
        for attempt in state.attempts:
            if attempt.result is None or attempt.completion is None:
                continue
            quarantined.extend(
                _quarantine_records(instruction, attempt, superseded=attempt is not chosen)
            )
        report = ReportRecord(
            attempt_id=chosen.attempt_id,
            envelope=dict(result.envelope),
            partial=status is RunStatus.PARTIAL,
            status=status,
            document_valid=result.document_valid,
            truncated=result.truncated,
            finish_reason=str(completion.finish_reason),
            counts=counts,
            items=[
                ReportItemRecord(
                    source_index=item.index,
                    data=item.data,
                    span_start=item.span.start,
                    span_end=item.span.end,
                    coercions=[c.to_json() for c in item.coercions] or None,
                    origin=ItemOrigin.MODEL,
                    repairs=[r.to_json() for r in item.repairs] or None,
                )
                for item in result.items
            ],
        )
        finished_at = self._clock()
        state.claims = self._store.finish_run(
            state.run_id,
            status=status,
            finished_at=finished_at,
            error=failure,
            report=report,
            quarantined=quarantined,
            deliveries=pending_deliveries(
                state.sinks,
                now=finished_at,
                policy=self._delivery_policy,
                address=run_address(state.run_id, instruction.id),
            ),
        )
        return RunOutcome(
            run_id=state.run_id,
            instruction_id=instruction.id,
            status=status,
            kept=len(result.items),
            candidates=int(counts["candidates"]),
            quarantined=dict(counts["by_reason"]),
            folded=dict(result.folded),
            finish_reason=str(completion.finish_reason),
            native_finish_reason=completion.native_finish_reason,
            attempts=len(state.attempts),
            best_attempt=chosen.number,
            error=failure,
        )

    def _fail(
        self,
        instruction: Instruction,
        state: _RunState,
        error: str,
        *,
        status: RunStatus = RunStatus.FAILED,
    ) -> RunOutcome:
        error = scrub_text(error)
        self._store.fail_run(state.run_id, finished_at=self._clock(), error=error, status=status)
        log.warning(f"run.{status}", error=error)
        # The finish reason the store reports for a run without report: its last
        # attempt's (``error`` for a call that failed), None when no call was made.
        last = state.attempts[-1] if state.attempts else None
        return RunOutcome(
            run_id=state.run_id,
            instruction_id=instruction.id,
            status=status,
            kept=0,
            candidates=0,
            quarantined={},
            finish_reason=None if last is None else _finish_reason(last),
            native_finish_reason=(
                None
                if last is None or last.completion is None
                else last.completion.native_finish_reason
            ),
            attempts=len(state.attempts),
            best_attempt=None,
            error=error,
        )

    # --- delivery -------------------------------------------------------------------------

    def _build_sinks(self, instruction: Instruction) -> tuple[Sink, ...]:
        """The instruction's sinks, built before the model is called: a sink that cannot
        be built fails the run before anything is paid for, and the report's deliveries
        are known when it is written."""
        return build_run_sinks(instruction, self._sinks_for)

    def _deliver(self, state: _RunState, outcome: RunOutcome) -> RunOutcome:
        """Send the report to the deliveries written with it, which this process holds."""
        payload = self._store.get_report_payload(state.run_id)
        deliveries = deliver_claimed(
            self._store,
            zip(state.claims, state.sinks, strict=True),
            payload,
            clock=self._clock,
            policy=self._delivery_policy,
        )
        return dataclasses.replace(outcome, deliveries=deliveries)


# --- helpers ---------------------------------------------------------------------------------


def _finish_reason(attempt: _Attempt) -> str:
    """The canonical finish reason stored for ``attempt``: ``error`` for a failed call."""
    if attempt.completion is None:
        return str(FinishReason.ERROR)
    return str(attempt.completion.finish_reason)


def _spooled(database: str, run_id: str, number: int, fields: Mapping[str, Any]) -> SpooledAttempt:
    """The attempt ``Store.add_attempt`` was given, as the spool keeps it: the output as
    the store would have stored it (clipped over the cap), with its full length and hash."""
    values = dict(fields)
    cap = values.pop("max_raw_bytes", None)
    text = values.pop("raw_output")
    raw = None if text is None else bound_raw(text, cap)
    return SpooledAttempt(
        database=database,
        run_id=run_id,
        number=number,
        raw_output=None if raw is None else raw.data,
        raw_length=None if raw is None else raw.length,
        raw_sha256=None if raw is None else raw.sha256,
        **values,
    )


def _deadline_note(instruction: Instruction, state: _RunState, error: str) -> str:
    """``error``, prefixed with ``deadline:`` when the run's deadline cut it short."""
    if not state.deadline_passed:
        return error
    limit = instruction.schedule.deadline_seconds
    return f"deadline: the run's {limit:g} s deadline passed; {error}"


def _quarantine_records(
    instruction: Instruction, attempt: _Attempt, *, superseded: bool
) -> list[QuarantineRecord]:
    assert attempt.result is not None
    assert attempt.completion is not None
    provenance = {
        "instruction": instruction.id,
        "definition_sha256": instruction.definition_sha256,
        "model": attempt.completion.model,
        "finish_reason": str(attempt.completion.finish_reason),
        "native_finish_reason": attempt.completion.native_finish_reason,
        "schema_sha256": instruction.output.item_schema.sha256,
        "attempt": attempt.number,
    }
    return [
        QuarantineRecord(
            attempt_id=attempt.attempt_id,
            instruction_id=instruction.id,
            source_index=item.index,
            reason=str(item.reason),
            error={**item.error.to_json(), "message": item.message},
            span_start=item.span.start,
            span_end=item.span.end,
            snippet=item.snippet,
            sha256=item.sha256,
            repaired=item.repaired if item.has_repair else None,
            provenance=provenance,
            review_status=ReviewStatus.SUPERSEDED if superseded else ReviewStatus.PENDING,
        )
        for item in attempt.result.quarantined
    ]
