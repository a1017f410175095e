"""Loading definitions: read, parse, validate and cross-check them into Instructions.

Relative paths in a definition are resolved against its directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from salvagelane.core import AcceptRepairs, Framing, ItemSchema, parse_items_path
from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.schema_hint import report_hint_schema
from salvagelane.definitions.cron import cron_problem
from salvagelane.definitions.field_paths import check_field_path, check_items_path
from salvagelane.definitions.fields import field_default, field_value
from salvagelane.definitions.model import (
    AllowListSource,
    Budget,
    ConnectorKind,
    ConnectorSpec,
    ContextSource,
    EmailSpec,
    GuardrailSpec,
    Instruction,
    NotifySpec,
    OutputSpec,
    PromptTemplates,
    RetryOn,
    RetryPolicy,
    Schedule,
    SinkKind,
    SinkSpec,
)
from salvagelane.definitions.prices import (
    DEFAULT_PRICES,
    PriceTable,
    PriceTableProblem,
    parse_price_table,
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
    template_problems,
)
from salvagelane.definitions.validation import notify_problem, validate
from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml, read_text
from salvagelane.errors import ConfigurationError, DefinitionError, SchemaError, not_utf8
from salvagelane.policy_files import allow_list_values, parse_json_text
from salvagelane.vocabulary import NotifyOn

_MAX_DEFINITION_BYTES = 1024 * 1024
_MAX_FILE_BYTES = 16 * 1024 * 1024  # a schema or an allow-list file
RAW_FILE = "raw.txt"  # a fixture's recorded output (salvagelane.fixtures.format.RAW_FILE)


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
    problems = validate(document)
    if not isinstance(document, Mapping):
        raise_problems(source, problems, lines)
    # The cross-checks run on whatever passed the schema, so that one report lists
    # every problem of the definition, not the schema's first.
    checked = _Checked(document, problems)
    _cross_check(checked, files)
    raise_problems(source, in_document_order(checked.problems, lines), lines)
    return replace(_build(checked, path, files), text=text, stored_sha256=stored)


class _Checked:
    """A document, the problems found in it so far, and what the cross-checks produced.
    A cross-check reads a field only when the schema found nothing wrong on its path."""

    def __init__(self, document: Mapping[str, Any], problems: list[Problem]) -> None:
        self.document = document
        self.problems = list(problems)
        self._broken = [problem.path for problem in problems]
        self.item_schema: ItemSchema | None = None
        self.envelope_schema: ItemSchema | None = None
        self.fixture: Path | None = None
        self.context: dict[str, ContextSource] = {}
        self.allow_lists: list[AllowListSource] = []
        self.loaded: dict[str, str] = {}
        self.prices: PriceTable | None = None
        self.notify_default: list[Mapping[str, Any]] | None = None

    def ok(self, *path: str | int) -> bool:
        """Whether the schema passed ``path``: nothing wrong at it, above or below it."""
        return not any(
            broken[: len(path)] == path or path[: len(broken)] == broken for broken in self._broken
        )

    def section(self, name: str) -> Mapping[str, Any]:
        """The mapping at top-level field ``name``, its default when absent."""
        value = self.document.get(name)
        if value is None and name in _DEFAULTED:
            return cast(Mapping[str, Any], field_default(name))
        return value if isinstance(value, Mapping) else {}

    def add(self, where: PathParts, message: str) -> None:
        self.problems.append(Problem(where, message))


_DEFAULTED = ("guardrails", "context")


def _cross_check(checked: _Checked, files: DiskFiles | StoredFiles) -> None:
    """Check what the schema cannot: cron, time zone, the files named, field paths into
    the report's schemas, context names, templates. Problems go to ``checked.problems``."""
    schedule = checked.section("schedule")
    if checked.ok("schedule", "cron"):
        cron_error = cron_problem(schedule["cron"])
        if cron_error:
            checked.add(("schedule", "cron"), cron_error)
    if checked.ok("schedule", "timezone"):
        try:
            ZoneInfo(schedule["timezone"])
        except (ZoneInfoNotFoundError, ValueError):
            checked.add(
                ("schedule", "timezone"),
                f"expected an IANA time zone name such as UTC or Europe/Berlin, "
                f"got {received(schedule['timezone'])}",
            )

    connector = checked.section("connector")
    # A stored copy keeps no fixture: nothing rebuilt from one calls a connector.
    if (
        "fixture" in connector
        and checked.ok("connector", "fixture")
        and isinstance(files, DiskFiles)
    ):
        checked.fixture = _fixture_directory(files, connector["fixture"], checked.problems)

    output = checked.section("output")
    checked.item_schema, checked.envelope_schema = _compile_schemas(
        files,
        output.get("item_schema") if checked.ok("output", "item_schema") else None,
        output.get("envelope_schema") if checked.ok("output", "envelope_schema") else None,
        checked.problems,
        checked.loaded,
    )
    items_path = (
        parse_items_path(output["items_path"]) if checked.ok("output", "items_path") else None
    )
    if checked.envelope_schema is not None and items_path is not None:
        check_items_path(checked.envelope_schema.schema, items_path, checked.problems)
    if (
        checked.item_schema is not None
        and "rank_key" in output
        and checked.ok("output", "rank_key")
    ):
        rank_key = tuple(output["rank_key"].split("."))
        check_field_path(
            checked.item_schema.schema, rank_key, ("output", "rank_key"), "item", checked.problems
        )
    guardrails = checked.section("guardrails")
    if (
        checked.ok("connector", "structured_output")
        and field_value(connector, "structured_output", "connector.structured_output")
        and checked.item_schema is not None
        and checked.envelope_schema is not None
        and items_path is not None
        and checked.ok("guardrails", "max_items")
    ):
        try:  # the hint a run sends must be one a provider can resolve
            report_hint_schema(
                checked.envelope_schema.schema,
                resources=[checked.item_schema.schema],
                items_path=items_path,
                max_items=field_value(guardrails, "max_items", "guardrails.max_items"),
            )
        except SchemaError as exc:
            checked.add(("output", "envelope_schema"), f"expected a bundlable schema: {exc}")

    context_names: list[str] | None = None
    if checked.ok("context") or isinstance(checked.document.get("context"), Mapping):
        context_doc = checked.section("context")
        context_names = list(context_doc)
        checked.context = {
            name: _context_source(name, entry, files, checked.problems)
            for name, entry in context_doc.items()
            if checked.ok("context", name)
        }

    allow_list_docs = guardrails.get("allow_lists", ())
    for index, entry in enumerate(allow_list_docs if isinstance(allow_list_docs, list) else ()):
        where: PathParts = ("guardrails", "allow_lists", index)
        if checked.ok(*where):
            checked.allow_lists.append(_allow_list(entry, where, files, checked, context_names))

    prompt = checked.section("prompt")
    for name in ("system", "user"):
        if context_names is not None and checked.ok("prompt", name):
            checked.problems.extend(template_problems(name, prompt[name], context_names))

    _check_budget(checked, files)
    _check_notify_default(checked, files)


