"""Prompt templates: the Jinja2 sandbox, template checks, rendering and the output contract.

Templates render in :class:`~salvagelane.definitions.sandbox.BoundedSandbox`: Jinja2's
immutable sandbox with limits on what a render may build, how long it may take and how
large the prompt may be (:data:`RENDER_LIMITS`). Over a limit, rendering stops with a
DefinitionError, in ``check`` as in ``run``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from types import TracebackType
from typing import Any

import jinja2
import jinja2.meta

from salvagelane.core import Framing
from salvagelane.core.framing import envelope_without_items
from salvagelane.definitions.model import Instruction, RenderedPrompt
from salvagelane.definitions.problems import PathParts, Problem, fail, format_path, quoted
from salvagelane.definitions.sandbox import (
    RENDER_LIMITS,
    BoundedSandbox,
    RenderLimitError,
    RenderLimits,
    bounded,
)
from salvagelane.errors import DefinitionError

__all__ = [
    "RENDER_LIMITS",
    "UNCERTAINTY_SENTENCE",
    "RenderLimits",
    "output_contract",
    "placeholder",
    "preview_prompt",
    "render_prompt",
    "template_problems",
]

UNCERTAINTY_SENTENCE = "If uncertain, emit fewer well-formed items rather than more."


# --- Templates ---------------------------------------------------------------------------


@cache
def _template_environment() -> BoundedSandbox:
    return BoundedSandbox(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def template_problems(name: str, source: str, context_names: Iterable[str]) -> list[Problem]:
    environment = _template_environment()
    path: PathParts = ("prompt", name)
    try:
        tree = environment.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return [
            Problem(
                path,
                f"expected a valid Jinja2 template, got a syntax error at template line "
                f"{exc.lineno}: {exc.message}",
            )
        ]
    known = set(context_names) | set(environment.globals)
    unknown = sorted(jinja2.meta.find_undeclared_variables(tree) - known)
    if unknown:
        offered = ", ".join(sorted(context_names)) or "none"
        return [
            Problem(
                path,
                f"expected only variables defined in context ({offered}), "
                f"got undefined {quoted(unknown)}",
            )
        ]
    return []


def _template_line(traceback: TracebackType | None) -> int | None:
    line = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == "<template>":
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


# --- Prompt ----------------------------------------------------------------------------------


def output_contract(instruction: Instruction) -> str:
    """The text appended to the system prompt: what the reply must look like."""
    output = instruction.output
    cap = instruction.guardrails.max_items
    item_schema = json.dumps(output.item_schema.schema, indent=2, ensure_ascii=False)
    lines = ["Output contract:"]
    if output.framing is Framing.LINES:
        lines += [
            "Reply in JSON Lines and nothing else: one JSON object per line, no text before, "
            "between or after them, no code fences, no blank lines.",
        ]
        if output.items_path:
            envelope = envelope_without_items(output.envelope_schema.schema, output.items_path)
            lines += [
                "The first line is the report's envelope, without "
                f'"{output.items_path_text}". It must satisfy this JSON Schema:',
                json.dumps(envelope, indent=2, ensure_ascii=False),
            ]
        lines += ["Every other line is one item. Each item must satisfy this JSON Schema:"]
    elif output.items_path:
        envelope_schema = json.dumps(output.envelope_schema.schema, indent=2, ensure_ascii=False)
        lines += [
            "Reply with exactly one JSON object and nothing else: no text before or after it, "
            "no code fences.",
            "The reply must satisfy this JSON Schema:",
            envelope_schema,
            f'The items are the array at "{output.items_path_text}". '
            "Each item must satisfy this JSON Schema:",
        ]
    else:
        lines += [
            "Reply with exactly one JSON array of items and nothing else: no text before or "
            "after it, no code fences.",
            "Each item must satisfy this JSON Schema:",
        ]
    lines += [
        item_schema,
        (
            f'Emit at most {cap} items, ranked by "{output.rank_key}", smallest first.'
            if output.rank_key
            else f"Emit at most {cap} items, most important first."
        ),
        UNCERTAINTY_SENTENCE,
    ]
    return "\n".join(lines)


def render_prompt(
    instruction: Instruction, context: Mapping[str, Any], *, limits: RenderLimits = RENDER_LIMITS
) -> RenderedPrompt:
    """Render both templates with ``context`` (sandboxed, strict undefined, within
    ``limits``) and append the output contract to the system prompt. Template errors and
    a render over a limit raise DefinitionError."""
    try:
        return _render(instruction, context, limits)
    except _UnresolvedUsed as exc:  # only check puts placeholders in a context
        raise fail(
            instruction, exc.where, f"expected resolved context values, got a placeholder: {exc}"
        ) from exc


def placeholder(name: str, target: str) -> Any:
    """What ``check`` puts in the context for a callable it does not run: renders as
    nothing, has every attribute and item (itself) and no items to iterate; an operation
    that needs its value (``x + 1``) stops the preview (see :func:`preview_prompt`)."""
    return _Unresolved(
        hint=f"the value of {name!r}, from {target}",
        name=name,
        exc=_UnresolvedUsed,
    )


def preview_prompt(
    instruction: Instruction, context: Mapping[str, Any], *, limits: RenderLimits = RENDER_LIMITS
) -> str | None:
    """Render as :func:`render_prompt` does, with placeholders (:func:`placeholder`) in
    ``context``; None when it rendered, else why the placeholders stopped it. A problem
    of the template itself raises DefinitionError."""
    try:
        _render(instruction, context, limits)
    except _UnresolvedUsed as exc:
        line = _template_line(exc.__traceback__)
        at = f" at template line {line}" if line else ""
        return f"{format_path(exc.where)}{at} needs {exc.message}"
    return None


class _UnresolvedUsed(jinja2.UndefinedError):
    """A placeholder's value was needed."""

    where: PathParts = ()


