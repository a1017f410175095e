"""Item schemas: compiled once, format-checked, never fetching a remote ``$ref``.

Two validators share the work (docs/adr/0010-fast-verdict-reference-explanation.md):
jsonschema-rs gives the verdict, and only for an item it rejects does ``jsonschema``,
the reference, say why. Validation errors become correction signals a retry prompt
can use: ``schema at $.wsjf.score: expected number, received "high"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
from referencing.jsonschema import DRAFT202012, UnknownDialect, specification_with

from salvagelane.core.canonical import canonical_sha256
from salvagelane.core.records import CorrectionSignal, JSONValue
from salvagelane.core.schema_routing import (
    batch_validator,
    fast_validator,
    format_checker,
    subschemas,
)
from salvagelane.core.strict import describe, member_path
from salvagelane.errors import SchemaError

_MAX_DETAILS = 3
_REQUIRED_MESSAGE = re.compile(r"^'(.*)' is a required property$")


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    # referencing's exceptions are attrs classes, which mypy cannot see through.
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemSchema:
    """A JSON Schema compiled into two validators, with the hash that identifies it.

    ``fast`` (jsonschema-rs) gives the verdict; ``validator`` (jsonschema) explains a
    rejection. ``fast`` is None when the schema is validated by jsonschema alone, and
    ``reference_only`` then says why (schema_routing.py). ``batch`` is jsonschema-rs
    over a list of items, for asking about all the items of a valid report at once;
    None with ``fast``, or when jsonschema-rs cannot compile the list's schema.
    """

    schema: Mapping[str, Any]
    sha256: str
    validator: Any  # a jsonschema Validator instance; its protocol is not generic
    fast: Any = None  # a jsonschema_rs Validator, or None
    reference_only: str = ""
    batch: Any = None  # a jsonschema_rs Validator of a list of items, or None

    @classmethod
    def compile(
        cls,
        schema: Mapping[str, Any],
        *,
        source: str = "schema",
        resources: Iterable[Mapping[str, Any]] = (),
    ) -> ItemSchema:
        """Check and compile ``schema``; ``resources`` are schemas it may ``$ref`` by ``$id``."""
        if not isinstance(schema, Mapping):
            raise SchemaError(f"{source}: a JSON Schema must be an object, got {describe(schema)}")
        _refuse_unknown_dialects(schema, source)
        validator_class = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        try:
            validator_class.check_schema(dict(schema))
        except jsonschema.exceptions.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise SchemaError(
                f"{source}: not a valid JSON Schema at {where}: {exc.message}"
            ) from exc
        registry, bundled = _registry(schema, resources, source)
        validator = validator_class(schema, registry=registry, format_checker=format_checker())
        fast, reference_only = fast_validator(schema, bundled)
        digest = canonical_sha256(schema, allow_nan=True)
        return cls(
            schema=schema,
            sha256=digest,
            validator=validator,
            fast=fast,
            reference_only=reference_only,
            batch=None if fast is None else batch_validator(schema, bundled),
        )

    def narrowed(self, schema: Mapping[str, Any]) -> ItemSchema:
        """Another schema over this one's registry and format checks (a part of this
        schema, such as the envelope without its items), judged by the reference alone."""
        return ItemSchema(
            schema=schema,
            sha256=canonical_sha256(schema, allow_nan=True),
            validator=self.validator.evolve(schema=schema),
            reference_only="a part of a compiled schema",
        )

    def violations(self, instance: JSONValue, *, limit: int = 20) -> tuple[CorrectionSignal, ...]:
        """A correction signal per violation (at most ``limit``), most relevant first."""
        try:
            errors = sorted(
                self.validator.iter_errors(instance), key=jsonschema.exceptions.relevance
            )
        except referencing.exceptions.Unresolvable as exc:
            raise SchemaError(f"schema reference cannot be resolved: {exc}") from exc
        return tuple(_signal_for(error) for error in errors[:limit])

    def surely_valid(self, instance: JSONValue) -> bool:
        """True when the fast validator finds ``instance`` valid (final, as in
        :meth:`check`); False is no verdict."""
        if self.fast is None:
            return False
        try:
            return bool(self.fast.is_valid(instance))
        except ValueError:  # a value jsonschema-rs cannot take
            return False

    def is_valid(self, instance: JSONValue) -> bool:
        """The verdict of :meth:`check` without its explanation: the fast validator's
        "valid", else the reference's verdict, which stops at the first error."""
        if self.surely_valid(instance):
            return True
        try:
            return bool(self.validator.is_valid(instance))
        except referencing.exceptions.Unresolvable as exc:
            raise SchemaError(f"schema reference cannot be resolved: {exc}") from exc

    def check(self, instance: JSONValue) -> CorrectionSignal | None:
        """The best correction signal for ``instance``, or None when it validates.

        The fast validator's "valid" is final. Its "invalid" is explained by the
        reference; should the reference find nothing to explain (a disagreement the
        test suite did not catch), the reference's verdict stands, as before jsonschema-rs.
        """
        if self.surely_valid(instance):
            return None
        return self.explain(instance)

    def explain(self, instance: JSONValue) -> CorrectionSignal | None:
        """The reference validator's correction signal for ``instance``, or None."""
        try:
            errors = sorted(
                self.validator.iter_errors(instance), key=jsonschema.exceptions.relevance
            )
        except referencing.exceptions.Unresolvable as exc:
            raise SchemaError(f"schema reference cannot be resolved: {exc}") from exc
        if not errors:
            return None
        best = jsonschema.exceptions.best_match(errors)
        assert best is not None
        signal = _signal_for(best)
        others = [_signal_for(e) for e in errors if e is not best][:_MAX_DETAILS]
        if others:
            more = "; ".join(o.message("schema") for o in others)
            extra = len(errors) - 1 - len(others)
            if extra > 0:
                more += f"; and {extra} more"
            signal = CorrectionSignal(
                code=signal.code,
                path=signal.path,
                expected=signal.expected,
                received=signal.received,
                detail=f"also: {more}",
            )
        return signal