DEFAULT_NOTIFY = "notify.json"
"""The notifications of every definition of a directory that has no ``notify`` of its
own: a JSON list of entries shaped as ``notify``'s (``notify: []`` opts out)."""


def _check_notify_default(checked: _Checked, files: DiskFiles | StoredFiles) -> None:
    """Read the directory's default notifications when the definition names none."""
    if "notify" in checked.document or not isinstance(files, DiskFiles):
        return
    if not files.exists(DEFAULT_NOTIFY):
        return
    where: PathParts = ("notify",)
    text = _read_file(files, DEFAULT_NOTIFY, where, checked.problems, _MAX_FILE_BYTES)
    if text is None:
        return
    shown = files.shown(DEFAULT_NOTIFY)
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        checked.add(
            where,
            f"expected the default notifications in {shown} to be JSON, got an error at "
            f"line {exc.lineno} column {exc.colno}: {exc.msg}",
        )
        return
    problem = notify_problem(entries)
    if problem is not None:
        checked.add(where, f"expected the default notifications in {shown}: {problem}")
        return
    checked.notify_default = entries


def _check_budget(checked: _Checked, files: DiskFiles | StoredFiles) -> None:
    """Read the price table (``budget.prices``, else the directory's default when there
    is one) into ``checked.loaded``, so the run's snapshot keeps it; refuse a cost limit
    without a price for ``connector.model``."""
    budget = checked.section("budget")
    where: PathParts = ("budget", "prices")
    if not checked.ok(*where):
        return
    reference = budget.get("prices")
    if reference is None and files.exists(DEFAULT_PRICES):
        reference = DEFAULT_PRICES
    if reference is not None:
        text = _read_file(files, reference, where, checked.problems, _MAX_FILE_BYTES)
        if text is not None:
            checked.loaded[reference] = text
            try:
                checked.prices = parse_price_table(text, reference=reference)
            except PriceTableProblem as exc:
                named = "" if "prices" in budget else f" (the default {DEFAULT_PRICES})"
                checked.add(
                    where,
                    f"expected a price table{named}, got a problem in "
                    f"{exc.at(files.shown(reference))}",
                )
                return
    if "cost_per_day" not in budget or not checked.ok("budget", "cost_per_day"):
        return
    if checked.prices is None:
        if reference is None:
            checked.add(
                ("budget", "cost_per_day"),
                "expected a price table alongside a cost limit (budget.prices, or "
                f"{DEFAULT_PRICES} in the definition's directory), got none",
            )
        return
    model = checked.section("connector").get("model")
    if checked.ok("connector", "model") and checked.prices.price(model) is None:
        known = ", ".join(sorted(checked.prices.models))
        checked.add(
            ("budget", "cost_per_day"),
            f"expected a price for connector.model {received(model)} in "
            f"{files.shown(checked.prices.reference)} (it prices {known}), got none: "
            "a cost limit needs the model's price",
        )


