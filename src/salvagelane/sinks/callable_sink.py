"""A sink handing the report to a Python function named as ``module:function``."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from salvagelane.errors import ConfigurationError, SinkError

Deliver = Callable[[dict[str, Any]], object]
"""What a callable sink calls: one argument, the payload; the return value is ignored."""


class CallableSink:
    """Calls ``reference`` (``package.module:function`` or ``module:Class.method``).

    The module is imported at delivery, not at construction, so a definition naming
    a callable that only exists on the machine running the schedule still loads
    elsewhere. The function receives a deep copy of the payload: whatever it does to
    it cannot change the stored report or what the next sink receives.
    """

    kind: ClassVar[str] = "callable"

    __slots__ = ("_attributes", "_module", "_reference")

    def __init__(self, reference: str) -> None:
        module, colon, qualname = reference.partition(":")
        attributes = qualname.split(".")
        if not colon or not module or not all(attributes):
            raise ConfigurationError(
                f"callable sink: expected 'module:function', got {reference!r}"
            )
        self._reference = reference
        self._module = module
        self._attributes = tuple(attributes)

    @property
    def target(self) -> str:
        return self._reference

    def deliver(self, payload: Mapping[str, Any]) -> None:
        function = self._resolve()
        argument = copy.deepcopy(dict(payload))
        try:
            function(argument)
        except Exception as exc:
            raise SinkError(
                f"callable sink {self._reference}: the function raised {type(exc).__name__}: {exc}",
                target=self._reference,
            ) from exc

    def _resolve(self) -> Deliver:
        """The function, imported now; SinkError saying what is missing."""
        try:
            found: Any = importlib.import_module(self._module)
        except Exception as exc:
            raise SinkError(
                f"callable sink {self._reference}: expected an importable module "
                f"{self._module!r}, got {type(exc).__name__}: {exc}",
                target=self._reference,
            ) from exc
        for attribute in self._attributes:
            try:
                found = getattr(found, attribute)
            except AttributeError as exc:
                raise SinkError(
                    f"callable sink {self._reference}: expected {self._module!r} to have "
                    f"{'.'.join(self._attributes)!r}, got no attribute {attribute!r}",
                    target=self._reference,
                ) from exc
        if not callable(found):
            raise SinkError(
                f"callable sink {self._reference}: expected a callable, "
                f"got a {type(found).__name__}",
                target=self._reference,
            )
        function: Deliver = found
        return function

    def __repr__(self) -> str:
        return f"CallableSink({self._reference!r})"
