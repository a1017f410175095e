"""A sink handing the report to a Python function named as ``module:function``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from salvagelane.callables import CallableProblem, resolve_callable
from salvagelane.errors import ConfigurationError, SinkError, UnresolvedCallableError

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
            function: Deliver = resolve_callable(self._reference)
        except UnresolvedCallableError as exc:
            if exc.problem == CallableProblem.MODULE:
                cause = exc.__cause__
                problem = (
                    f"expected an importable module {self._module!r}, "
                    f"got {type(cause).__name__}: {cause}"
                )
            elif exc.problem == CallableProblem.ATTRIBUTE:
                problem = (
                    f"expected {self._module!r} to have {'.'.join(self._attributes)!r}, "
                    f"got no attribute {exc.part!r}"
                )
            else:
                problem = f"expected a callable, got a {exc.part}"
            raise SinkError(
                f"callable sink {self._reference}: {problem}", target=self._reference
            ) from (exc.__cause__ or exc)
        return function

    def __repr__(self) -> str:
        return f"CallableSink({self._reference!r})"
