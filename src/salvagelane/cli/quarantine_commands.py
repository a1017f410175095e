"""``salvagelane quarantine``: the operator review lane.

Exit codes: 0 done; 1 an approval the guardrails refused (the correction signal is
printed, only the audit row is written); 2 an unknown id, or an item not in the state the
action needs (approving or rejecting one that is not pending, approving one whose run has
no report), or bad options.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvagelane.cli import render
from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import (
    ITEM_ID,
    Group,
    actor_of,
    by_option,
    count_range,
    database_option,
    instructions_option,
    json_option,
    parse_fire_time,
    use_current_option,
)
from salvagelane.cli.render import captured_fixture, to_json, when
from salvagelane.cli.tables import aligned
from salvagelane.cli.wiring import open_store, require_known_instruction
from salvagelane.core.numbering import item_number, place_in_output
from salvagelane.safe_text import block, line, one_line
from salvagelane.vocabulary import ReviewStatus

if TYPE_CHECKING:  # imported inside the commands: `--help` must not load the store or core
    from salvagelane.review.approval import OperatorInput, Refused
    from salvagelane.store import QuarantineDetail, QuarantineFilter, QuarantineView

_ERROR_WIDTH = 70
_SNIPPET_WIDTH = 40


def _parse_since(text: str) -> datetime:
    """A date (UTC midnight) or an ISO 8601 timestamp with a zone, as UTC."""
    if len(text) == 10:
        try:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=UTC)
        except ValueError:
            pass
    try:
        return parse_fire_time(text)
    except click.BadParameter as exc:
        raise click.BadParameter(
            f"expected a date (2026-11-21, UTC) or a timestamp with a zone "
            f"(2026-11-21T05:20:00Z), got {text!r}"
        ) from exc


def _known_reason(text: str) -> str:
    """A quarantine reason of the core's vocabulary, else click.BadParameter listing it:
    a typo must not read as "nothing quarantined"."""
    from salvagelane.core.records import Reason

    known = [str(reason) for reason in Reason]
    if text not in known:
        raise click.BadParameter(f"expected one of {', '.join(known)}, got {one_line(repr(text))}")
    return text


@click.group("quarantine", cls=Group)
def quarantine_group() -> None:
    """Review quarantined items: list, show, approve, reject, annotate."""


@quarantine_group.command("list")
@click.option("--instruction", "instruction_id", metavar="ID", help="Only this instruction.")
@click.option(
    "--reason",
    metavar="REASON",
    callback=lambda ctx, param, value: None if value is None else _known_reason(value),
    help="Only this reason (e.g. schema, truncated; an unknown one is refused, listing them).",
)
@click.option(
    "--status",
    type=click.Choice([status.value for status in ReviewStatus]),
    help="Only this review status (default: all but superseded and reasked).",
)
@click.option(
    "--since",
    callback=lambda ctx, param, value: None if value is None else _parse_since(value),
    metavar="DATE",
    help="Only items quarantined at or after DATE (2026-11-21 or an ISO timestamp with zone).",
)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=count_range(),
    help="At most N items (with --reject-all: only when given).",
)
@click.option(
    "--reject-all",
    is_flag=True,
    help="Reject every matching pending item (asks first; needs --note).",
)
@click.option("--note", metavar="TEXT", help="Why (with --reject-all).")
@click.option("--yes", is_flag=True, help="Do not ask before --reject-all.")
@by_option
@database_option
@json_option
@click.pass_context
def quarantine_list_command(
    ctx: click.Context,
    instruction_id: str | None,
    reason: str | None,
    status: str | None,
    since: datetime | None,
    limit: int,
    reject_all: bool,
    note: str | None,
    yes: bool,
    by: str | None,
    database: str | None,
    as_json: bool,
) -> None:
    """List quarantined items, newest first; with --reject-all, reject the pending ones."""
    from salvagelane.store import QuarantineFilter

    explicit_limit = ctx.get_parameter_source("limit") is not click.core.ParameterSource.DEFAULT
    where = QuarantineFilter(
        instruction_id=instruction_id,
        reason=reason,
        review_status=None if status is None else ReviewStatus(status),
        since=since,
        limit=limit if explicit_limit or not reject_all else None,
    )
    if reject_all:
        _reject_all(where, note=note, yes=yes, by=by, database=database, as_json=as_json)
        return
    with open_store(database, read_only=True) as store:
        if instruction_id is not None:
            require_known_instruction(store, instruction_id)
        items = store.quarantine.list_quarantine(where)
    if as_json:
        click.echo(json.dumps([to_json(item) for item in items], indent=2, ensure_ascii=False))
    else:
        click.echo(quarantine_table(items, where))


def _reject_all(
    where: QuarantineFilter,
    *,
    note: str | None,
    yes: bool,
    by: str | None,
    database: str | None,
    as_json: bool,
) -> None:
    if not note or not note.strip():
        raise click.UsageError("--reject-all needs --note TEXT: say why they are rejected")
    if where.review_status not in (None, ReviewStatus.PENDING):
        raise click.UsageError(
            f"--reject-all rejects pending items: it cannot take --status {where.review_status}"
        )
    from salvagelane.review.approval import reject_matching
    from salvagelane.store import BulkSelection

    pending = replace(where, review_status=ReviewStatus.PENDING)
    with open_store(database) as store:
        if where.instruction_id is not None:
            require_known_instruction(store, where.instruction_id)
        matching = store.quarantine.list_quarantine(pending)
        if not matching:
            rejected: list[int] = []
        else:
            question = (
                f"reject {len(matching)} pending quarantined item(s) ({_describe_filter(pending)})?"
            )
            if not yes and not _confirm(question):
                click.echo("nothing rejected", err=True)
                raise click.exceptions.Exit(EXIT_INVALID)
            # Only the items counted in the question: one quarantined while it waited for
            # its answer stays pending (the store refuses if the counted ones changed).
            rejected = reject_matching(
                store,
                pending,
                actor=actor_of(by),
                note=note,
                now=datetime.now(UTC),
                confirmed=BulkSelection.of(item.id for item in matching),
            )
    if as_json:
        click.echo(json.dumps({"rejected": rejected}, indent=2))
    else:
        click.echo(f"rejected {len(rejected)} pending item(s)")


def _confirm(question: str) -> bool:
    """Ask ``question`` on stderr; True only for y or yes. No answer at all (stdin closed,
    as under cron) is a usage error: the command needs --yes there. Ctrl-C is left to
    propagate (exit 130); click.confirm would turn it and a closed stdin into one Abort."""
    click.echo(f"{question} [y/N]: ", nl=False, err=True)
    answer = sys.stdin.readline()
    if not answer:
        click.echo(err=True)
        raise click.UsageError("no answer on stdin to the confirmation: give --yes to skip it")
    return answer.strip().lower() in ("y", "yes")


def _describe_filter(where: QuarantineFilter) -> str:
    return ", ".join(_filter_parts(where)) or "all"


def _filter_parts(where: QuarantineFilter) -> list[str]:
    return [
        f"{name} {line(str(value))}"
        for name, value in (
            ("instruction", where.instruction_id),
            ("reason", where.reason),
            ("since", None if where.since is None else where.since.isoformat()),
            ("newest", where.limit),
        )
        if value is not None
    ]


@quarantine_group.command("show")
@click.argument("quarantine_id", metavar="ID", type=ITEM_ID)
@database_option
@json_option
def quarantine_show_command(quarantine_id: int, database: str | None, as_json: bool) -> None:
    """Show everything about quarantined item ID: the error, the raw text around it, the
    repaired candidate, provenance, review status and audit trail."""
    with open_store(database, read_only=True) as store:
        detail = store.quarantine.get_quarantine(quarantine_id)
    if as_json:
        click.echo(json.dumps(to_json(detail), indent=2, ensure_ascii=False))
    else:
        click.echo(quarantine_detail(detail))


EXPORT_FORMATS = ("fixture", "jsonl")
REVIEWED = (ReviewStatus.APPROVED.value, ReviewStatus.REJECTED.value)


@quarantine_group.command("export")
@click.argument("quarantine_id", metavar="[ID]", type=ITEM_ID, required=False)
@click.option(
    "--format",
    "form",
    type=click.Choice(EXPORT_FORMATS),
    default="fixture",
    show_default=True,
    help="fixture: the regression fixture of item ID's run (needs ID and --to); "
    "jsonl: one JSON line per reviewed item (schemas/quarantine-export.schema.json).",
)
@click.option(
    "--to",
    "to",
    type=click.Path(file_okay=False, path_type=Path),
    help="fixture: directory to write the fixture into (created; must be empty unless --force).",
)
@click.option(
    "--force", is_flag=True, help="fixture: overwrite the fixture files of a non-empty DIR."
)
@click.option(
    "--status",
    type=click.Choice(REVIEWED),
    help="jsonl: only items of this decision (default: approved and rejected; pending "
    "items are never exported).",
)
@click.option("--instruction", "instruction_id", metavar="ID", help="jsonl: only this instruction.")
@click.option(
    "--reason",
    metavar="REASON",
    callback=lambda ctx, param, value: None if value is None else _known_reason(value),
    help="jsonl: only this reason.",
)
@click.option(
    "--since",
    callback=lambda ctx, param, value: None if value is None else _parse_since(value),
    metavar="DATE",
    help="jsonl: only items quarantined at or after DATE (2026-11-21 or an ISO timestamp "
    "with zone).",
)
@click.option(
    "--output",
    metavar="FILE",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="jsonl: write the lines to FILE, whole or not at all (default -: stdout).",
)
@database_option
@click.pass_context
def quarantine_export_command(
    ctx: click.Context,
    quarantine_id: int | None,
    form: str,
    to: Path | None,
    force: bool,
    status: str | None,
    instruction_id: str | None,
    reason: str | None,
    since: datetime | None,
    output: Path | None,
    database: str | None,
) -> None:
    """Export quarantined items: by default (--format fixture) write a regression fixture
    of the model output item ID came from (its run and attempt), as `salvagelane fixture
    capture` does (replay it with `salvagelane replay DIR`); with --format jsonl, write
    one JSON line per reviewed item, oldest first: the quarantined text, the reason and
    correction signal, the decision and the operator's corrected item, with provenance.
    Each line is checked against the export schema before it is written."""
    given = [
        f"--{name}"
        for name in ("status", "instruction", "reason", "since", "output")
        if ctx.get_parameter_source("instruction_id" if name == "instruction" else name)
        is not click.core.ParameterSource.DEFAULT
    ]
    if form == "jsonl":
        if quarantine_id is not None or to is not None or force:
            raise click.UsageError(
                "--format jsonl exports every reviewed item the filters select: it takes "
                "no ID, --to or --force (filter with --status, --instruction, --reason, "
                "--since)"
            )
        _export_jsonl(
            status=status,
            instruction_id=instruction_id,
            reason=reason,
            since=since,
            output=output,
            database=database,
        )
        return
    if given:
        raise click.UsageError(
            f"{', '.join(given)}: only with --format jsonl (a fixture is of one item, ID)"
        )
    if quarantine_id is None or to is None:
        raise click.UsageError(
            "--format fixture needs the item's ID and --to DIR "
            "(or --format jsonl for the reviewed items as data)"
        )
    from salvagelane.review.capture import capture_run

    with open_store(database, read_only=True) as store:
        held = store.quarantine.get_quarantine(quarantine_id)
        captured = capture_run(store, held.run_id, held.attempt_number, to, force=force)
    click.echo(captured_fixture(captured))
    click.echo(
        f"quarantined  #{held.id} ({place_in_output(held.source_index)}): {line(held.reason)}"
    )


def _export_jsonl(
    *,
    status: str | None,
    instruction_id: str | None,
    reason: str | None,
    since: datetime | None,
    output: Path | None,
    database: str | None,
) -> None:
    from salvagelane.review.dataset import export_lines, write_lines
    from salvagelane.store import QuarantineFilter

    statuses = [ReviewStatus(value) for value in ((status,) if status else REVIEWED)]
    where = QuarantineFilter(instruction_id=instruction_id, reason=reason, since=since)
    to_stdout = output is None or str(output) == "-"
    with open_store(database, read_only=True) as store:
        if instruction_id is not None:
            require_known_instruction(store, instruction_id)
        lines = export_lines(store, where, statuses)
        if to_stdout:
            count = 0
            for count, text in enumerate(lines, 1):  # noqa: B007 (counted)
                click.echo(text)
        else:
            assert output is not None
            count = write_lines(output, lines)
    chosen = " or ".join(str(s) for s in statuses)
    where_to = "stdout" if to_stdout else str(output)
    click.echo(f"exported {count} {chosen} item(s) to {line(where_to)}", err=True)


@quarantine_group.command("approve")
@click.argument("quarantine_id", metavar="ID", type=ITEM_ID)
@click.option(
    "--edit",
    is_flag=True,
    help="Correct the item in $EDITOR (starts from the repaired candidate, else the snippet).",
)
@click.option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the corrected item from PATH.",
)
@click.option("--stdin", "from_stdin", is_flag=True, help="Read the corrected item from stdin.")
@by_option
@click.option("--note", metavar="TEXT", help="Why, for the audit trail.")
@use_current_option
@instructions_option
@database_option
@json_option
def quarantine_approve_command(
    quarantine_id: int,
    edit: bool,
    path: Path | None,
    from_stdin: bool,
    by: str | None,
    note: str | None,
    use_current: bool,
    instructions_dir: Path,
    database: str | None,
    as_json: bool,
) -> None:
    """Approve quarantined item ID with a corrected item, checked by the guardrails.

    The corrected JSON goes through the same guardrails as model output, with the
    version of the definition the item's run was made with (stored with the run, so
    this works from any directory), or with --use-current the instruction's current
    definition in --instructions (the command says what differs). If it passes, it is
    appended to the run's report and the item is marked approved; if not, nothing
    changes but the audit trail, the correction signal is printed and the exit status
    is 1.
    """
    from salvagelane.errors import InputError
    from salvagelane.review.approval import Refused, approve_quarantined

    if [edit, path is not None, from_stdin].count(True) != 1:
        raise click.UsageError(
            "give the corrected item with exactly one of --edit, --file, --stdin"
        )
    actor = actor_of(by)

    def read_corrected(detail: QuarantineDetail, cap: int) -> OperatorInput:
        try:
            return _corrected_input(detail, path, from_stdin=from_stdin, cap=cap)
        except InputError as exc:  # not UTF-8
            where = str(path) if path is not None else "the corrected item"
            raise click.FileError(where, hint=str(exc)) from exc

    with open_store(database) as store:
        verdict = approve_quarantined(
            store,
            quarantine_id,
            read_corrected=read_corrected,
            instructions_dir=instructions_dir,
            use_current=use_current,
            actor=actor,
            note=note,
            tell=lambda text: click.echo(f"note: {text}", err=True),
        )
    if isinstance(verdict, Refused):
        _refused(verdict, as_json=as_json)
        raise click.exceptions.Exit(EXIT_INVALID)
    approval = verdict.approval
    if as_json:
        click.echo(json.dumps(to_json(approval), indent=2, ensure_ascii=False))
        return
    click.echo(
        # No report position here: "item N" names the N-th item of the output everywhere.
        f"approved #{approval.quarantine_id}: added to the report of run "
        f"{line(approval.run_id[:8])} ({approval.items} items now)"
    )
    click.echo(f"run {line(approval.run_id[:8])}: {render.figures_line(approval.run)}")


def _corrected_input(
    detail: QuarantineDetail, path: Path | None, *, from_stdin: bool, cap: int
) -> OperatorInput:
    from salvagelane.review.approval import read_bounded

    if path is not None:
        try:
            with path.open("rb") as stream:
                return read_bounded(stream, cap)
        except OSError as exc:
            raise click.FileError(str(path), hint=str(exc)) from exc
    if from_stdin:
        return read_bounded(sys.stdin.buffer, cap)
    if detail.repaired is not None:
        start = json.dumps(detail.repaired, indent=2, ensure_ascii=False) + "\n"
    else:
        start = (detail.raw_span or detail.snippet or "") + "\n"
    edited = click.edit(start, extension=".json")
    if edited is None:
        raise click.UsageError("the editor closed without saving: nothing approved")
    return read_bounded(io.BytesIO(edited.encode("utf-8", "surrogatepass")), cap)


def _refused(refusal: Refused, *, as_json: bool) -> None:
    signal = refusal.signal
    if as_json:
        document = {
            "approved": False,
            "quarantine_id": refusal.quarantine_id,
            "reason": refusal.reason,
            "error": {**signal.to_json(), "message": refusal.message},
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    # The received value is the operator's text, often pasted from the model's output.
    lines = [
        f"approval of #{refusal.quarantine_id} refused by the guardrails (nothing changed):",
        f"  reason    {line(refusal.reason)}",
        f"  path      {line(signal.path)}",
        f"  expected  {line(signal.expected)}",
        f"  received  {line(signal.received)}",
    ]
    if signal.detail:
        lines.append(f"  detail    {line(signal.detail)}")
    click.echo("\n".join(lines), err=True)


@quarantine_group.command("reject")
@click.argument("quarantine_id", metavar="ID", type=ITEM_ID)
@click.option("--note", required=True, metavar="TEXT", help="Why it is rejected.")
@by_option
@database_option
def quarantine_reject_command(
    quarantine_id: int, note: str, by: str | None, database: str | None
) -> None:
    """Reject pending quarantined item ID: it stays out of the report."""
    from salvagelane.review.approval import reject_quarantined

    if not note.strip():
        raise click.UsageError("--note: say why the item is rejected")
    with open_store(database) as store:
        held = reject_quarantined(
            store, quarantine_id, actor=actor_of(by), note=note, now=datetime.now(UTC)
        )
    click.echo(f"rejected #{held.id} ({line(held.reason)}, run {line(held.run_id[:8])})")


@quarantine_group.command("note")
@click.argument("quarantine_id", metavar="ID", type=ITEM_ID)
@click.argument("text")
@by_option
@database_option
def quarantine_note_command(
    quarantine_id: int, text: str, by: str | None, database: str | None
) -> None:
    """Add a note to quarantined item ID (any status); it goes into the audit trail."""
    if not text.strip():
        raise click.UsageError("TEXT: the note is empty")
    with open_store(database) as store:
        held = store.quarantine.note_quarantined(
            quarantine_id, actor=actor_of(by), note=text, now=datetime.now(UTC)
        )
    click.echo(f"noted #{held.id} [{line(held.review_status)}]")


# --- renderings -------------------------------------------------------------------------------


def _message(error: Any) -> str:
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return json.dumps(error, ensure_ascii=False)


def quarantine_table(items: list[QuarantineView], where: QuarantineFilter | None = None) -> str:
    """``quarantine list``: one line per item, newest first."""
    if not items:
        # A filter that matches nothing says which, so it cannot pass for an empty lane.
        parts = [] if where is None else _filter_parts(replace(where, limit=None))
        if where is not None and where.review_status is not None:
            parts.insert(0, f"status {where.review_status}")
        return "no quarantined items " + (f"with {', '.join(parts)}" if parts else "match")
    header = (
        "ID", "CREATED (UTC)", "INSTRUCTION", "RUN", "ITEM", "REASON", "STATUS", "ERROR", "SNIPPET",
    )  # fmt: skip
    rows = [header]
    for item in items:
        rows.append(
            (
                str(item.id),
                when(item.created_at),
                item.instruction_id,
                item.run_id[:8],
                "-" if item.source_index is None else str(item_number(item.source_index)),
                item.reason,
                item.review_status,
                one_line(_message(item.error), _ERROR_WIDTH),
                one_line(item.snippet or "", _SNIPPET_WIDTH),
            )
        )
    return "\n".join(aligned(rows))


SPAN_OPEN, SPAN_CLOSE = "⟦", "⟧"
"""Markers around the item's span in the raw text ``show`` prints."""