_ROOT_URI = "urn:salvagelane:schema-under-compilation"


def _refuse_unknown_dialects(schema: Mapping[str, Any], source: str) -> None:
    """A ``$schema`` must name a dialect known here: its meta-schema is never fetched.

    Unrefused, both validators would read the schema as some default draft and ignore
    the vocabularies its custom meta-schema declares.
    """
    for where, node in subschemas(schema):
        dialect = node.get("$schema")
        if not isinstance(dialect, str):
            continue
        try:
            specification_with(dialect)
        except UnknownDialect as exc:
            raise SchemaError(
                f"{source}: $schema {dialect!r} at {where or '/'} is not a JSON Schema dialect "
                "salvagelane knows, and it never fetches a meta-schema: declare "
                "'https://json-schema.org/draft/2020-12/schema'"
            ) from exc


def _registry(
    schema: Mapping[str, Any], resources: Iterable[Mapping[str, Any]], source: str
) -> tuple[referencing.Registry[Any], list[tuple[str, Mapping[str, Any]]]]:
    """A registry that can never fetch, in which every ``$ref`` was resolved once already.

    Resolving at load time turns a remote or dangling reference into a clear
    configuration error instead of an exception in the middle of a run. The bundled
    resources come back by URI too, for the fast validator's registry.
    """
    registry: referencing.Registry[Any] = referencing.Registry(
        retrieve=_refuse_retrieval  # type: ignore[call-arg]
    )
    documents: list[tuple[str, Mapping[str, Any]]] = []
    for index, contents in enumerate(resources):
        if not isinstance(contents, Mapping):
            raise SchemaError(f"{source}: bundled schema #{index + 1} is not an object")
        _refuse_unknown_dialects(contents, f"{source}: bundled schema #{index + 1}")
        resource = referencing.Resource.from_contents(contents, default_specification=DRAFT202012)
        uri = resource.id()
        if not uri:
            raise SchemaError(f"{source}: bundled schema #{index + 1} has no $id to $ref it by")
        registry = registry.with_resource(uri=uri, resource=resource)
        documents.append((uri, contents))
    bundled = list(documents)
    root = referencing.Resource.from_contents(schema, default_specification=DRAFT202012)
    root_uri = root.id() or _ROOT_URI
    registry = registry.with_resource(uri=root_uri, resource=root).crawl()
    documents.append((root_uri, schema))
    refs: dict[int, list[tuple[Any, str]]] = {}
    for base, contents in documents:
        for pointer, ref, scope, node in _iter_refs(contents, base):
            try:
                target = registry.resolver(base_uri=scope).lookup(ref).contents
                if pointer.endswith("/$ref"):
                    refs.setdefault(id(node), []).append((target, pointer))
            except referencing.exceptions.Unresolvable as exc:
                hint = (
                    "it points to nothing in the schema"
                    if ref.startswith("#")
                    else "it points outside the schema and its bundled schemas, and "
                    "salvagelane never fetches remote schemas: bundle it under $defs"
                )
                where = pointer or "/"
                raise SchemaError(
                    f"{source}: $ref {ref!r} at {where} cannot be resolved; {hint}"
                ) from exc
    looping = _endless_ref(documents, refs)
    if looping:
        raise SchemaError(
            f"{source}: $ref at {looping} leads back to where it started without going "
            "into the item: checking any item against it would never end"
        )
    return registry, bundled