class _Unresolved(jinja2.ChainableUndefined):
    __slots__ = ()


def _render(
    instruction: Instruction, context: Mapping[str, Any], limits: RenderLimits
) -> RenderedPrompt:
    rendered: dict[str, str] = {}
    environment = _template_environment()
    written = 0
    with bounded(limits):
        for name in ("system", "user"):
            source = getattr(instruction.prompt, name)
            where: PathParts = ("prompt", name)
            try:
                template = environment.from_string(source)
                parts: list[str] = []
                for part in template.generate(dict(context)):
                    # Characters: never more than the UTF-8 bytes the cap counts below.
                    written += len(part)
                    if written > limits.max_prompt_bytes:
                        raise fail(instruction, where, _over_cap(limits))
                    parts.append(part)
                rendered[name] = "".join(parts)
            except DefinitionError:
                raise
            except jinja2.TemplateSyntaxError as exc:
                raise fail(
                    instruction,
                    where,
                    f"expected a valid Jinja2 template, got a syntax error at template line "
                    f"{exc.lineno}: {exc.message}",
                ) from exc
            except _UnresolvedUsed as exc:
                exc.where = where
                raise
            except RenderLimitError as exc:
                line = _template_line(exc.__traceback__)
                at = f" at template line {line}:" if line else ":"
                raise fail(
                    instruction, where, f"expected a prompt within the render limits, got{at} {exc}"
                ) from exc
            except jinja2.UndefinedError as exc:
                line = _template_line(exc.__traceback__)
                at = f" at template line {line}" if line else ""
                raise fail(
                    instruction,
                    where,
                    f"expected only defined variables and attributes, got{at}: {exc.message}",
                ) from exc
            except Exception as exc:
                line = _template_line(exc.__traceback__)
                at = f" at template line {line}" if line else ""
                raise fail(
                    instruction,
                    where,
                    f"expected a template that renders, got{at} {type(exc).__name__}: {exc}",
                ) from exc
    system = rendered["system"].rstrip() + "\n\n" + output_contract(instruction)
    size = len(system.encode("utf-8", "surrogatepass")) + len(
        rendered["user"].encode("utf-8", "surrogatepass")
    )
    if size > limits.max_prompt_bytes:
        raise fail(instruction, ("prompt",), _over_cap(limits, size))
    return RenderedPrompt(system=system, user=rendered["user"])


def _over_cap(limits: RenderLimits, size: int | None = None) -> str:
    got = f"{size} bytes" if size is not None else f"more than {limits.max_prompt_bytes} bytes"
    return (
        f"expected a prompt within the render limits, got a prompt of {got} "
        f"(the limit is {limits.max_prompt_bytes} bytes for the system and user prompts "
        "together, output contract included)"
    )