def quarantine_detail(detail: QuarantineDetail) -> str:
    """``quarantine show``: the item, its context in the raw output, its review."""
    prov = detail.provenance
    # Everything here was written by a model, a provider or a reviewer: each value goes
    # through safe_text (line for one-line fields, block for the raw text and the repair).
    finish = line(str(prov.get("finish_reason") or "-"))
    native = prov.get("native_finish_reason")
    if native and native != prov.get("finish_reason"):
        finish += f" (provider: {line(str(native))})"
    lines = [
        f"quarantined  #{detail.id}  {line(detail.reason)}  [{line(detail.review_status)}]",
        f"instruction  {line(detail.instruction_id)}  "
        f"(definition {line(str(prov.get('definition_sha256') or '-')[:12])})",
        f"run          {line(detail.run_id)}  ({line(detail.run_status)}), "
        f"attempt {detail.attempt_number}",
        f"model        {line(str(prov.get('model') or '-'))}, finish {finish}",
        f"schema       sha256 {line(str(prov.get('schema_sha256') or '-')[:12])}",
        f"source       {place_in_output(detail.source_index)}, "
        f"span {detail.span_start}-{detail.span_end}, "
        f"sha256 {line((detail.sha256 or '-')[:12])}",
        f"created      {when(detail.created_at)}",
        "",
        f"error        {line(_message(detail.error))}",
    ]
    for key in ("code", "path", "expected", "received", "detail"):
        if isinstance(detail.error, dict) and detail.error.get(key):
            lines.append(f"  {key:<10} {line(str(detail.error[key]))}")
    lines.append("")
    if detail.raw_span is None:
        lines.append("raw output   not stored")
        lines.append(f"snippet      {line(repr(detail.snippet))}")
    else:
        before, after = detail.raw_before or "", detail.raw_after or ""
        start = (detail.span_start or 0) - len(before)
        end = (detail.span_end or 0) + len(after)
        lines.append(
            f"raw output of attempt {detail.attempt_number}, chars {start}-{end} "
            f"(the item between {SPAN_OPEN} and {SPAN_CLOSE}):"
        )
        lines.append(
            f"{block(before)}{SPAN_OPEN}{block(detail.raw_span)}{SPAN_CLOSE}{block(after)}"
        )
    lines.append("")
    if detail.repaired is not None:
        lines.append("repaired candidate (for review; never accepted on its own):")
        lines.append(block(json.dumps(detail.repaired, indent=2, ensure_ascii=False)))
    else:
        lines.append("repaired candidate: none")
    lines.append("")
    if detail.report_id is None:
        lines.append("report       none: the run stored no report (an approval is refused)")
    else:
        lines.append(f"report       {detail.report_items} items")
    review = f"review       {line(detail.review_status)}"
    if detail.reviewed_by:
        review += f" by {line(detail.reviewed_by)} at {when(detail.reviewed_at)}"
    lines.append(review)
    if detail.review_note:
        lines.append(f"note         {line(detail.review_note)}")
    lines.append(f"audit trail ({len(detail.reviews)})")
    for entry in detail.reviews:
        shown = f"  {when(entry.at)}  {line(entry.action):<15} by {line(entry.actor)}"
        if entry.note:
            shown += f": {one_line(entry.note, _ERROR_WIDTH)}"
        lines.append(shown)
        if entry.error:
            lines.append(f"      {one_line(_message(entry.error), 100)}")
    return "\n".join(lines)
