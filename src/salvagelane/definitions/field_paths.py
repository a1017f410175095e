"""Field paths of a definition checked against the report's schemas: the rank key and
allow-list fields against the item schema, the items path against the envelope schema.

Only what a schema provably says is checked: a walk stops at anything it cannot follow
(``$ref``, combinators), and the schema's validator has the last word on an item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from salvagelane.definitions.problems import PathParts, Problem


def check_field_path(
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


_UNFOLLOWED = ("$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "if", "patternProperties")


def items_path_finding(
    schema: Mapping[str, Any], items_path: Sequence[str]
) -> tuple[bool, str] | None:
    """What is wrong with ``items_path`` as the envelope schema sees it: ``(True, why)``
    when the schema provably has no array there (a key its closed properties lack, a
    property typed as something else), ``(False, why)`` when it merely does not define
    one (open properties), None when it does or the check cannot follow ($ref,
    combinators)."""
    node: Any = schema
    for depth, part in enumerate(items_path):
        if not isinstance(node, Mapping) or any(key in node for key in _UNFOLLOWED):
            return None
        properties = node.get("properties", {})
        if not isinstance(properties, Mapping):
            return None
        if part not in properties:
            dotted = json.dumps(".".join(items_path[: depth + 1]))
            defined = ", ".join(properties) or "none"
            if node.get("additionalProperties") is False:
                return True, f"expected a field of the envelope schema ({defined}), got {dotted}"
            return False, (
                f"the envelope schema does not define {dotted} (it defines {defined}): the "
                "model is shown that schema, and nothing in it asks for the items there"
            )
        node = properties[part]
    if not isinstance(node, Mapping) or any(key in node for key in _UNFOLLOWED):
        return None
    kind = node.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds is None or "array" in kinds:
        return None
    given = json.dumps(".".join(items_path)) if items_path else '"" (the report itself)'
    return True, (
        f"expected the path of an array in the envelope schema, got {given}, which it "
        f"types as {', '.join(map(str, kinds))}"
    )


def check_items_path(
    schema: Mapping[str, Any], items_path: Sequence[str], problems: list[Problem]
) -> None:
    finding = items_path_finding(schema, items_path)
    if finding is not None and finding[0]:
        problems.append(Problem(("output", "items_path"), finding[1]))
