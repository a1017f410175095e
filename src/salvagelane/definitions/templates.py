"""Prompt templates: the Jinja2 sandbox, template checks, rendering and the output contract."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from types import TracebackType
from typing import Any

import jinja2
import jinja2.meta
import jinja2.sandbox

from salvagelane.definitions.model import Instruction, RenderedPrompt
from salvagelane.definitions.problems import PathParts, Problem, fail, quoted

UNCERTAINTY_SENTENCE = "If uncertain, emit fewer well-formed items rather than more."


# --- Templates ---------------------------------------------------------------------------


@cache
def _template_environment() -> jinja2.sandbox.SandboxedEnvironment:
    return jinja2.sandbox.SandboxedEnvironment(
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
    if output.items_path:
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
        f'Emit at most {cap} items, ranked by "{output.rank_key}", smallest first.',
        UNCERTAINTY_SENTENCE,
    ]
    return "\n".join(lines)


def render_prompt(instruction: Instruction, context: Mapping[str, Any]) -> RenderedPrompt:
    """Render both templates with ``context`` (sandboxed, strict undefined) and append
    the output contract to the system prompt. Template errors raise DefinitionError."""
    rendered: dict[str, str] = {}
    environment = _template_environment()
    for name in ("system", "user"):
        source = getattr(instruction.prompt, name)
        where: PathParts = ("prompt", name)
        try:
            rendered[name] = environment.from_string(source).render(dict(context))
        except jinja2.TemplateSyntaxError as exc:
            raise fail(
                instruction,
                where,
                f"expected a valid Jinja2 template, got a syntax error at template line "
                f"{exc.lineno}: {exc.message}",
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
    return RenderedPrompt(system=system, user=rendered["user"])
