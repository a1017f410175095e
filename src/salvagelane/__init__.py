"""salvagelane: salvage every intact item from broken LLM output; quarantine the rest.

The library surface::

    from salvagelane import Guardrails, SalvagePolicy, load_item_schema, salvage

    policy = SalvagePolicy(items_path="data.items", item_schema=load_item_schema(path))
    result = salvage(raw_text, policy, finish_reason="length")
    result.status, result.items, result.quarantined

Every name is imported on first use (PEP 562): ``import salvagelane`` itself costs
nothing, so the command line, which imports this package first, starts without
paying for jsonschema (the salvage core) or the package metadata (``__version__``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and editors see; at run time __getattr__ imports on demand
    from salvagelane.core import (
        AcceptedItem,
        AcceptRepairs,
        Coercion,
        CorrectionSignal,
        EnvelopeIssue,
        Guardrails,
        ItemSchema,
        ItemsPath,
        QuarantinedItem,
        Reason,
        Repair,
        SalvagePolicy,
        SalvageResult,
        Span,
        Status,
        salvage,
    )
    from salvagelane.errors import (
        AllowListError,
        ConfigurationError,
        InputError,
        ItemsPathError,
        SalvagelaneError,
        SchemaError,
    )
    from salvagelane.policy_files import load_allow_list, load_item_schema

    __version__: str

# Name -> the module that defines it. The one list of what the package exports.
_EXPORTS: dict[str, str] = {
    # Salvaging: the entry point, what it takes, what it returns.
    "salvage": "salvagelane.core",
    "SalvagePolicy": "salvagelane.core",
    "Guardrails": "salvagelane.core",
    "ItemSchema": "salvagelane.core",
    "ItemsPath": "salvagelane.core",
    "SalvageResult": "salvagelane.core",
    "Status": "salvagelane.core",
    "AcceptedItem": "salvagelane.core",
    "QuarantinedItem": "salvagelane.core",
    "Reason": "salvagelane.core",
    "CorrectionSignal": "salvagelane.core",
    "Coercion": "salvagelane.core",
    "AcceptRepairs": "salvagelane.core",
    "Repair": "salvagelane.core",
    "EnvelopeIssue": "salvagelane.core",
    "Span": "salvagelane.core",
    # Reading a schema or an allow-list from a file.
    "load_item_schema": "salvagelane.policy_files",
    "load_allow_list": "salvagelane.policy_files",
    # What those raise: every error is a SalvagelaneError; a policy, schema or
    # allow-list that cannot be used as given is a ConfigurationError.
    "SalvagelaneError": "salvagelane.errors",
    "ConfigurationError": "salvagelane.errors",
    "SchemaError": "salvagelane.errors",
    "AllowListError": "salvagelane.errors",
    "ItemsPathError": "salvagelane.errors",
    "InputError": "salvagelane.errors",
}

__all__ = [
    "AcceptRepairs",
    "AcceptedItem",
    "AllowListError",
    "Coercion",
    "ConfigurationError",
    "CorrectionSignal",
    "EnvelopeIssue",
    "Guardrails",
    "InputError",
    "ItemSchema",
    "ItemsPath",
    "ItemsPathError",
    "QuarantinedItem",
    "Reason",
    "Repair",
    "SalvagePolicy",
    "SalvageResult",
    "SalvagelaneError",
    "SchemaError",
    "Span",
    "Status",
    "__version__",
    "load_allow_list",
    "load_item_schema",
    "salvage",
]

_UNKNOWN_VERSION = "0+unknown"
"""``__version__`` when salvagelane runs from a source tree that was never installed
(``PYTHONPATH=src``): there is no package metadata to read it from."""


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'salvagelane' has no attribute {name!r}")
    globals()[name] = value  # looked up once: the next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    # importlib.metadata costs tens of milliseconds to import: only when asked.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("salvagelane")
    except PackageNotFoundError:
        return _UNKNOWN_VERSION
