"""What a run asks the model and how it reads an answer, without a store.

The executor stores every step of a run; ``salvagelane try`` and ``salvagelane prompt``
(:mod:`salvagelane.runtime.trial`) store nothing. Both take the prompt, the request, the
salvage of an answer, the status it gives and the next attempt's budget from here, so a
dry run cannot tell a different story from the run it previews.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from salvagelane.call_cut import CallCut
from salvagelane.connectors import Completion, CompletionRequest
from salvagelane.core import SalvagePolicy, SalvageResult, salvage
from salvagelane.core.attempts import RetryCause, next_token_budget, retry_cause, wants_retry
from salvagelane.core.reask import DEFAULT_REASONS, items_to_reask
from salvagelane.core.records import QuarantinedItem, Reason
from salvagelane.core.schema_hint import hint_record
from salvagelane.definitions import (
    Instruction,
    RenderedPrompt,
    render_prompt,
    resolve_context,
    salvage_policy_for,
)
from salvagelane.errors import (
    ConfigurationError,
    ConnectorError,
    DefinitionError,
    ProviderError,
    SinkError,
)
from salvagelane.logs import redact_text, redact_url, scrub_text
from salvagelane.sinks import Sink
from salvagelane.vocabulary import RunStatus


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPlan:
    """One run's prompt, salvage policy and structured-output hint, resolved once: the
    context is read (its callables run) and the templates rendered when it is made."""

    instruction: Instruction
    prompt: RenderedPrompt
    policy: SalvagePolicy
    # The structured-output hint, references bundled and items capped; None when off.
    hint_schema: Mapping[str, Any] | None

    @property
    def first_budget(self) -> int:
        """The first attempt's ``max_output_tokens``."""
        return self.instruction.connector.max_output_tokens

    def request(
        self,
        *,
        max_output_tokens: int,
        correction: str | None = None,
        time_limit_seconds: float | None = None,
        cut: CallCut | None = None,
    ) -> CompletionRequest:
        """The request of one attempt; ``correction`` (what went wrong before) follows
        the user prompt."""
        instruction = self.instruction
        return CompletionRequest(
            system=self.prompt.system,
            user=with_correction(self.prompt, correction),
            max_output_tokens=max_output_tokens,
            temperature=instruction.connector.temperature,
            response_schema=self.hint_schema,
            time_limit_seconds=time_limit_seconds,
            # How much of the answer is worth reading (the connector's body cap).
            max_output_bytes=instruction.guardrails.max_output_bytes,
            cut=cut,
        )

    def salvage(self, completion: Completion) -> SalvageResult:
        """What the run keeps and quarantines of ``completion`` (already :func:`redacted`)."""
        return salvage(completion.text, self.policy, finish_reason=str(completion.finish_reason))

    def retry_cause(self, result: SalvageResult) -> RetryCause | None:
        """Why ``result`` deserves another attempt, or None."""
        return retry_cause(result, max_items=self.instruction.guardrails.max_items)

    def wants_retry(self, cause: RetryCause | None, *, attempts_left: int) -> bool:
        """Whether the definition's ``retry.on`` takes ``cause`` with attempts left."""
        enabled = {str(on) for on in self.instruction.retry.on}
        return wants_retry(cause, enabled=enabled, attempts_left=attempts_left)

    def items_to_reask(self, result: SalvageResult) -> tuple[QuarantinedItem, ...]:
        """The rejected items of ``result`` a follow-up asks again for (none unless the
        definition's ``retry.on`` lists ``quarantined``)."""
        retry = self.instruction.retry
        if not retry.reasks:
            return ()
        reasons = (
            frozenset(Reason(r) for r in retry.reask_reasons)
            if retry.reask_reasons
            else DEFAULT_REASONS
        )
        return items_to_reask(result, reasons=reasons)

    def next_budget(self, current: int, *, cause: RetryCause, completion: Completion) -> int:
        """The next attempt's ``max_output_tokens`` after ``completion`` gave ``cause``:
        grown after a ``length`` finish, within the definition's ceiling; unchanged for
        an oversize output (a bigger budget would not help)."""
        if cause is RetryCause.OVERSIZE:
            return current
        retry = self.instruction.retry
        budget = self.first_budget
        ceiling = max(budget, retry.max_output_tokens_ceiling or 4 * budget)
        return next_token_budget(
            current,
            finish_reason=completion.finish_reason,
            factor=retry.length_budget_factor,
            ceiling=ceiling,
        )


