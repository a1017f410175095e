"""``salvagelane eval``: a candidate called on the prompts of recorded fixtures, side by side
with what the recorded answers gave.

For each fixture the **baseline** is its recorded answer replayed (the fixture's own
definition, as ``replay`` does: no call); the **candidate** is a real call with the
fixture's recorded prompt (``prompt.json``; or, with ``render``, the candidate's own
prompt) to the candidate definition's connector, salvaged with that definition. The
figures and the verdict are :mod:`salvagelane.core.evaluation`'s; storing them is the
caller's (``Store.evals``). Calls run ``concurrency`` at a time on threads.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

from salvagelane.connectors import CompletionRequest, Connector
from salvagelane.core.evaluation import ERROR, Comparison, Side, Verdict, verdict
from salvagelane.core.outcome import Outcome
from salvagelane.definitions import Instruction
from salvagelane.errors import ConnectorError, SalvagelaneError
from salvagelane.fixtures.format import FixtureMeta, RecordedPrompt, read_meta, read_prompt
from salvagelane.fixtures.replay import Replayer
from salvagelane.logs import scrub_text
from salvagelane.runtime.budget import call_cost
from salvagelane.runtime.plan import RunPlan, plan_run, redacted, run_status

Progress = Callable[[int, int, Comparison], None]
"""Told of each fixture as it is done: how many are done, of how many, and its figures."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """What is tried: ``definition_for`` gives the candidate definition of an
    instruction id (the file given, or today's definition with the overrides);
    ``describe`` says what it is, for the table and the store."""

    definition_for: Callable[[str], Instruction]
    describe: str
    render: bool = False
    """Render the candidate's own prompt instead of sending the fixture's recorded one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """Every fixture's comparison, in the order given, and the verdict."""

    candidate: str
    comparisons: tuple[Comparison, ...]
    verdict: Verdict

    @property
    def changes(self) -> Counter[str]:
        return Counter(c.change for c in self.comparisons)


def evaluate(
    fixtures: Sequence[Path],
    candidate: Candidate,
    *,
    replayer: Replayer,
    connector_for: Callable[[Instruction], Connector],
    concurrency: int = 4,
    progress: Progress | None = None,
) -> Evaluation:
    """Compare ``candidate`` with each fixture's recorded answer (see the module
    docstring). A fixture that cannot be evaluated is kept, ``skipped`` with the
    reason; a candidate call that fails is the candidate's ``error``."""
    plans: dict[str, RunPlan | SalvagelaneError] = {}
    plans_lock = Lock()

    def plan_of(instruction_id: str) -> RunPlan:
        # Context callables run once per instruction, not once per fixture.
        with plans_lock:
            if instruction_id not in plans:
                try:
                    plans[instruction_id] = plan_run(candidate.definition_for(instruction_id))
                except SalvagelaneError as exc:
                    plans[instruction_id] = exc
            found = plans[instruction_id]
        if isinstance(found, SalvagelaneError):
            raise found
        return found

    done = 0
    done_lock = Lock()

    def one(directory: Path) -> Comparison:
        nonlocal done
        comparison = _compare(directory, candidate, replayer, plan_of, connector_for)
        with done_lock:
            done += 1
            if progress is not None:
                progress(done, len(fixtures), comparison)
        return comparison

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="eval") as pool:
        comparisons = tuple(pool.map(one, fixtures))
    return Evaluation(
        candidate=candidate.describe, comparisons=comparisons, verdict=verdict(comparisons)
    )


def _compare(
    directory: Path,
    candidate: Candidate,
    replayer: Replayer,
    plan_of: Callable[[str], RunPlan],
    connector_for: Callable[[Instruction], Connector],
) -> Comparison:
    name = str(directory)
    try:
        meta = read_meta(directory / "meta.json")
    except SalvagelaneError as exc:
        return Comparison(
            fixture=name, instruction=None, baseline=None, candidate=None, skipped=str(exc)
        )
    replayed = replayer.replay(directory)
    if replayed.actual is None:
        why = replayed.error or f"the fixture could not be replayed ({replayed.verdict})"
        return Comparison(
            fixture=name, instruction=meta.instruction, baseline=None, candidate=None, skipped=why
        )
    try:
        plan = plan_of(meta.instruction)
        recorded = read_prompt(directory)
    except SalvagelaneError as exc:
        return Comparison(
            fixture=name,
            instruction=meta.instruction,
            baseline=None,
            candidate=None,
            skipped=str(exc),
        )
    baseline = _recorded_side(replayed.actual, meta, plan.instruction)
    if recorded is None and not candidate.render:
        return Comparison(
            fixture=name,
            instruction=meta.instruction,
            baseline=baseline,
            candidate=None,
            skipped="no prompt.json: the fixture was captured before prompts were kept "
            "(capture it again, or pass --render to send the candidate's own prompt)",
        )
    request = _request(plan, None if candidate.render else recorded)
    return Comparison(
        fixture=name,
        instruction=meta.instruction,
        baseline=baseline,
        candidate=_called_side(plan, request, connector_for),
    )


def _request(plan: RunPlan, recorded: RecordedPrompt | None) -> CompletionRequest:
    spec = plan.instruction.connector
    return CompletionRequest(
        system=plan.prompt.system if recorded is None else recorded.system,
        user=plan.prompt.user if recorded is None else recorded.user,
        max_output_tokens=spec.max_output_tokens,
        temperature=spec.temperature,
        response_schema=plan.hint_schema,
        max_output_bytes=plan.instruction.guardrails.max_output_bytes,
    )


def _recorded_side(outcome: Outcome, meta: FixtureMeta, candidate: Instruction) -> Side:
    """The baseline: the recorded answer as replay salvages it, priced by the candidate's
    price table (the one table both sides are compared with)."""
    quarantined = Counter(q.reason for q in outcome.quarantined)
    quarantined.update(outcome.folded)
    prompt = _count(meta.usage.get("prompt_tokens"))
    completion = _count(meta.usage.get("completion_tokens"))
    return Side(
        status=outcome.status,
        kept=len(outcome.items),
        quarantined=dict(quarantined),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost=None
        if prompt is None and completion is None
        else call_cost(
            candidate.budget.prices,
            model=meta.model,
            fallback=candidate.connector.model,
            prompt=prompt or 0,
            completion=completion or 0,
        ),
    )


def _called_side(
    plan: RunPlan, request: CompletionRequest, connector_for: Callable[[Instruction], Connector]
) -> Side:
    instruction = plan.instruction
    began = time.monotonic()
    try:
        answer = connector_for(instruction).complete(request)
    except ConnectorError as exc:
        return Side(
            status=ERROR,
            latency_seconds=time.monotonic() - began,
            error=scrub_text(str(exc)),
        )
    completion, _ = redacted(answer)
    latency = completion.latency_seconds
    result = plan.salvage(completion)
    counts = result.counts()
    prompt = _count(completion.usage.get("prompt_tokens"))
    done = _count(completion.usage.get("completion_tokens"))
    return Side(
        status=str(run_status(result, completion)),
        kept=len(result.items),
        quarantined=dict(counts["by_reason"]),
        prompt_tokens=prompt,
        completion_tokens=done,
        cost=call_cost(
            instruction.budget.prices,
            model=completion.model,
            fallback=instruction.connector.model,
            prompt=prompt or 0,
            completion=done or 0,
        ),
        latency_seconds=latency if latency is not None else time.monotonic() - began,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
