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


class SchemaError(ConfigurationError):
    """An item or envelope JSON Schema cannot be loaded or is not a valid schema."""


class AllowListError(ConfigurationError):
    """An allow-list cannot be read or is not well formed."""


class ItemsPathError(ConfigurationError):
    """The dotted items path is not well formed."""


class InputError(SalvagelaneError):
    """Raw input could not be read at all (not: could not be salvaged)."""