def _allow_list(
    entry: Mapping[str, Any],
    where: PathParts,
    files: DiskFiles | StoredFiles,
    checked: _Checked,
    context_names: list[str] | None,
) -> AllowListSource:
    if checked.item_schema is not None:
        check_field_path(
            checked.item_schema.schema,
            tuple(entry["field"].split(".")),
            (*where, "field"),
            "item",
            checked.problems,
        )
    reference = entry.get("file")
    if reference is not None:
        text = _read_file(files, reference, (*where, "file"), checked.problems, _MAX_FILE_BYTES)
        if text is not None:
            try:
                allow_list_values(text, shown=files.shown(reference))
            except ConfigurationError as exc:
                checked.add((*where, "file"), f"expected an allow-list: {exc}")
    if "context" in entry and context_names is not None and entry["context"] not in context_names:
        offered = ", ".join(context_names) or "none"
        checked.add(
            (*where, "context"),
            f"expected the name of a context entry ({offered}), got {received(entry['context'])}",
        )
    return AllowListSource(
        field=entry["field"],
        values=tuple(entry["values"]) if "values" in entry else None,
        file=_on_disk(files, reference),
        context=entry.get("context"),
        reference=reference,
    )


def _build(checked: _Checked, path: Path, files: DiskFiles | StoredFiles) -> Instruction:
    """The Instruction for a document without problems: every field given, an absent
    optional one as its schema default, so that nothing past loading guesses a default."""
    document = checked.document
    assert checked.item_schema is not None
    assert checked.envelope_schema is not None
    schedule_doc = checked.section("schedule")
    connector_doc = checked.section("connector")
    output_doc = checked.section("output")
    guardrails_doc = checked.section("guardrails")
    retry_doc = checked.section("retry")
    prompt_doc = checked.section("prompt")
    return Instruction(
        id=document["id"],
        description=document["description"],
        schedule=Schedule(
            cron=schedule_doc["cron"],
            timezone=schedule_doc["timezone"],
            misfire_grace_seconds=field_value(
                schedule_doc, "misfire_grace_seconds", "schedule.misfire_grace_seconds"
            ),
            deadline_seconds=schedule_doc.get("deadline_seconds"),
        ),
        connector=ConnectorSpec(
            kind=ConnectorKind(connector_doc["kind"]),
            model=connector_doc["model"],
            max_output_tokens=connector_doc["max_output_tokens"],
            temperature=float(field_value(connector_doc, "temperature", "connector.temperature")),
            timeout_seconds=float(connector_doc["timeout_seconds"]),
            structured_output=field_value(
                connector_doc, "structured_output", "connector.structured_output"
            ),
            base_url=connector_doc.get("base_url"),
            base_url_env=connector_doc.get("base_url_env"),
            api_key_env=connector_doc.get("api_key_env"),
            max_tokens_field=connector_doc.get("max_tokens_field"),
            fixture=checked.fixture,
            stream=field_value(connector_doc, "stream", "connector.stream"),
            anthropic_version=connector_doc.get("anthropic_version"),
        ),
        prompt=PromptTemplates(system=prompt_doc["system"], user=prompt_doc["user"]),
        output=OutputSpec(
            envelope_schema_path=_schema_path(files, output_doc["envelope_schema"]),
            item_schema_path=_schema_path(files, output_doc["item_schema"]),
            items_path=parse_items_path(output_doc["items_path"]),
            rank_key=output_doc.get("rank_key"),
            envelope_schema=checked.envelope_schema,
            item_schema=checked.item_schema,
            framing=Framing(field_value(output_doc, "framing", "output.framing")),
        ),
        guardrails=GuardrailSpec(
            max_items=field_value(guardrails_doc, "max_items", "guardrails.max_items"),
            max_depth=field_value(guardrails_doc, "max_depth", "guardrails.max_depth"),
            max_string_length=field_value(
                guardrails_doc, "max_string_length", "guardrails.max_string_length"
            ),
            max_output_bytes=field_value(
                guardrails_doc, "max_output_bytes", "guardrails.max_output_bytes"
            ),
            coerce=field_value(guardrails_doc, "coerce", "guardrails.coerce"),
            allow_lists=tuple(checked.allow_lists),
            accept_repairs=AcceptRepairs(
                field_value(guardrails_doc, "accept_repairs", "guardrails.accept_repairs")
            ),
            max_quarantined=field_value(
                guardrails_doc, "max_quarantined", "guardrails.max_quarantined"
            ),
        ),
        context=MappingProxyType(checked.context),
        retry=RetryPolicy(
            attempts=retry_doc["attempts"],
            on=tuple(RetryOn(value) for value in retry_doc["on"]),
            length_budget_factor=float(
                field_value(retry_doc, "length_budget_factor", "retry.length_budget_factor")
            ),
            max_output_tokens_ceiling=retry_doc.get("max_output_tokens_ceiling"),
            reask_reasons=tuple(retry_doc.get("reask_reasons", ())),
        ),
        # A stored copy never says where a report goes: see load_stored.
        sinks=(
            tuple(_sink(entry, files.base) for entry in document.get("sinks", ()))
            if isinstance(files, DiskFiles)
            else ()
        ),
        # Nor whom it tells: notifications are sent from the operator's definitions.
        notify=(
            tuple(_notify(entry) for entry in document.get("notify", checked.notify_default or ()))
            if isinstance(files, DiskFiles)
            else ()
        ),
        source=path,
        # As written: defaults filled in would change the version of every definition
        # written before them.
        definition=MappingProxyType(dict(document)),
        definition_sha256=canonical_sha256(document),
        files=files,
        loaded_files=MappingProxyType(checked.loaded),
        budget=Budget(
            tokens_per_day=checked.section("budget").get("tokens_per_day"),
            cost_per_day=(
                None
                if checked.section("budget").get("cost_per_day") is None
                else float(checked.section("budget")["cost_per_day"])
            ),
            prices=checked.prices,
        ),
    )


