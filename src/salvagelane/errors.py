"""The one exception hierarchy of salvagelane.

Foreign exceptions (json, jsonschema, OS errors) are translated once, at the
boundary where they happen, with ``raise ... from exc``. Messages say what was
wrong, where, and what was expected.
"""

from __future__ import annotations


class SalvagelaneError(Exception):
    """Base class for every error salvagelane raises on purpose."""


class ConfigurationError(SalvagelaneError):
    """A definition, schema, allow-list or option is unusable as given."""


class DefinitionError(ConfigurationError):
    """An instruction definition is unusable.

    The message names the file, the field path and what was expected, e.g.
    ``instructions/x.yaml: connector.kind: expected one of "openai", "anthropic",
    "replay", got "gpt"``. ``paths`` holds the dotted field paths at fault.
    """

    def __init__(self, message: str, *, source: str | None = None, paths: tuple[str, ...] = ()):
        super().__init__(message)
        self.source = source
        self.paths = paths


class SchemaError(ConfigurationError):
    """An item or envelope JSON Schema cannot be loaded or is not a valid schema."""


class AllowListError(ConfigurationError):
    """An allow-list cannot be read or is not well formed."""


class ItemsPathError(ConfigurationError):
    """The dotted items path is not well formed."""


class InputError(SalvagelaneError):
    """Raw input could not be read at all (not: could not be salvaged)."""