def plan_run(instruction: Instruction) -> RunPlan:
    """Resolve ``instruction``'s context (running its callables, as a run does), render
    its prompt and build its salvage policy. DefinitionError names what failed."""
    context = resolve_context(instruction)
    return RunPlan(
        instruction=instruction,
        prompt=render_prompt(instruction, context),
        policy=salvage_policy_for(instruction, context=context),
        hint_schema=(
            instruction.response_schema() if instruction.connector.structured_output else None
        ),
    )


def with_correction(prompt: RenderedPrompt, correction: str | None) -> str:
    if correction is None:
        return prompt.user
    return prompt.user.rstrip() + "\n\n" + correction


def request_summary(instruction: Instruction, request: CompletionRequest) -> dict[str, Any]:
    """What was asked, without secrets: the key's variable name, never its value; the
    base URL without userinfo and query string, or the name of its variable."""
    spec = instruction.connector
    prompt = request.system + "\n\n" + request.user
    return {
        "kind": str(spec.kind),
        "base_url": None if spec.base_url is None else redact_url(spec.base_url),
        "base_url_env": spec.base_url_env,
        "model": spec.model,
        "api_key_env": spec.api_key_env,
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "structured_output": spec.structured_output,
        "schema_hint": hint_record(str(spec.kind), request.response_schema),
        "stream": spec.stream,
        "prompt_sha256": hashlib.sha256(prompt.encode("utf-8", "surrogateescape")).hexdigest(),
        "system": request.system,
        "user": request.user,
    }


def redacted(completion: Completion) -> tuple[Completion, int]:
    """``completion`` with every registered secret (the key the call used among them,
    in the encodings :func:`~salvagelane.logs.secret_pattern` lists) redacted from the
    text, and from the provider's other strings; and how many redactions the text took.

    The one exception to storing the output byte for byte (ADR 0005): a provider that
    echoes the key into its answer must not get it into the database, the report, the
    quarantine or a fixture captured from them. The attempt records the count.
    """
    text, count = redact_text(completion.text)

    def scrubbed(value: str | None) -> str | None:
        return None if value is None else scrub_text(value)

    cleaned = dataclasses.replace(
        completion,
        text=text,
        native_finish_reason=scrubbed(completion.native_finish_reason),
        model=scrubbed(completion.model),
        request_id=scrubbed(completion.request_id),
        stream_error=scrubbed(completion.stream_error),
    )
    return cleaned, count


def run_status(result: SalvageResult, completion: Completion) -> RunStatus:
    """The salvage status (its words are run statuses), except that a broken stream is
    never ``ok``: the answer was cut short even when what arrived happens to parse."""
    status = RunStatus(result.status)
    if status is RunStatus.OK and completion.stream_error is not None:
        return RunStatus.PARTIAL
    return status


def failure(result: SalvageResult) -> str:
    """Why a report with ``result`` fails the run."""
    if not result.items_found and not result.quarantined:
        return "nothing usable: no items list was found in the output"
    counts = result.counts()
    reasons = ", ".join(f"{reason} {n}" for reason, n in counts["by_reason"].items())
    return f"nothing usable: all {counts['candidates']} candidate(s) quarantined ({reasons})"


def provider_retry_cause(exc: ConnectorError) -> RetryCause | None:
    """A provider error is worth another run-level attempt when asking again may help:
    the connector already gave up on a transient failure, or the provider reported an
    error inside a successful response (an upstream model failure). Missing keys,
    refused requests and exhausted quotas are not."""
    if isinstance(exc, ProviderError) and (exc.retryable or exc.status == 200):
        return RetryCause.PROVIDER_ERROR
    return None


def build_run_sinks(
    instruction: Instruction, sinks_for: Callable[[Instruction], Sequence[Sink]]
) -> tuple[Sink, ...]:
    """The instruction's sinks, built before the model is called: a sink that cannot
    be built fails the run before anything is paid for, and the report's deliveries
    are known when it is written. Building one sends nothing."""
    if not instruction.sinks:
        return ()
    try:
        return tuple(sinks_for(instruction))
    except (ConfigurationError, SinkError) as exc:
        raise DefinitionError(f"sinks: {exc}", source=str(instruction.source)) from exc