def _sink(entry: Mapping[str, Any], base: Path) -> SinkSpec:
    kind = SinkKind(entry["kind"])
    return SinkSpec(
        kind=kind,
        path=base / entry["path"] if kind is SinkKind.JSON_FILE else None,
        url=entry.get("url"),
        url_env=entry.get("url_env"),
        token_env=entry.get("token_env"),
        timeout_seconds=float(field_value(entry, "timeout_seconds", "sinks[].timeout_seconds")),
        callable=entry.get("callable"),
    )


def _notify(entry: Mapping[str, Any]) -> NotifySpec:
    webhook = entry.get("webhook")
    email = entry.get("email")
    return NotifySpec(
        on=tuple(NotifyOn(word) for word in entry["on"]),
        webhook=None
        if webhook is None
        else SinkSpec(
            kind=SinkKind.WEBHOOK,
            url=webhook.get("url"),
            url_env=webhook.get("url_env"),
            token_env=webhook.get("token_env"),
            timeout_seconds=float(
                field_value(webhook, "timeout_seconds", "notify[].webhook.timeout_seconds")
            ),
        ),
        email=None
        if email is None
        else EmailSpec(
            to=tuple(email["to"]),
            sender=email["from"],
            smtp_host=email["smtp_host"],
            smtp_port=int(field_value(email, "smtp_port", "notify[].email.smtp_port")),
            starttls=bool(field_value(email, "starttls", "notify[].email.starttls")),
            username_env=email.get("username_env"),
            password_env=email.get("password_env"),
            timeout_seconds=float(
                field_value(email, "timeout_seconds", "notify[].email.timeout_seconds")
            ),
        ),
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
    item_ref: str | None,
    envelope_ref: str | None,
    problems: list[Problem],
    loaded: dict[str, str],
) -> tuple[ItemSchema | None, ItemSchema | None]:
    """The compiled item and envelope schemas (None for a reference that is None or
    unusable); the envelope may $ref the item by its $id. The text of each schema read
    goes into ``loaded`` (by the path as written)."""
    item_text = envelope_text = None
    if item_ref is not None:
        item_text = _read_file(
            files, item_ref, ("output", "item_schema"), problems, _MAX_FILE_BYTES
        )
        if item_text is not None:
            loaded[item_ref] = item_text
    if envelope_ref is not None:
        envelope_text = _read_file(
            files, envelope_ref, ("output", "envelope_schema"), problems, _MAX_FILE_BYTES
        )
        if envelope_text is not None:
            loaded[envelope_ref] = envelope_text
    item_schema = envelope_schema = None
    item_document: Any = None
    if item_text is not None and item_ref is not None:
        try:
            item_document = parse_json_text(item_text, what="schema", shown=files.shown(item_ref))
            item_schema = ItemSchema.compile(item_document, source=item_ref)
        except ConfigurationError as exc:
            problems.append(
                Problem(("output", "item_schema"), f"expected a valid JSON Schema, got: {exc}")
            )
    if envelope_text is not None and envelope_ref is not None and item_schema is not None:
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
