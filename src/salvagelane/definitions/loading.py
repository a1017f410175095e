"""Loading definitions: read, parse, validate and cross-check them into Instructions.

Relative paths in a definition are resolved against its directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from salvagelane.core import AcceptRepairs, Framing, ItemSchema, parse_items_path
from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.records import DEFAULT_MAX_QUARANTINED
from salvagelane.core.schema_hint import report_hint_schema
from salvagelane.definitions.context import resolve_allow_lists, resolve_context
from salvagelane.definitions.cron import cron_problem
from salvagelane.definitions.model import (
    AllowListSource,
    ConnectorKind,
    ConnectorSpec,
    ContextSource,
    GuardrailSpec,
    Instruction,
    OutputSpec,
    PromptTemplates,
    RetryOn,
    RetryPolicy,
    Schedule,
    SinkKind,
    SinkSpec,
)
from salvagelane.definitions.problems import (
    PathParts,
    Problem,
    format_path,
    in_document_order,
    one_line,
    raise_problems,
    received,
)
from salvagelane.definitions.snapshot import DefinitionSnapshot, DiskFiles, StoredFiles
from salvagelane.definitions.templates import (
    placeholder,
    preview_prompt,
    render_prompt,
    template_problems,
)
from salvagelane.definitions.validation import validate
from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml, read_text
from salvagelane.errors import ConfigurationError, DefinitionError, SchemaError, not_utf8
from salvagelane.policy_files import allow_list_values, parse_json_text

_MAX_DEFINITION_BYTES = 1024 * 1024
_MAX_FILE_BYTES = 16 * 1024 * 1024  # a schema or an allow-list file
RAW_FILE = "raw.txt"  # a fixture's recorded output (salvagelane.regression.RAW_FILE)


# --- Loading ---------------------------------------------------------------------------------


def load_instruction(path: Path | str) -> Instruction:
    """Load, validate and cross-check one definition; DefinitionError when it is unusable."""
    path = Path(path)
    source = str(path)
    try:
        text = read_text(path, _MAX_DEFINITION_BYTES)
    except OSError as exc:
        raise DefinitionError(
            f"{source}: expected a readable definition file, got {exc.strerror or exc}",
            source=source,
        ) from exc
    except UnicodeDecodeError as exc:
        raise DefinitionError(
            f"{source}: expected UTF-8 text: {not_utf8(exc)}",
            source=source,
        ) from exc
    except ValueError as exc:
        raise DefinitionError(
            f"{source}: expected a definition file, got one {exc}", source=source
        ) from exc
    return _load(text, path, DiskFiles(path.resolve().parent))


def load_stored(snapshot: DefinitionSnapshot) -> Instruction:
    """The definition ``snapshot`` holds (a run's stored version, a fixture's
    ``definition.json``), loaded, validated and cross-checked as :func:`load_instruction`
    does, without touching the filesystem: every file it names is read from the snapshot.

    A snapshot is data from a database or a fixture. Nothing it names is resolved as a
    path: its connector's fixture is not kept and its sinks are left out (a stored copy
    never says where a report goes); context callables are kept by name, and run only
    when a trusted definition names them too (see :func:`salvage_policy_for`).
    """
    source = f"{snapshot.name} (stored {snapshot.sha256[:12]})"
    size = len(snapshot.text.encode("utf-8", "surrogatepass"))
    if size > _MAX_DEFINITION_BYTES:
        raise DefinitionError(
            f"{source}: expected a definition file, got one larger than "
            f"{_MAX_DEFINITION_BYTES} bytes",
            source=source,
        )
    return _load(snapshot.text, Path(source), StoredFiles(snapshot), stored=snapshot.sha256)


def _load(
    text: str, path: Path, files: DiskFiles | StoredFiles, *, stored: str | None = None
) -> Instruction:
    source = str(path)
    try:
        document, lines = parse_yaml(text)
    except YamlProblem as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise DefinitionError(
            f"{source}: {one_line(exc.describe())}{where}",
            source=source,
            paths=() if exc.path is None else (format_path(exc.path),),
        ) from exc
    raise_problems(source, in_document_order(validate(document), lines), lines)
    problems: list[Problem] = []
    instruction = _build(document, path, files, problems)
    raise_problems(source, in_document_order(problems, lines), lines)
    assert instruction is not None
    return replace(instruction, text=text, stored_sha256=stored)


def _build(
    document: Mapping[str, Any],
    path: Path,
    files: DiskFiles | StoredFiles,
    problems: list[Problem],
) -> Instruction | None:
    """The Instruction for a schema-valid document; cross-reference problems go to
    ``problems`` (and then nothing is returned)."""
    schedule_doc = document["schedule"]
    cron_error = cron_problem(schedule_doc["cron"])
    if cron_error:
        problems.append(Problem(("schedule", "cron"), cron_error))
    timezone = schedule_doc["timezone"]
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(
            Problem(
                ("schedule", "timezone"),
                f"expected an IANA time zone name such as UTC or Europe/Berlin, "
                f"got {received(timezone)}",
            )
        )

    connector_doc = document["connector"]
    fixture = None
    if "fixture" in connector_doc and isinstance(files, DiskFiles):
        # A stored copy keeps no fixture: nothing rebuilt from one calls a connector.
        fixture = _fixture_directory(files, connector_doc["fixture"], problems)

    output_doc = document["output"]
    loaded: dict[str, str] = {}
    item_schema, envelope_schema = _compile_schemas(files, output_doc, problems, loaded)
    items_path = parse_items_path(output_doc["items_path"])
    if envelope_schema is not None:
        _check_field_path(
            envelope_schema.schema, items_path, ("output", "items_path"), "envelope", problems
        )
    if item_schema is not None:
        rank_key = tuple(output_doc["rank_key"].split("."))
        _check_field_path(item_schema.schema, rank_key, ("output", "rank_key"), "item", problems)
    if connector_doc["structured_output"] and item_schema and envelope_schema:
        try:  # the hint a run sends must be one a provider can resolve
            report_hint_schema(
                envelope_schema.schema,
                resources=[item_schema.schema],
                items_path=items_path,
                max_items=document["guardrails"]["max_items"],
            )
        except SchemaError as exc:
            problems.append(
                Problem(("output", "envelope_schema"), f"expected a bundlable schema: {exc}")
            )

    context = {
        name: _context_source(name, entry, files, problems)
        for name, entry in document["context"].items()
    }

    guardrails_doc = document["guardrails"]
    allow_lists = []
    for index, entry in enumerate(guardrails_doc["allow_lists"]):
        where: PathParts = ("guardrails", "allow_lists", index)
        if item_schema is not None:
            _check_field_path(
                item_schema.schema,
                tuple(entry["field"].split(".")),
                (*where, "field"),
                "item",
                problems,
            )
        reference = entry.get("file")
        if reference is not None:
            text = _read_file(files, reference, (*where, "file"), problems, _MAX_FILE_BYTES)
            if text is not None:
                try:
                    allow_list_values(text, shown=files.shown(reference))
                except ConfigurationError as exc:
                    problems.append(Problem((*where, "file"), f"expected an allow-list: {exc}"))
        if "context" in entry and entry["context"] not in context:
            offered = ", ".join(context) or "none"
            problems.append(
                Problem(
                    (*where, "context"),
                    f"expected the name of a context entry ({offered}), "
                    f"got {received(entry['context'])}",
                )
            )
        allow_lists.append(
            AllowListSource(
                field=entry["field"],
                values=tuple(entry["values"]) if "values" in entry else None,
                file=_on_disk(files, reference),
                context=entry.get("context"),
                reference=reference,
            )
        )

    prompt_doc = document["prompt"]
    for name in ("system", "user"):
        problems.extend(template_problems(name, prompt_doc[name], context))

    if problems or item_schema is None or envelope_schema is None:
        return None
    return Instruction(
        id=document["id"],
        description=document["description"],
        schedule=Schedule(
            cron=schedule_doc["cron"],
            timezone=timezone,
            misfire_grace_seconds=schedule_doc.get("misfire_grace_seconds", 3600),
            deadline_seconds=schedule_doc.get("deadline_seconds"),
        ),
        connector=ConnectorSpec(
            kind=ConnectorKind(connector_doc["kind"]),
            model=connector_doc["model"],
            max_output_tokens=connector_doc["max_output_tokens"],
            temperature=float(connector_doc["temperature"]),
            timeout_seconds=float(connector_doc["timeout_seconds"]),
            structured_output=connector_doc["structured_output"],
            base_url=connector_doc.get("base_url"),
            base_url_env=connector_doc.get("base_url_env"),
            api_key_env=connector_doc.get("api_key_env"),
            max_tokens_field=connector_doc.get("max_tokens_field"),
            fixture=fixture,
            stream=connector_doc.get("stream", False),
            anthropic_version=connector_doc.get("anthropic_version"),
        ),
        prompt=PromptTemplates(system=prompt_doc["system"], user=prompt_doc["user"]),
        output=OutputSpec(
            envelope_schema_path=_schema_path(files, output_doc["envelope_schema"]),
            item_schema_path=_schema_path(files, output_doc["item_schema"]),
            items_path=items_path,
            rank_key=output_doc["rank_key"],
            envelope_schema=envelope_schema,
            item_schema=item_schema,
            framing=Framing(output_doc.get("framing", "auto")),
        ),
        guardrails=GuardrailSpec(
            max_items=guardrails_doc["max_items"],
            max_depth=guardrails_doc["max_depth"],
            max_string_length=guardrails_doc["max_string_length"],
            max_output_bytes=guardrails_doc["max_output_bytes"],
            coerce=guardrails_doc["coerce"],
            allow_lists=tuple(allow_lists),
            # Optional, so that every definition written before it means what it meant.
            accept_repairs=AcceptRepairs(guardrails_doc.get("accept_repairs", "none")),
            max_quarantined=guardrails_doc.get("max_quarantined", DEFAULT_MAX_QUARANTINED),
        ),
        context=MappingProxyType(context),
        retry=RetryPolicy(
            attempts=document["retry"]["attempts"],
            on=tuple(RetryOn(value) for value in document["retry"]["on"]),
            length_budget_factor=float(document["retry"].get("length_budget_factor", 2.0)),
            max_output_tokens_ceiling=document["retry"].get("max_output_tokens_ceiling"),
        ),
        # A stored copy never says where a report goes: see load_stored.
        sinks=(
            tuple(_sink(entry, files.base) for entry in document.get("sinks", ()))
            if isinstance(files, DiskFiles)
            else ()
        ),
        source=path,
        definition=MappingProxyType(dict(document)),
        definition_sha256=canonical_sha256(document),
        files=files,
        loaded_files=MappingProxyType(loaded),
    )


def _sink(entry: Mapping[str, Any], base: Path) -> SinkSpec:
    kind = SinkKind(entry["kind"])
    return SinkSpec(
        kind=kind,
        path=base / entry["path"] if kind is SinkKind.JSON_FILE else None,
        url=entry.get("url"),
        url_env=entry.get("url_env"),
        token_env=entry.get("token_env"),
        timeout_seconds=float(entry.get("timeout_seconds", 30.0)),
        callable=entry.get("callable"),
    )


def _on_disk(files: DiskFiles | StoredFiles, reference: str | None) -> Path | None:
    """Where ``reference`` is on disk; None for a stored definition (never a path)."""
    if reference is None or not isinstance(files, DiskFiles):
        return None
    return files.path(reference)


def _schema_path(files: DiskFiles | StoredFiles, reference: str) -> Path:
    if isinstance(files, DiskFiles):
        return files.path(reference)
    return Path(files.shown(reference))  # a name for messages, never opened


def _missing(files: DiskFiles | StoredFiles, relative: str) -> str:
    if isinstance(files, DiskFiles):
        return (
            f"expected an existing file (relative to the definition's directory), "
            f"got {received(relative)}: no such file {files.path(relative)}"
        )
    return (
        f"expected a file the stored definition holds, got {received(relative)}, which it does not"
    )


def _read_file(
    files: DiskFiles | StoredFiles,
    relative: str,
    where: PathParts,
    problems: list[Problem],
    cap: int,
) -> str | None:
    """The text of the file ``relative`` names, or None with a problem saying why not."""
    if not files.exists(relative):
        problems.append(Problem(where, _missing(files, relative)))
        return None
    try:
        return files.read(relative, cap)
    except OSError as exc:
        problems.append(
            Problem(
                where,
                f"expected a readable file, got {received(relative)}: {exc.strerror or exc}",
            )
        )
    except UnicodeDecodeError as exc:
        problems.append(
            Problem(
                where,
                f"expected UTF-8 text in {received(relative)}: {not_utf8(exc)}",
            )
        )
    except ValueError as exc:
        problems.append(Problem(where, f"expected a smaller file, got {received(relative)}: {exc}"))
    return None


FIXTURE_HINT = "the directory holding raw.txt and meta.json, as `salvagelane run --replay DIR`"


def _fixture_directory(files: DiskFiles, relative: str, problems: list[Problem]) -> Path | None:
    """The fixture directory ``connector.fixture`` names (like ``run --replay DIR``)."""
    where: PathParts = ("connector", "fixture")
    resolved = files.path(relative)
    if resolved.is_dir():
        if not (resolved / RAW_FILE).is_file():
            problems.append(
                Problem(
                    where,
                    f"expected a fixture directory ({FIXTURE_HINT}), got {received(relative)}: "
                    f"no {RAW_FILE} in {resolved}",
                )
            )
            return None
        return resolved
    if resolved.is_file() and resolved.name == RAW_FILE:
        parent = PurePosixPath(relative).parent.as_posix()
        problems.append(
            Problem(
                where,
                f"expected the fixture directory, got {received(relative)}, the {RAW_FILE} "
                f"file in it: give the directory instead ({json.dumps(parent)})",
            )
        )
        return None
    what = "a file" if resolved.exists() else f"no such directory {resolved}"
    problems.append(
        Problem(
            where,
            f"expected a fixture directory (relative to the definition's directory: "
            f"{FIXTURE_HINT}), got {received(relative)}: {what}",
        )
    )
    return None


def _compile_schemas(
    files: DiskFiles | StoredFiles,
    output: Mapping[str, Any],
    problems: list[Problem],
    loaded: dict[str, str],
) -> tuple[ItemSchema | None, ItemSchema | None]:
    """The compiled item and envelope schemas; the envelope may $ref the item by its $id.
    The text of each schema read goes into ``loaded`` (by the path as written)."""
    item_ref, envelope_ref = output["item_schema"], output["envelope_schema"]
    item_text = _read_file(files, item_ref, ("output", "item_schema"), problems, _MAX_FILE_BYTES)
    envelope_text = _read_file(
        files, envelope_ref, ("output", "envelope_schema"), problems, _MAX_FILE_BYTES
    )
    for reference, text in ((item_ref, item_text), (envelope_ref, envelope_text)):
        if text is not None:
            loaded[reference] = text
    item_schema = envelope_schema = None
    item_document: Any = None
    if item_text is not None:
        try:
            item_document = parse_json_text(item_text, what="schema", shown=files.shown(item_ref))
            item_schema = ItemSchema.compile(item_document, source=item_ref)
        except ConfigurationError as exc:
            problems.append(
                Problem(("output", "item_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    if envelope_text is not None and item_schema is not None:
        # Compiled only with a usable item schema: the envelope usually $refs it.
        bundled = (
            [item_document]
            if isinstance(item_document, Mapping) and isinstance(item_document.get("$id"), str)
            else []
        )
        try:
            envelope_schema = ItemSchema.compile(
                parse_json_text(envelope_text, what="schema", shown=files.shown(envelope_ref)),
                source=envelope_ref,
                resources=bundled,
            )
        except ConfigurationError as exc:
            problems.append(
                Problem(("output", "envelope_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    return item_schema, envelope_schema


def _check_field_path(
    schema: Mapping[str, Any],
    parts: Sequence[str],
    where: PathParts,
    what: str,
    problems: list[Problem],
) -> None:
    """Flag a field path the schema provably forbids (closed ``properties``); stop at
    anything the check cannot follow ($ref, combinators)."""
    node: Any = schema
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping) or node.get("additionalProperties") is not False:
            return
        properties = node.get("properties")
        if not isinstance(properties, Mapping) or any(
            key in node for key in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties")
        ):
            return
        if part not in properties:
            dotted = ".".join(parts[: depth + 1])
            problems.append(
                Problem(
                    where,
                    f"expected a field of the {what} schema ({', '.join(properties)}), "
                    f"got {json.dumps(dotted)}",
                )
            )
            return
        node = properties[part]


def _context_source(
    name: str, entry: Mapping[str, Any], files: DiskFiles | StoredFiles, problems: list[Problem]
) -> ContextSource:
    if "file" in entry:
        reference = entry["file"]
        if not files.exists(reference):
            problems.append(Problem(("context", name, "file"), _missing(files, reference)))
        elif PurePosixPath(reference).suffix.lower() not in (".json", ".yaml", ".yml"):
            problems.append(
                Problem(
                    ("context", name, "file"),
                    f"expected a .json, .yaml or .yml file, got {received(reference)}",
                )
            )
        return ContextSource(
            name=name, kind="file", file=_on_disk(files, reference), reference=reference
        )
    if "callable" in entry:
        return ContextSource(
            name=name,
            kind="callable",
            callable=entry["callable"],
            args=MappingProxyType(dict(entry.get("args", {}))),
        )
    return ContextSource(name=name, kind="value", value=entry["value"])


def definition_files(directory: Path | str) -> list[Path]:
    """The ``*.yaml`` and ``*.yml`` files directly in ``directory``, sorted by name.

    ConfigurationError (not DefinitionError) when the directory does not exist.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigurationError(
            f"{directory}: no such directory (expected a directory of instruction definitions)"
        )
    try:
        entries = list(directory.iterdir())
    except OSError as exc:
        raise ConfigurationError(f"{directory}: cannot list: {exc.strerror or exc}") from exc
    return sorted(
        entry
        for entry in entries
        if entry.suffix in (".yaml", ".yml") and not entry.name.startswith(".") and entry.is_file()
    )


