"""A run's attempts: call the model, store the raw output, salvage it, decide to ask again.

Each attempt's raw output is committed before anything parses it, so a crash or a bug in
salvage never loses what the model said; a database that refuses it sends it to the spool
(and the run ends). Between attempts the loop honours the run's deadline and the
operator's cancel. It publishes what happens (:mod:`salvagelane.events`) and returns the
stored attempts; choosing the report is :mod:`salvagelane.runtime.run_records`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from salvagelane.call_cut import CallCut
from salvagelane.connectors import Completion, CompletionRequest, Connector
from salvagelane.core import salvage
from salvagelane.core.assembly import bytes_over_cap
from salvagelane.core.attempts import RetryCause, correction_prompt
from salvagelane.core.reask import reask_prompt
from salvagelane.core.records import QuarantinedItem
from salvagelane.definitions import Instruction
from salvagelane.errors import (
    AttemptNotStoredError,
    ConnectorError,
    NotFoundError,
    ProviderError,
    SpoolError,
    StoreError,
)
from salvagelane.events import EventStream
from salvagelane.events.kinds import (
    AttemptCut,
    AttemptLost,
    AttemptSalvaged,
    AttemptSpooled,
    AttemptStored,
    BudgetExhausted,
    CallCutRequested,
    CancelCheckFailed,
    CancelSeen,
    DeadlinePassed,
    ModelCalled,
    ProviderFailed,
    RetryAsked,
)
from salvagelane.logs import scrub_text
from salvagelane.runtime.budget import BudgetCheck, Exhausted, call_cost
from salvagelane.runtime.plan import plan_run, provider_retry_cause, redacted
from salvagelane.runtime.run_records import (
    Reasking,
    StoredAttempt,
    attempt_outcome,
    completion_fields,
    failed_call_fields,
)
from salvagelane.store import Store, bound_raw
from salvagelane.store.spool import Spool, SpooledAttempt
from salvagelane.vocabulary import Clock

StopRequest = Callable[[], bool]
"""Asked at each check point of a run (before each model call, and before the report is
written): True when the operator cancelled it (``runs cancel``, through the task queue)."""


class CancelRequested(Exception):
    """A run's stop request was seen at a check point (internal to the runtime)."""


class BudgetReached(Exception):
    """The day's budget was reached before a run's first model call (internal to the
    runtime): the run fails without calling the model."""

    def __init__(self, exhausted: Exhausted) -> None:
        super().__init__(exhausted.amounts())
        self.exhausted = exhausted