_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def _endless_ref(
    documents: Iterable[tuple[str, Mapping[str, Any]]],
    refs: Mapping[int, list[tuple[Any, str]]],
) -> str:
    """The pointer of a ``$ref`` that closes a loop at one place in the instance, or "".

    ``$ref``, ``allOf``, ``not``... apply a subschema to the same value, so a cycle of
    them alone never ends (``jsonschema`` raises RecursionError mid-run, jsonschema-rs
    says "valid"). A cycle through ``properties`` or ``items`` ends with the item.
    """

    def in_place(node: Any) -> Iterator[tuple[Any, str]]:
        if not isinstance(node, Mapping):
            return
        yield from refs.get(id(node), ())
        for key in _IN_PLACE_ONE:
            if isinstance(node.get(key), Mapping):
                yield node[key], ""
        for key in _IN_PLACE_MANY:
            if isinstance(node.get(key), list):
                yield from ((sub, "") for sub in node[key])
        if isinstance(node.get("dependentSchemas"), Mapping):
            yield from ((sub, "") for sub in node["dependentSchemas"].values())

    done: set[int] = set()
    for _, contents in documents:
        for _, start in subschemas(contents):
            if id(start) in done:
                continue
            # Depth-first, iteratively: ``on_path`` holds the schemas being expanded.
            on_path: dict[int, str] = {id(start): ""}
            stack: list[tuple[Any, Iterator[tuple[Any, str]]]] = [(start, in_place(start))]
            while stack:
                _, successors = stack[-1]
                step = next(successors, None)
                if step is None:
                    node, _ = stack.pop()
                    on_path.pop(id(node), None)
                    done.add(id(node))
                    continue
                target, via = step
                if id(target) in on_path:
                    return via or "/"
                if id(target) not in done and isinstance(target, Mapping):
                    on_path[id(target)] = via
                    stack.append((target, in_place(target)))
    return ""


def _iter_refs(schema: Any, base: str) -> Iterator[tuple[str, str, str, Mapping[str, Any]]]:
    """Every ``$ref`` with its JSON pointer, the base URI it resolves against, and the
    schema that holds it."""
    stack: list[tuple[str, Any, str]] = [("", schema, base)]
    while stack:
        pointer, node, scope = stack.pop()
        if isinstance(node, Mapping):
            node_id = node.get("$id")
            if isinstance(node_id, str) and pointer:
                scope = urljoin(scope, node_id)
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield f"{pointer}/{key}", value, scope, node
                elif key not in ("const", "enum", "examples", "default"):
                    stack.append((f"{pointer}/{key}", value, scope))
        elif isinstance(node, list):
            stack.extend((f"{pointer}/{i}", v, scope) for i, v in enumerate(node))


def _path_of(error: jsonschema.exceptions.ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path = f"{path}[{part}]" if isinstance(part, int) else member_path(path, str(part))
    return path


def _signal_for(error: jsonschema.exceptions.ValidationError) -> CorrectionSignal:
    keyword = str(error.validator)
    value: Any = error.validator_value
    instance = error.instance
    path = _path_of(error)
    received = describe(instance)
    expected = error.message
    if keyword == "type":
        expected = value if isinstance(value, str) else " or ".join(value)
    elif keyword == "enum":
        expected = "one of " + describe(value, limit=200)
    elif keyword == "const":
        expected = describe(value)
    elif keyword == "required" and isinstance(instance, dict):
        # jsonschema yields one error per missing property, named in its message.
        named = _REQUIRED_MESSAGE.match(error.message)
        missing = [name for name in value if name not in instance]
        name = named.group(1) if named else (missing[0] if missing else "?")
        return CorrectionSignal(
            code="required",
            path=member_path(path, name),
            expected=f"property {name!r} (required)",
            received="nothing",
        )
    elif keyword in ("additionalProperties", "unevaluatedProperties") and isinstance(
        instance, dict
    ):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extras = [k for k in instance if k not in allowed]
        name = extras[0] if extras else "?"
        return CorrectionSignal(
            code=keyword,
            path=member_path(path, name),
            expected="no such property (not in the schema)",
            received=describe(instance.get(name)),
        )
    elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
        expected = f"a number {op[keyword]} {value}"
    elif keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        expected = f"a string of {bound} {value} characters"
        if isinstance(instance, str):
            received = f"{len(instance)} characters"
    elif keyword in ("minItems", "maxItems"):
        bound = "at least" if keyword == "minItems" else "at most"
        expected = f"{bound} {value} items"
        if isinstance(instance, list):
            received = f"{len(instance)} items"
    elif keyword == "pattern":
        expected = f"a string matching {value!r}"
    elif keyword == "format":
        expected = f"a valid {value}"
    return CorrectionSignal(code=keyword, path=path, expected=expected, received=received)