def load_instructions(directory: Path | str) -> list[Instruction]:
    """Every definition in ``directory``; the first broken one raises DefinitionError,
    and so does an id used twice."""
    instructions: list[Instruction] = []
    seen: dict[str, Path] = {}
    for path in definition_files(directory):
        instruction = load_instruction(path)
        duplicate_id_check(instruction, seen)
        instructions.append(instruction)
    return instructions


def duplicate_id_check(instruction: Instruction, seen: dict[str, Path]) -> None:
    """Raise DefinitionError when another definition in ``seen`` has the same id; else
    record this one."""
    if instruction.id in seen:
        source = str(instruction.source)
        raise DefinitionError(
            f"{source}: id: expected an id no other definition uses, got "
            f"{json.dumps(instruction.id)}, which {seen[instruction.id]} uses too",
            source=source,
            paths=("id",),
        )
    seen[instruction.id] = instruction.source


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckedInstruction:
    """What ``check`` found: the definition, the context callables it ran (``--resolve``)
    or did not run, and why the prompt could not be rendered without them (or None)."""

    instruction: Instruction
    ran: tuple[ContextSource, ...] = ()
    not_run: tuple[ContextSource, ...] = ()
    unrendered: str | None = None


def check_instruction(path: Path | str, *, resolve: bool = False) -> CheckedInstruction:
    """What a run does before calling the model, short of running code: load the
    definition, read its context files and allow-lists, render its prompt (within the
    render limits). DefinitionError on the first problem.

    Context callables are neither imported nor called: their values are placeholders
    in the render and allow-lists from them are skipped. With ``resolve`` they are
    imported and run, as a run does. Callable sinks are never imported here.
    """
    instruction = load_instruction(path)
    callables = tuple(
        source for source in instruction.context.values() if source.kind == "callable"
    )
    if resolve:
        context = resolve_context(instruction)
        resolve_allow_lists(instruction, context)
        render_prompt(instruction, context)
        return CheckedInstruction(instruction=instruction, ran=callables)
    context = resolve_context(instruction, run_callables=False)
    names = {source.name for source in callables}
    resolve_allow_lists(instruction, context, unresolved=names)
    for source in callables:
        assert source.callable is not None
        context[source.name] = placeholder(source.name, source.callable)
    return CheckedInstruction(
        instruction=instruction,
        not_run=callables,
        unrendered=preview_prompt(instruction, context),
    )
