"""Loading definitions: read, parse, validate and cross-check them into Instructions.

Relative paths in a definition are resolved against its directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from salvagelane.core import ItemSchema, parse_items_path
from salvagelane.core.canonical import canonical_sha256
from salvagelane.definitions.context import resolve_allow_lists, resolve_context
from salvagelane.definitions.cron import cron_problem
from salvagelane.definitions.model import (
    AllowListSource,
    Connector,
    ConnectorKind,
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
from salvagelane.definitions.templates import (
    placeholder,
    preview_prompt,
    render_prompt,
    template_problems,
)
from salvagelane.definitions.validation import validate
from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml, read_text
from salvagelane.errors import ConfigurationError, DefinitionError, not_utf8
from salvagelane.loading import load_allow_list, load_json_file

_MAX_DEFINITION_BYTES = 1024 * 1024


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
    base = path.resolve().parent
    problems: list[Problem] = []
    instruction = _build(document, path, base, problems)
    raise_problems(source, in_document_order(problems, lines), lines)
    assert instruction is not None
    return instruction


def _build(
    document: Mapping[str, Any], path: Path, base: Path, problems: list[Problem]
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
    if "fixture" in connector_doc:
        fixture = _existing_file(base, connector_doc["fixture"], ("connector", "fixture"), problems)

    output_doc = document["output"]
    item_schema, envelope_schema = _compile_schemas(base, output_doc, problems)
    items_path = parse_items_path(output_doc["items_path"])
    if envelope_schema is not None:
        _check_field_path(
            envelope_schema.schema, items_path, ("output", "items_path"), "envelope", problems
        )
    if item_schema is not None:
        rank_key = tuple(output_doc["rank_key"].split("."))
        _check_field_path(item_schema.schema, rank_key, ("output", "rank_key"), "item", problems)

    context = {
        name: _context_source(name, entry, base, problems)
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
        file = None
        if "file" in entry:
            file = _existing_file(base, entry["file"], (*where, "file"), problems)
            if file is not None:
                try:
                    load_allow_list(file)
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
                file=file,
                context=entry.get("context"),
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
        connector=Connector(
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
            envelope_schema_path=(base / output_doc["envelope_schema"]).resolve(),
            item_schema_path=(base / output_doc["item_schema"]).resolve(),
            items_path=items_path,
            rank_key=output_doc["rank_key"],
            envelope_schema=envelope_schema,
            item_schema=item_schema,
        ),
        guardrails=GuardrailSpec(
            max_items=guardrails_doc["max_items"],
            max_depth=guardrails_doc["max_depth"],
            max_string_length=guardrails_doc["max_string_length"],
            max_output_bytes=guardrails_doc["max_output_bytes"],
            coerce=guardrails_doc["coerce"],
            allow_lists=tuple(allow_lists),
        ),
        context=MappingProxyType(context),
        retry=RetryPolicy(
            attempts=document["retry"]["attempts"],
            on=tuple(RetryOn(value) for value in document["retry"]["on"]),
            length_budget_factor=float(document["retry"].get("length_budget_factor", 2.0)),
            max_output_tokens_ceiling=document["retry"].get("max_output_tokens_ceiling"),
        ),
        sinks=tuple(_sink(entry, base) for entry in document.get("sinks", ())),
        source=path,
        definition=MappingProxyType(dict(document)),
        definition_sha256=canonical_sha256(document),
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


def _existing_file(
    base: Path, relative: str, where: PathParts, problems: list[Problem]
) -> Path | None:
    resolved = (base / relative).resolve()
    if not resolved.is_file():
        problems.append(
            Problem(
                where,
                f"expected an existing file (relative to the definition's directory), "
                f"got {received(relative)}: no such file {resolved}",
            )
        )
        return None
    return resolved


def _compile_schemas(
    base: Path, output: Mapping[str, Any], problems: list[Problem]
) -> tuple[ItemSchema | None, ItemSchema | None]:
    """The compiled item and envelope schemas; the envelope may $ref the item by its $id."""
    item_path = _existing_file(base, output["item_schema"], ("output", "item_schema"), problems)
    envelope_path = _existing_file(
        base, output["envelope_schema"], ("output", "envelope_schema"), problems
    )
    item_schema = envelope_schema = None
    item_document: Any = None
    if item_path is not None:
        try:
            item_document = load_json_file(item_path, what="schema")
            item_schema = ItemSchema.compile(item_document, source=output["item_schema"])
        except ConfigurationError as exc:
            problems.append(
                Problem(("output", "item_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    if envelope_path is not None and item_path is not None and item_schema is not None:
        # Compiled only with a usable item schema: the envelope usually $refs it.
        bundled = (
            [item_document]
            if isinstance(item_document, Mapping) and isinstance(item_document.get("$id"), str)
            else []
        )
        try:
            envelope_schema = ItemSchema.compile(
                load_json_file(envelope_path, what="schema"),
                source=output["envelope_schema"],
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
    name: str, entry: Mapping[str, Any], base: Path, problems: list[Problem]
) -> ContextSource:
    if "file" in entry:
        file = _existing_file(base, entry["file"], ("context", name, "file"), problems)
        if file is not None and file.suffix.lower() not in (".json", ".yaml", ".yml"):
            problems.append(
                Problem(
                    ("context", name, "file"),
                    f"expected a .json, .yaml or .yml file, got {received(entry['file'])}",
                )
            )
        return ContextSource(name=name, kind="file", file=file or (base / entry["file"]).resolve())
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
