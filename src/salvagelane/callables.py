"""Resolving a ``module:function`` reference to the callable it names.

Definitions name code this way (context callables, callable sinks) and so does the
scheduler (its job target). Resolving imports the module, so it happens only where that
code is meant to run: each caller decides when, and says a failure in its own words
(:class:`~salvagelane.errors.UnresolvedCallableError` tells it which step failed).
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable
from typing import Any

from salvagelane.errors import UnresolvedCallableError


class CallableProblem(enum.StrEnum):
    """Which step of resolving a reference failed."""

    MODULE = "module"  # importing the module raised (the exception is chained)
    ATTRIBUTE = "attribute"  # a name of the attribute path is missing (chained)
    NOT_CALLABLE = "not_callable"  # the value found cannot be called


def split_reference(reference: str) -> tuple[str, tuple[str, ...]]:
    """The module and the attribute path of ``module:attr.attr``, as written."""
    module, _, qualname = reference.partition(":")
    return module, tuple(qualname.split("."))


def resolve_callable(reference: str) -> Callable[..., Any]:
    """The callable ``reference`` (``package.module:function`` or ``module:Class.method``)
    names, its module imported now; UnresolvedCallableError saying which step failed.

    Any exception raised while importing the module is a failure of that step: a module
    is someone's code, and what it raises at import says only that it cannot be used.
    """
    module_name, attributes = split_reference(reference)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise UnresolvedCallableError(
            reference, problem=CallableProblem.MODULE, part=module_name
        ) from exc
    for attribute in attributes:
        try:
            found = getattr(found, attribute)
        except AttributeError as exc:
            raise UnresolvedCallableError(
                reference, problem=CallableProblem.ATTRIBUTE, part=attribute
            ) from exc
    if not callable(found):
        raise UnresolvedCallableError(
            reference, problem=CallableProblem.NOT_CALLABLE, part=type(found).__name__
        )
    function: Callable[..., Any] = found
    return function
