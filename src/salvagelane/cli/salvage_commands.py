"""``salvagelane salvage`` and ``salvagelane check``: the core, and definitions, offline."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from salvagelane.cli.app import EXIT_INVALID
from salvagelane.cli.options import (
    Command,
    count_range,
)
from salvagelane.core.numbering import item_label
from salvagelane.core.records import DEFAULT_MAX_QUARANTINED
from salvagelane.errors import (
    ConfigurationError,
    DefinitionError,
    ItemsPathError,
)
from salvagelane.safe_text import line, one_line

if TYPE_CHECKING:  # imported when a command runs: `--help` must not pay for jsonschema, Jinja2
    from salvagelane.core import SalvagePolicy, SalvageResult
    from salvagelane.definitions import ContextSource, Instruction


def _parse_allow(values: tuple[str, ...]) -> dict[str, frozenset[str]]:
    from salvagelane.policy_files import load_allow_list

    lists: dict[str, frozenset[str]] = {}
    for spec in values:
        field_name, sep, file_name = spec.partition("=")
        if not sep or not field_name or not file_name:
            raise ConfigurationError(f"--allow {spec!r}: expected FIELD=FILE")
        lists[field_name] = lists.get(field_name, frozenset()) | load_allow_list(Path(file_name))
    return lists


def _items_path(dotted: str) -> tuple[str, ...]:
    from salvagelane.core import parse_items_path

    path = parse_items_path(dotted)
    if any(not part for part in path):
        raise ItemsPathError(
            f"--items {dotted!r}: empty key between dots (expected e.g. data.items)"
        )
    return path


@click.command("salvage", cls=Command)
@click.argument(
    "file", required=False, type=click.Path(dir_okay=False, path_type=Path, allow_dash=True)
)
@click.option(
    "--schema",
    "schema_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON Schema (draft 2020-12) every item must satisfy.",
)
@click.option(
    "--items",
    "items",
    required=True,
    help="Dotted key path to the items array; '' when the output is the array itself.",
)
@click.option("--max-items", type=count_range(least=0), help="Keep at most N items (by rank).")
@click.option("--rank-key", help="Item field ranking items for --max-items (smallest wins).")
@click.option(
    "--max-depth",
    type=count_range(),
    default=32,
    show_default=True,
    help="Most containers nested in one item, the item itself being 1.",
)
@click.option(
    "--max-string-length",
    type=count_range(),
    default=8192,
    show_default=True,
    help="Longest string or number token in an item.",
)
@click.option(
    "--max-bytes",
    type=count_range(),
    default=8 * 1024 * 1024,
    show_default=True,
    help="Byte cap on the whole output; over it nothing is scanned.",
)
@click.option(
    "--max-quarantined",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_QUARANTINED,
    show_default=True,
    help="Most quarantine records; past it the rest are only counted by reason (folded).",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    metavar="FIELD=FILE",
    help="FIELD's value must be one of FILE's lines. Repeatable.",
)
@click.option("--finish-reason", help="The provider's finish reason (e.g. length, max_tokens).")
@click.option(
    "--coerce/--no-coerce",
    default=False,
    show_default=True,
    help='Normalise ambiguous scalars ("5" -> 5) to the schema\'s types, recorded.',
)
@click.option(
    "--repair",
    "repair",
    type=click.Choice(["none", "lossless"]),
    default="none",
    show_default=True,
    help="lossless: accept an item whose only defects have one reading (trailing commas, "
    "comments, single quotes, True/False/None, raw tabs in strings, bare keys), each "
    "repair recorded on the item; anything else is still quarantined.",
)
@click.option(
    "--schema-ref",
    "schema_refs",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A schema the item schema may $ref by its $id. Repeatable.",
)
@click.option(
    "--envelope-schema",
    "envelope_schema_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON Schema of the whole report: the envelope is checked against it, the "
    "items property excluded, and it tells the envelope from an item in other framings.",
)
@click.option(
    "--framing",
    type=click.Choice(["auto", "document", "lines"]),
    default="auto",
    show_default=True,
    help="document: one report object; lines: top-level values (JSON Lines, objects back "
    "to back, a fenced block per item); auto: the document, else top-level values.",
)
@click.option(
    "--batch",
    is_flag=True,
    help='Read JSON Lines of {"raw": ..., "finish_reason": ...} from stdin; '
    "write one result line per input line.",
)
@click.option(
    "--summary",
    is_flag=True,
    help="Print a short human summary instead of JSON (with --batch: a line per input "
    "line, then the totals).",
)
def salvage_command(
    file: Path | None,
    schema_path: Path,
    items: str,
    max_items: int | None,
    rank_key: str | None,
    max_depth: int,
    max_string_length: int,
    max_bytes: int,
    max_quarantined: int,
    allow: tuple[str, ...],
    finish_reason: str | None,
    coerce: bool,
    repair: str,
    schema_refs: tuple[Path, ...],
    envelope_schema_path: Path | None,
    framing: str,
    batch: bool,
    summary: bool,
) -> None:
    """Salvage the items of one raw model output (FILE, or stdin) and print the result.

    Exit 0 whenever input was processed, partial or not; 2 for unusable options,
    schema or allow-list files.
    """
    from salvagelane.core import AcceptRepairs, Guardrails, SalvagePolicy, salvage
    from salvagelane.policy_files import load_item_schema, read_raw

    if batch and file is not None:
        raise ConfigurationError("--batch reads stdin: do not give FILE as well")
    item_schema = load_item_schema(schema_path, resources=schema_refs)
    policy = SalvagePolicy(
        items_path=_items_path(items),
        item_schema=item_schema,
        # The envelope may $ref the item schema by its $id, as a definition's does.
        envelope_schema=None
        if envelope_schema_path is None
        else load_item_schema(
            envelope_schema_path,
            resources=(*schema_refs, *((schema_path,) if "$id" in item_schema.schema else ())),
        ),
        framing=framing,
        guardrails=Guardrails(
            max_bytes=max_bytes,
            max_depth=max_depth,
            max_string_length=max_string_length,
            max_items=max_items,
            rank_key=rank_key,
            allow_lists=_parse_allow(allow),
            coerce=coerce,
            accept_repairs=AcceptRepairs(repair),
            max_quarantined=max_quarantined,
        ),
    )
    if batch:
        _run_batch(policy, summary=summary)
        return
    raw = read_raw(None if file is None or str(file) == "-" else file, sys.stdin.buffer)
    result = salvage(raw, policy, finish_reason=finish_reason)
    if summary:
        click.echo(render_summary(result))
    else:
        text = json.dumps(result.to_json(), indent=2, ensure_ascii=False, allow_nan=False)
        # A lone surrogate (from bytes that were not UTF-8) cannot be written as UTF-8;
        # backslashreplace turns it into a \uXXXX escape, which is valid JSON inside a string.
        click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"))


@click.command("check", cls=Command)
@click.argument(
    "directory",
    required=False,
    default="instructions",
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--resolve",
    is_flag=True,
    help="Also resolve context callables: imports and runs the context callables the "
    "definitions name (their code), as a run does. Only for definitions you trust.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 on warnings too (e.g. on the host that runs serve, where every "
    "variable a definition names must be set).",
)
def check_command(directory: Path, resolve: bool, strict: bool) -> None:
    """Validate every instruction definition (*.yaml, *.yml) in DIRECTORY.

    DIRECTORY defaults to instructions/. Each definition is loaded and validated, its
    context files and allow-lists read and its prompt rendered within the render limits.
    Nothing a definition names is imported or run: context callables are not called
    (the prompt is rendered with placeholders for their values) and callable sinks are
    not imported. --resolve imports and runs the context callables too, as a run does.

    Prints "ok" and what was not run (or, with --resolve, what ran) for a valid
    definition, an "error" line for each problem of an invalid one, then a "warning"
    line for each environment variable a definition names that is not set here and
    for an items path its envelope schema does not define. Exit 1 if any definition
    is invalid (or, with --strict, has a warning), 2 if DIRECTORY is missing or holds
    no definitions.
    """
    # Imported here: Jinja2 and PyYAML add about 60 ms that `salvage` never needs.
    from salvagelane.definitions import (
        check_instruction,
        definition_files,
        duplicate_id_check,
        environment_warnings,
    )

    files = definition_files(directory)
    if not files:
        raise ConfigurationError(f"{directory}: no instruction definitions (*.yaml, *.yml)")
    seen: dict[str, Path] = {}
    invalid = warned = 0
    for path in files:
        warnings = list(environment_warnings(path))
        try:
            checked = check_instruction(path, resolve=resolve)
            duplicate_id_check(checked.instruction, seen)
        except DefinitionError as exc:
            invalid += 1
            # One line per problem, each naming the file: as a compiler lists errors.
            for problem in exc.problems or (None,):
                shown = str(exc) if problem is None else f"{exc.source}: {problem}"
                click.echo("error  " + one_line(shown))
            warned += _warn(path, warnings)
            continue
        click.echo(f"ok  {line(checked.instruction.id)}  ({line(str(path))})")
        for note in _schema_notes(checked.instruction):
            click.echo(f"  {line(note)}")
        if checked.not_run:
            names = _callables(checked.not_run)
            them = "them" if len(checked.not_run) > 1 else "it"
            if checked.unrendered is None:
                placeholders = "placeholders" if len(checked.not_run) > 1 else "a placeholder"
                rendered = f"the prompt was rendered with {placeholders} for {them}"
            else:
                rendered = f"the prompt could not be rendered without {them}: {checked.unrendered}"
            click.echo(
                f"  not run: {names}; "
                + " ".join(rendered.split())
                + f" (check --resolve imports and runs {them})"
            )
        if checked.ran:
            click.echo(f"  ran: {line(_callables(checked.ran))}")
        warned += _warn(path, [*checked.warnings, *warnings])
    if invalid or (strict and warned):
        raise click.exceptions.Exit(EXIT_INVALID)


def _warn(path: Path, warnings: Sequence[str]) -> int:
    for warning in warnings:
        click.echo(f"warning  {one_line(f'{path}: {warning}')}")
    return len(warnings)


def _schema_notes(instruction: Instruction) -> list[str]:
    """Which validator judges the items, and what the structured-output hint will be:
    strict or why not, what it leaves out."""
    from salvagelane.core.schema_hint import describe_hint, provider_hint

    notes = []
    routed = instruction.output.item_schema.reference_only
    if routed:
        notes.append(f"item schema: judged by jsonschema alone, item by item (slower): {routed}")
    spec = instruction.connector
    if not spec.structured_output:
        return notes
    hint = provider_hint(str(spec.kind), instruction.response_schema())
    if hint is None:
        if str(spec.kind) == "anthropic":
            notes.append(
                "anthropic hint not sent: the schema has an object without "
                "additionalProperties: false, which Anthropic refuses"
            )
        else:
            notes.append(f"structured_output: {spec.kind} connectors send no hint")
        return notes
    state = "strict (the provider enforces it)" if hint.strict else "advisory"
    return [*notes, f"{hint.provider} hint: {state}", *describe_hint(hint)]


def _callables(sources: Sequence[ContextSource]) -> str:
    """``context callables a (m:f), b (m:g)``, sorted by name."""
    noun = "context callables" if len(sources) > 1 else "context callable"
    named = ", ".join(
        f"{source.name} ({source.callable})" for source in sorted(sources, key=lambda s: s.name)
    )
    return f"{noun} {named}"


_BATCH_LINE_ERROR = 'expected a JSON object {"raw": string, "finish_reason": string|null}'


def _run_batch(policy: SalvagePolicy, *, summary: bool = False) -> None:
    """One result per input line: a JSON line, or with ``summary`` one human line, and a
    total at the end (a batch is read as a whole: how many went how)."""
    import orjson

    from salvagelane.core import salvage

    out = sys.stdout
    binary = out.buffer if hasattr(out, "buffer") else None
    out.flush()  # result lines go to the binary buffer under it
    totals = _BatchTotals()
    for number, given in enumerate(sys.stdin.buffer, start=1):
        text = given.decode("utf-8", "surrogateescape").strip()
        if not text:
            continue
        result: SalvageResult | None = None
        try:
            try:
                request = orjson.loads(given)
            except orjson.JSONDecodeError:  # NaN, a lone surrogate: json reads it as before
                request = json.loads(text)
            raw, finish = request["raw"], request.get("finish_reason")
            if not isinstance(raw, str) or not (finish is None or isinstance(finish, str)):
                raise TypeError
            result = salvage(raw, policy, finish_reason=finish)
        except (ValueError, KeyError, TypeError, AttributeError):
            result = None
        if summary:
            out.write(totals.add(number, result) + "\n")
            continue
        record: Any = (
            {"line": number, "error": _BATCH_LINE_ERROR} if result is None else result.to_json()
        )
        encoded = _batch_line(record, orjson.dumps)
        if binary is not None:
            binary.write(encoded)
        else:
            out.write(encoded.decode("ascii"))
    if summary:
        out.write(totals.render() + "\n")
    out.flush()
    if binary is not None:
        binary.flush()


def _batch_line(record: Any, fast_dumps: Any) -> bytes:
    """One result as an ASCII JSON line. orjson writes it several times faster; a line
    it would write with non-ASCII characters (raw bidirectional marks, say) or cannot
    write (an integer past 64 bits) is written by json with every such character escaped,
    as before."""
    try:
        encoded: bytes = fast_dumps(record)
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits
        encoded = b"\x80"
    if not encoded.isascii():
        encoded = json.dumps(record, ensure_ascii=True, allow_nan=False).encode("ascii")
    return encoded + b"\n"


class _BatchTotals:
    """The ``--batch --summary`` lines: one per input line, then the totals."""

    def __init__(self) -> None:
        self.lines = 0
        self.by_status: dict[str, int] = {}
        self.unreadable = 0
        self.candidates = 0
        self.accepted = 0
        self.by_reason: dict[str, int] = {}

    def add(self, number: int, result: SalvageResult | None) -> str:
        self.lines += 1
        if result is None:
            self.unreadable += 1
            return f"line {number:<5} {'error':<8} {_BATCH_LINE_ERROR}"
        counts = result.counts()
        status = str(result.status)
        self.by_status[status] = self.by_status.get(status, 0) + 1
        self.candidates += counts["candidates"]
        self.accepted += counts["accepted"]
        for reason, count in counts["by_reason"].items():
            self.by_reason[reason] = self.by_reason.get(reason, 0) + count
        text = f"line {number:<5} {line(status):<8} " + _figures(
            counts["accepted"], counts["candidates"], counts["by_reason"]
        )
        if result.truncated:
            text += "; output truncated"
        return "; ".join([text, *(line(note) for note in result.notes)])

    def render(self) -> str:
        statuses = [
            f"{self.by_status[s]} {s}" for s in ("ok", "partial", "failed") if s in self.by_status
        ]
        if self.unreadable:
            statuses.append(f"{self.unreadable} unreadable")
        return f"total      {self.lines} line(s): {', '.join(statuses) or 'none'}; " + _figures(
            self.accepted, self.candidates, self.by_reason
        )


def _figures(accepted: int, candidates: int, by_reason: dict[str, int]) -> str:
    quarantined = sum(by_reason.values())
    reasons = ", ".join(f"{line(k)}: {v}" for k, v in by_reason.items())
    return f"accepted {accepted} of {candidates} candidates, quarantined {quarantined}" + (
        f" ({reasons})" if reasons else ""
    )


def render_summary(result: SalvageResult) -> str:
    """A few lines a person can read at a terminal; what came from the model (envelope
    keys, messages quoting its values) shown through safe_text."""
    counts = result.counts()
    by_reason = ", ".join(f"{line(k)}: {v}" for k, v in counts["by_reason"].items()) or "none"
    flags = [
        "document is valid JSON" if result.document_valid else "document is not valid JSON",
        "output truncated" if result.truncated else "output complete",
        f"finish reason: {line(result.finish_reason or 'not given')}",
    ]
    if result.framing != "document":
        flags.insert(0, f"items framed as {line(result.framing)}")
    envelope = ", ".join(line(key) for key in result.envelope)
    repaired = [item for item in result.items if item.repairs]
    lines = [
        f"status       {line(result.status)}",
        f"output       {'; '.join(flags)}",
        f"envelope     {envelope or 'nothing recovered'}",
        f"accepted     {counts['accepted']} of {counts['candidates']} candidates"
        + (f" ({len(repaired)} repaired losslessly)" if repaired else ""),
    ]
    for kept in repaired:
        made = ", ".join(f"{line(r.kind)} at offset {r.at}" for r in kept.repairs)
        lines.append(f"  {item_label(kept.index)}: {made}")
    lines.append(f"quarantined  {counts['quarantined']} ({by_reason})")
    for item in result.quarantined:
        where = item_label(item.index) if item.index is not None else "output"
        lines.append(f"  {where}: {line(item.message)}")
        lines.append(
            f"    span {item.span.start}-{item.span.end}, sha256 {line(item.sha256[:12])}"
            + (", best-effort repair attached (not accepted)" if item.has_repair else "")
        )
    if result.folded:
        folded = ", ".join(f"{line(reason)} {n}" for reason, n in result.folded.items())
        lines.append(f"  and {result.folded_total} more folded past --max-quarantined ({folded})")
    for issue in result.envelope_issues:
        lines.append(f"  envelope {line(issue.path)}: {line(issue.problem)}")
    if result.notes:
        lines.append("notes        " + "; ".join(line(note) for note in result.notes))
    return "\n".join(lines)
