"""Price tables: what a model's tokens cost, for budgets and the cost figures.

A price table is a YAML (or JSON) file a definition names (``budget.prices``), or
:data:`DEFAULT_PRICES` beside the definition: one currency, and per model name the
price of a million input (prompt) and output (completion) tokens. It is read while the
definition loads and kept in the definition's stored snapshot, so a stored run knows
the prices it was run with. Validated against :data:`PRICE_TABLE_SCHEMA`; every problem
names the file, the path in it, what was expected and what was received.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

import jsonschema

from salvagelane.definitions.problems import format_path, received
from salvagelane.definitions.yaml_source import YamlProblem, parse_yaml

DEFAULT_PRICES = "prices.json"
"""The project-wide price table: a file of this name in a definition's directory (the
instructions directory) applies to every definition there that names none. Not
``*.yaml``: that would be read as a definition."""

PER_TOKENS = 1_000_000
"""Prices are per million tokens."""

_PRICE: dict[str, Any] = {
    "description": "A price per million tokens, in the table's currency.",
    "type": "number",
    "minimum": 0,
}

PRICE_TABLE_SCHEMA: Mapping[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "salvagelane price table",
    "type": "object",
    "additionalProperties": False,
    "required": ["currency", "models"],
    "properties": {
        "currency": {
            "description": "The currency every price is in (e.g. USD, EUR).",
            "type": "string",
            "minLength": 1,
        },
        "as_of": {
            "description": "When the prices were copied from the provider's price list.",
            "type": "string",
        },
        "source": {"description": "Where the prices come from.", "type": "string"},
        "models": {
            "description": "Per model name (as the definition's connector.model names it and "
            "as the provider reports it), its prices.",
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["input_per_million", "output_per_million"],
                "properties": {
                    "input_per_million": _PRICE,
                    "output_per_million": _PRICE,
                },
            },
        },
    },
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """The price of a million prompt (input) and completion (output) tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million
        ) / PER_TOKENS


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceTable:
    """A price table as loaded: ``reference`` is the file as the definition names it."""

    currency: str
    models: Mapping[str, ModelPrice] = field(default_factory=dict)
    reference: str = DEFAULT_PRICES

    def price(self, model: str | None) -> ModelPrice | None:
        return None if model is None else self.models.get(model)


class PriceTableProblem(Exception):
    """Why a price table's text is not one, and on which ``line`` of it (None: unknown).
    The message names no file: the caller does."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def at(self, shown: str) -> str:
        """``FILE line N: the problem``."""
        where = f"{shown} line {self.line}" if self.line else shown
        return f"{where}: {self.message}"


@cache
def _validator() -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(PRICE_TABLE_SCHEMA)
    return jsonschema.Draft202012Validator(PRICE_TABLE_SCHEMA)


_NOUNS = {"object": "a mapping", "string": "a string", "number": "a number"}


def _problem(error: jsonschema.exceptions.ValidationError) -> str:
    path = format_path(tuple(error.absolute_path))
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    keyword, value = error.validator, error.validator_value
    if keyword == "required" and isinstance(error.instance, Mapping):
        names = value if isinstance(value, list) else []
        missing = [name for name in names if name not in error.instance]
        return f"{path}: expected the field(s) {', '.join(missing)}, got nothing"
    if keyword == "additionalProperties" and isinstance(error.instance, Mapping):
        known = list(schema.get("properties", {}))
        extra = [name for name in error.instance if name not in known]
        return (
            f"{path}: expected only the fields {', '.join(known)}, got "
            f"{', '.join(received(name) for name in extra)}"
        )
    if keyword == "type":
        expected = _NOUNS.get(str(value), str(value))
        if value == "number":
            expected = "a number (a price per million tokens)"
        return f"{path}: expected {expected}, got {received(error.instance)}"
    if keyword == "minimum":
        return f"{path}: expected a number of at least {value}, got {received(error.instance)}"
    if keyword == "minLength":
        return f"{path}: expected a non-empty string, got {received(error.instance)}"
    if keyword == "minProperties":
        return f"{path}: expected at least one model, got none"
    return f"{path}: {' '.join(error.message.split())}"


def parse_price_table(text: str, *, reference: str) -> PriceTable:
    """The price table ``text`` holds (YAML or JSON); PriceTableProblem saying where in
    it (path and line), what was expected and what was received otherwise."""
    try:
        document, lines = parse_yaml(text)
    except YamlProblem as exc:
        raise PriceTableProblem(exc.describe(), exc.line) from exc
    if document is None:
        raise PriceTableProblem("expected a mapping with currency and models, got an empty file")
    errors = sorted(_validator().iter_errors(document), key=lambda e: list(map(str, e.path)))
    if errors:
        first = errors[0]
        line = lines.get(tuple(first.absolute_path))
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise PriceTableProblem(_problem(first) + more, line)
    models = {
        name: ModelPrice(
            input_per_million=float(prices["input_per_million"]),
            output_per_million=float(prices["output_per_million"]),
        )
        for name, prices in document["models"].items()
    }
    return PriceTable(
        currency=document["currency"], models=MappingProxyType(models), reference=reference
    )