class AttemptLoop:
    """The attempts of one run (see the module docstring). ``attempts`` is the run's
    list, appended to as each attempt is stored, so the caller has them whatever ends
    the loop."""

    def __init__(
        self,
        store: Store,
        *,
        run_id: str,
        instruction: Instruction,
        connector: Connector,
        events: EventStream,
        attempts: list[StoredAttempt],
        clock: Clock,
        monotonic: Callable[[], float],
        spool_for: Callable[[], Spool],
        should_stop: StopRequest | None = None,
        stop_poll_seconds: float = 1.0,
        budget: BudgetCheck | None = None,
    ):
        self._store = store
        self._budget = budget
        self.budget_stop: Exhausted | None = None
        """The budget limit that stopped the loop before a retry (None: none did)."""
        self._run_id = run_id
        self._instruction = instruction
        self._connector = connector
        self._events = events
        self._attempts = attempts
        self._clock = clock
        self._monotonic = monotonic
        self._spool_for = spool_for
        self._should_stop = should_stop
        self._stop_poll_seconds = stop_poll_seconds

    def run(self) -> bool:
        """Make the attempts; True when the run's deadline passed. CancelRequested at a
        check point; AttemptNotStoredError when an attempt could not be stored."""
        instruction = self._instruction
        plan = plan_run(instruction)
        retry = instruction.retry
        budget = plan.first_budget
        correction: str | None = None
        # Set once a follow-up for the rejected items is due: the next call is that one,
        # and it is the run's last.
        reasking: Reasking | None = None
        deadline = instruction.schedule.deadline_seconds
        began = self._monotonic()

        def time_left() -> float | None:
            return None if deadline is None else deadline - (self._monotonic() - began)

        def past_deadline() -> bool:
            left = time_left()
            return left is not None and left <= 0

        for number in range(1, retry.attempts + 1):
            self.check_point()
            if past_deadline():
                # Attempts already stored still compete for the report; the deadline only
                # stops asking again.
                break
            if self._over_budget(number):
                break  # as the deadline: the attempts made still compete for the report
            attempts_left = retry.attempts - number
            request = plan.request(
                max_output_tokens=budget,
                correction=correction,
                # The call, with its own retries, ends when the run's deadline does.
                time_limit_seconds=time_left(),
                cut=None if self._should_stop is None else CallCut(),
            )
            started = self._clock()
            call_began = self._monotonic()
            try:
                with self._cut_when_stopped(request.cut):
                    completion = self._connector.complete(request)
            except ConnectorError as exc:
                seconds = self._monotonic() - call_began
                if request.cut is not None and request.cut.requested:
                    # Cut by a cancel, not failed by the provider: stored, then the check
                    # point ends the run.
                    self._publish_call(number, seconds, "cancelled")
                    self._store_failed_call(number, request, exc, started, cut=True)
                    continue
                provider = isinstance(exc, ProviderError)
                kind = error_kind(
                    exc.status if isinstance(exc, ProviderError) else None, provider=provider
                )
                self._publish_call(number, seconds, "error", error_kind=kind)
                attempt = self._store_failed_call(number, request, exc, started, reask=reasking)
                cause = provider_retry_cause(exc)
                if reasking is not None or not plan.wants_retry(cause, attempts_left=attempts_left):
                    break
                self._events.publish(
                    RetryAsked(
                        run_id=self._run_id,
                        instruction_id=self._instruction.id,
                        attempt=number,
                        cause=str(cause),
                    )
                )
                correction = correction_prompt(
                    None, finish_reason=None, provider_error=attempt.provider_error
                )
                continue

            prompt_tokens = usage_tokens(completion.usage, "prompt_tokens")
            completion_tokens = usage_tokens(completion.usage, "completion_tokens")
            prices = instruction.budget.prices
            self._publish_call(
                number,
                self._monotonic() - call_began,
                "ok",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost=call_cost(
                    prices,
                    model=completion.model,
                    fallback=instruction.connector.model,
                    prompt=prompt_tokens,
                    completion=completion_tokens,
                ),
                currency=None if prices is None else prices.currency,
            )
            # A key echoed in the answer is redacted before anything stores or parses it.
            completion, redactions = redacted(completion)
            attempt = self._store_completion(
                number, request, completion, started, redactions, reask=reasking
            )
            # plan.salvage, through this module's name: the crash tests replace it here.
            result = salvage(
                completion.text, plan.policy, finish_reason=str(completion.finish_reason)
            )
            attempt.result = result
            trigger = plan.retry_cause(result)
            whole = trigger is not None and plan.wants_retry(trigger, attempts_left=attempts_left)
            asked: tuple[QuarantinedItem, ...] = ()
            if not whole and reasking is None and attempts_left > 0:
                asked = plan.items_to_reask(result)
            decided = RetryCause.QUARANTINED if asked else trigger
            self._store.set_attempt_outcome(attempt.attempt_id, attempt_outcome(result, decided))
            self._events.publish(
                AttemptSalvaged(
                    run_id=self._run_id,
                    instruction_id=self._instruction.id,
                    attempt=number,
                    status=str(result.status),
                    accepted=len(result.items),
                    quarantined=result.quarantined_total,
                    folded=result.folded_total,
                    truncated=result.truncated,
                )
            )
            if reasking is not None:
                break  # the follow-up was the last call
            if asked:
                reasking = Reasking(of=number, asked=asked)
                self._events.publish(
                    RetryAsked(
                        run_id=self._run_id,
                        instruction_id=self._instruction.id,
                        attempt=number,
                        cause=str(RetryCause.QUARANTINED),
                        max_output_tokens=budget,
                        items=len(asked),
                    )
                )
                correction = reask_prompt(asked, raw=completion.text)
                continue
            if trigger is None or not whole:
                break
            budget = plan.next_budget(budget, cause=trigger, completion=completion)
            self._events.publish(
                RetryAsked(
                    run_id=self._run_id,
                    instruction_id=self._instruction.id,
                    attempt=number,
                    cause=str(trigger),
                    max_output_tokens=budget,
                )
            )
            correction = correction_prompt(
                result,
                finish_reason=completion.finish_reason,
                max_items=instruction.guardrails.max_items,
            )

        # The last check point: the attempts are stored, the report is not written yet.
        self.check_point()
        if not past_deadline():
            return False
        self._events.publish(
            DeadlinePassed(
                run_id=self._run_id,
                instruction_id=self._instruction.id,
                attempts=len(self._attempts),
                deadline_seconds=deadline,
            )
        )
        return True

    def _over_budget(self, number: int) -> bool:
        """Before call ``number``: True when the day's budget is reached (a retry must
        not overspend it either); BudgetReached before the first call."""
        if self._budget is None:
            return False
        over = self._budget()
        if over is None:
            return False
        spend = over.spend
        self._events.publish(
            BudgetExhausted(
                run_id=self._run_id,
                instruction_id=self._instruction.id,
                attempt=number,
                limit_kind=over.what,
                spent=over.spent,
                limit=over.limit,
                day=spend.day.isoformat(),
                timezone=spend.timezone,
                currency=None if spend.cost is None else spend.cost.currency,
            )
        )
        if number == 1:
            raise BudgetReached(over)
        self.budget_stop = over
        return True

    def check_point(self) -> None:
        """CancelRequested when the operator asked the run to stop."""
        if self._should_stop is not None and self._should_stop():
            self._events.publish(
                CancelSeen(run_id=self._run_id, instruction_id=self._instruction.id)
            )
            raise CancelRequested

    def _publish_call(self, number: int, seconds: float, outcome: str, **more: Any) -> None:
        self._events.publish(
            ModelCalled(
                run_id=self._run_id,
                instruction_id=self._instruction.id,
                attempt=number,
                seconds=seconds,
                outcome=outcome,
                **more,
            )
        )

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
                except Exception as exc:  # an unanswered question leaves the call running
                    self._events.publish(
                        CancelCheckFailed(
                            run_id=self._run_id, instruction_id=self._instruction.id, exception=exc
                        )
                    )
                    continue
                if stop:
                    self._events.publish(
                        CallCutRequested(run_id=self._run_id, instruction_id=self._instruction.id)
                    )
                    cut.cut()
                    return

        thread = threading.Thread(target=watch, name="cancel-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    # --- storing an attempt ---------------------------------------------------------------

    def _store_completion(
        self,
        number: int,
        request: CompletionRequest,
        completion: Completion,
        started: datetime,
        redactions: int = 0,
        *,
        reask: Reasking | None = None,
    ) -> StoredAttempt:
        fields = completion_fields(
            self._instruction, request, completion, redactions=redactions, reask=reask
        )
        attempt_id = self._add_attempt(number, started, fields)
        cap = fields["max_raw_bytes"]
        self._events.publish(
            AttemptStored(
                run_id=self._run_id,
                instruction_id=self._instruction.id,
                attempt=number,
                chars=len(completion.text),
                # Over the cap only its first ``cap`` bytes were stored; salvage skips it.
                over_cap=bytes_over_cap(completion.text, cap) is not None,
                finish_reason=str(completion.finish_reason),
                native_finish_reason=completion.native_finish_reason,
                http_status=completion.http_status,
                stream_error=completion.stream_error,
                redactions=redactions,
            )
        )
        attempt = StoredAttempt(
            number=number, attempt_id=attempt_id, completion=completion, reask=reask
        )
        self._attempts.append(attempt)
        return attempt

    def _store_failed_call(
        self,
        number: int,
        request: CompletionRequest,
        exc: ConnectorError,
        started: datetime,
        *,
        cut: bool = False,
        reask: Reasking | None = None,
    ) -> StoredAttempt:
        message = scrub_text(str(exc))
        fields = failed_call_fields(self._instruction, request, exc, message, reask=reask)
        attempt_id = self._add_attempt(number, started, fields)
        kind = AttemptCut if cut else ProviderFailed
        self._events.publish(
            kind(
                run_id=self._run_id,
                instruction_id=self._instruction.id,
                attempt=number,
                error=message,
            )
        )
        attempt = StoredAttempt(
            number=number, attempt_id=attempt_id, provider_error=message, reask=reask
        )
        self._attempts.append(attempt)
        return attempt

    def _add_attempt(self, number: int, started: datetime, fields: Mapping[str, Any]) -> str:
        """``Store.add_attempt``; when the database refuses it, the attempt goes to the
        spool and AttemptNotStoredError (naming the spool file) ends the run."""
        values = {**fields, "started_at": started, "finished_at": self._clock()}
        run_id = self._run_id
        try:
            return self._store.add_attempt(run_id, number=number, **values)
        except (StoreError, NotFoundError) as refused:  # NotFound: the run row is gone
            what = "output" if values["raw_output"] is not None else "record"
            where = f"attempt {number} of run {run_id}"
            try:
                path = self._spool_for().write(
                    spooled(self._store.identity, run_id, number, values)
                )
            except SpoolError as also:
                self._events.publish(
                    AttemptLost(
                        run_id=self._run_id,
                        instruction_id=self._instruction.id,
                        attempt=number,
                        error=str(refused),
                        spool_error=str(also),
                    )
                )
                raise AttemptNotStoredError(
                    f"{where} could not be stored ({refused}), and spooling its {what} "
                    f"failed too ({also}): it is lost",
                    spool_file=None,
                ) from refused
            self._events.publish(
                AttemptSpooled(
                    run_id=self._run_id,
                    instruction_id=self._instruction.id,
                    attempt=number,
                    error=str(refused),
                    spool_file=str(path),
                )
            )
            raise AttemptNotStoredError(
                f"{where} could not be stored ({refused}); its {what} was spooled to {path}: "
                "`salvagelane db recover` (or the next command that opens the database) "
                "imports it",
                spool_file=str(path),
            ) from refused


def spooled(database: str, run_id: str, number: int, fields: Mapping[str, Any]) -> SpooledAttempt:
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


def error_kind(status: int | None, *, provider: bool = True) -> str:
    """The label of a failed model call: the provider's HTTP status (``429``, ``503``;
    ``200`` for an error inside a successful response), ``no_response`` when none arrived
    (a timeout, a refused connection), ``connector`` when the call was not made at all
    (``provider`` false: a missing key, an unusable fixture)."""
    if not provider:
        return "connector"
    return "no_response" if status is None else str(status)


def usage_tokens(usage: Mapping[str, object], key: str) -> int:
    """A token count of a completion's usage (``prompt_tokens``, ``completion_tokens``),
    0 when the provider sent none or something that is not a count."""
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
