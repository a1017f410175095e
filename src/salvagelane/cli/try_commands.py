"""``salvagelane try`` and ``salvagelane prompt``: a definition tried without a run.

Neither opens a database, writes to the spool or delivers to a sink (see
:mod:`salvagelane.runtime.trial`). Everything they print that a model, a provider or a
definition's files produced goes through :mod:`salvagelane.safe_text`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import Command, instructions_option, json_option, parse_fire_time
from salvagelane.core.numbering import place_in_output
from salvagelane.safe_text import block, line, one_line

if TYPE_CHECKING:  # imported when a command runs: `--help` must not pay for them
    from salvagelane.core import SalvageResult
    from salvagelane.definitions import Instruction
    from salvagelane.runtime.trial import PromptPreview, Trial

_ITEM_WIDTH = 110
_SNIPPET_WIDTH = 90

scheduled_for_option = click.option(
    "--scheduled-for",
    "scheduled_for",
    metavar="TIMESTAMP",
    callback=lambda ctx, param, value: None if value is None else parse_fire_time(value),
    help="Render as the run of this fire would (ISO 8601 with a zone, e.g. "
    "2026-11-21T05:20:00Z: the definition's today is its date). Default: now.",
)


@click.command("try", cls=Command)
@click.argument("instruction")
@click.option(
    "--sample",
    type=click.Path(exists=True, path_type=Path),
    metavar="FILE",
    help="Answer with this saved model output: a file of raw text (a meta.json beside it "
    "is read for the finish reason), or a fixture directory holding raw.txt.",
)
@click.option("--live", is_flag=True, help="Call the model once, with the definition's connector.")
@scheduled_for_option
@instructions_option
@json_option
def try_command(
    instruction: str,
    sample: Path | None,
    live: bool,
    scheduled_for: datetime | None,
    instructions_dir: Path,
    as_json: bool,
) -> None:
    """Try INSTRUCTION without a run: nothing is stored, nothing is delivered.

    Renders its prompt, answers it once (--sample FILE: a saved model output; --live:
    the model, called once with the definition's connector and its transport retries),
    salvages the answer with every guardrail and prints what a run would store and
    deliver: its status, the kept items, the quarantined ones with their reason, the
    envelope's issues, and the payload each sink would receive (not sent). No database
    is opened, no spool file written. A definition whose connector is a replay one
    answers from its fixture without either option.

    A run's further attempts are not made: when the definition would retry, the output
    says which attempt a run would make next and why. Exit 0 when a run would store
    something usable (ok or partial), 1 when it would fail (or the definition is
    invalid), 2 when an option or the sample cannot be used.
    """
    from salvagelane.cli.wiring import wired
    from salvagelane.connectors import ReplayConnector
    from salvagelane.definitions import ConnectorKind
    from salvagelane.definitions.ids import instruction_from_argument
    from salvagelane.runtime.trial import try_instruction

    if sample is not None and live:
        raise click.UsageError(
            "--sample and --live: expected one of them (a saved output, or one model call)"
        )
    definition = instruction_from_argument(instruction, instructions_dir)
    if sample is None and not live and definition.connector.kind is not ConnectorKind.REPLAY:
        raise click.UsageError(
            f"{line(definition.id)}: expected --sample FILE (a saved model output to answer "
            f"with) or --live (call its {line(str(definition.connector.kind))} model once)"
        )
    if sample is not None:
        # Refused (exit 2) before anything runs, as `run --replay` refuses it.
        ReplayConnector(sample).check()
    with wired(replay=sample) as wiring:
        trial = try_instruction(
            definition,
            connector_for=wiring.connector_for,
            sinks_for=wiring.sinks_for,
            at=scheduled_for or datetime.now(UTC),
        )
    if as_json:
        click.echo(json.dumps(trial.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(_trial_text(trial, _answered_by(definition, sample)))
    if not trial.usable:
        raise click.exceptions.Exit(EXIT_INVALID)


@click.command("prompt", cls=Command)
@click.argument("instruction")
@scheduled_for_option
@instructions_option
@json_option
def prompt_command(
    instruction: str, scheduled_for: datetime | None, instructions_dir: Path, as_json: bool
) -> None:
    """Print the prompt a run of INSTRUCTION would send: the rendered system and user
    prompts, and the structured-output hint's schema when the connector sends one.

    Its context is resolved as a run resolves it (context callables run); nothing is
    sent, stored or delivered.
    """
    from salvagelane.definitions.ids import instruction_from_argument
    from salvagelane.runtime.trial import preview_prompt

    definition = instruction_from_argument(instruction, instructions_dir)
    preview = preview_prompt(definition, at=scheduled_for or datetime.now(UTC))
    if as_json:
        click.echo(json.dumps(preview.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(_prompt_text(preview))


# --- rendering ---------------------------------------------------------------------------------


def _answered_by(definition: Instruction, sample: Path | None) -> str:
    if sample is not None:
        return f"the saved output {line(str(sample))}"
    spec = definition.connector
    if spec.kind.value == "replay":
        return f"the definition's fixture {line(str(spec.fixture))}"
    return f"the model {line(spec.model or '-')} ({line(spec.kind.value)}), called once"


def _prompt_text(preview: PromptPreview) -> str:
    request = preview.request
    hint = request["schema_hint"]
    where = request["base_url"] or (
        f"${request['base_url_env']}" if request["base_url_env"] else "its default URL"
    )
    key = f"key ${request['api_key_env']}" if request["api_key_env"] else "no key"
    lines = [
        f"instruction  {line(preview.instruction_id)}",
        f"connector    {line(str(request['kind']))} {line(str(request['model']))} at "
        f"{line(str(where))}, {line(key)}",
        f"request      max_output_tokens {request['max_output_tokens']}, temperature "
        f"{request['temperature']}, stream {'on' if request['stream'] else 'off'}",
        f"hint         {_hint_text(hint)}",
        "",
        "--- system prompt ---",
        block(str(request["system"])).rstrip("\n"),
        "",
        "--- user prompt ---",
        block(str(request["user"])).rstrip("\n"),
    ]
    if preview.hint_schema is not None:
        schema = json.dumps(preview.hint_schema, indent=2, ensure_ascii=False)
        lines += ["", "--- structured-output hint schema (as sent) ---", block(schema)]
    return "\n".join(lines)


def _hint_text(hint: dict[str, Any]) -> str:
    if not hint.get("sent"):
        return f"not sent: {line(str(hint.get('why_not')))}"
    if hint.get("strict"):
        text = f"sent to {line(str(hint.get('provider')))}, strict"
    else:
        reasons = "; ".join(line(str(why)) for why in hint.get("not_strict") or ())
        text = f"sent to {line(str(hint.get('provider')))}, advisory (not strict: {reasons})"
    left_out = hint.get("left_out") or []
    if left_out:
        text += f"; {len(left_out)} keyword(s) left out (salvage still checks them)"
    return text


def _trial_text(trial: Trial, answered_by: str) -> str:
    result = trial.result
    lines = [
        f"dry run      {line(trial.prompt.instruction_id)}: nothing stored, nothing delivered",
        f"answer       {answered_by}",
    ]
    completion = trial.completion
    if completion is not None:
        finish = line(str(completion.finish_reason))
        native = completion.native_finish_reason
        if native and native != str(completion.finish_reason):
            finish += f" (provider: {line(native)})"
        status = "" if completion.http_status is None else f", HTTP {completion.http_status}"
        lines.append(
            f"             {len(completion.text)} chars, finish {finish}{status}, "
            f"model {line(completion.model or '-')}"
        )
        if completion.stream_error:
            lines.append(f"             stream: {one_line(completion.stream_error, _ITEM_WIDTH)}")
        if trial.redactions:
            lines.append(f"             {trial.redactions} secret(s) redacted from the answer")
    lines.append(f"status       {line(str(trial.status))}")
    if result is not None:
        counts = result.counts()
        by_reason = counts["by_reason"]
        reasons = ", ".join(f"{line(str(r))} {n}" for r, n in by_reason.items())
        lines.append(f"kept         {len(result.items)} of {counts['candidates']} candidates")
        lines.append(f"quarantined  {counts['quarantined']}" + (f" ({reasons})" if reasons else ""))
    if trial.error:
        lines.append(f"error        {one_line(trial.error, 200)}")
    if trial.retry is not None:
        retry = trial.retry
        lines.append(
            f"retry        a run would make attempt {retry.attempt} of {retry.attempts} "
            f"({line(retry.cause)}), with max_output_tokens {retry.max_output_tokens}"
        )
    if result is not None:
        lines += _salvage_lines(result)
    lines += _delivery_lines(trial)
    return "\n".join(lines)


def _salvage_lines(result: SalvageResult) -> list[str]:
    lines = ["", "envelope"]
    for name, value in result.envelope.items():
        shown = one_line(json.dumps(value, ensure_ascii=False), _ITEM_WIDTH)
        lines.append(f"  {line(name)}: {shown}")
    for issue in result.envelope_issues:
        lines.append(
            f"  issue at {line(issue.path)}: {one_line(issue.problem, _ITEM_WIDTH)} "
            f"(offsets {issue.span.start}-{issue.span.end})"
        )
    lines.append(f"items ({len(result.items)})")
    for number, item in enumerate(result.items, 1):
        text = json.dumps(item.data, ensure_ascii=False, separators=(", ", ": "))
        lines.append(f"  {number}. {one_line(text, _ITEM_WIDTH)}")
        if item.repairs:
            repairs = ", ".join(f"{line(str(r.kind))} at offset {r.at}" for r in item.repairs)
            lines.append(f"      repaired: {repairs}")
    lines.append(f"quarantine lane ({result.quarantined_total})")
    for held in result.quarantined:
        lines.append(f"  {place_in_output(held.index)}: {line(str(held.reason))}")
        lines.append(f"      {one_line(held.message, _ITEM_WIDTH)}")
        lines.append(
            f"      offsets {held.span.start}-{held.span.end}, sha256 {line(held.sha256[:12])}: "
            f"{one_line(held.snippet, _SNIPPET_WIDTH)!r}"
        )
    if result.folded:
        folded = ", ".join(f"{line(str(r))} {n}" for r, n in result.folded.items())
        lines.append(
            f"  {result.folded_total} more past guardrails.max_quarantined ({folded}): "
            "counted, not stored"
        )
    return lines


def _delivery_lines(trial: Trial) -> list[str]:
    if not trial.sinks:
        return ["", "deliveries   none: the definition names no sinks"]
    if trial.payload is None:
        return ["", "deliveries   none: a run without a report delivers nothing"]
    lines = ["", f"deliveries ({len(trial.sinks)}), not sent"]
    for sink in trial.sinks:
        lines.append(f"  {line(sink.kind):<10} {line(sink.target)}")
    payload = json.dumps(trial.payload, indent=2, ensure_ascii=False)
    lines += ["", "payload (what each of them would receive; run_id is null: no run)"]
    lines.append(block(payload))
    return lines
