"""Instruction definitions (``instructions/*.yaml``): load, validate, resolve, render.

The I/O shell around a definition. Loading parses the YAML safely, validates it
against ``schemas/instruction.schema.json`` and checks every cross-reference
(schema files, allow-list files, context names, cron, time zone, template
variables) so that a broken definition fails here, with a message naming the
file, the field path and what was expected, never in the middle of a run.

YAML is read with the scalars of YAML 1.2's core schema: only ``true`` and
``false`` are booleans (so ``on:`` is a key, not ``True``), dates stay strings,
and there are no sexagesimal, octal or infinite numbers. Duplicate keys are
errors. Relative paths in a definition are resolved against its directory.

Loading runs no code a definition names. Resolving its context does: a context
callable is imported and called (``check`` does that only with ``--resolve``).

Every run keeps the version it used (:class:`DefinitionSnapshot`: the YAML text and
the files it names); :func:`load_stored` rebuilds a definition from one without
touching the filesystem, and runs none of the code it names.
"""

from __future__ import annotations

from salvagelane.definitions.checking import (
    CheckedInstruction,
    check_instruction,
    environment_warnings,
)
from salvagelane.definitions.context_values import (
    resolve_allow_lists,
    resolve_context,
    salvage_policy_for,
    snapshot_for_run,
    with_snapshot,
)
from salvagelane.definitions.cron import cron_problem
from salvagelane.definitions.directory import (
    DefinitionSet,
    definition_files,
    duplicate_id_check,
    load_definitions,
    load_instructions,
    require_loadable,
)
from salvagelane.definitions.loading import load_instruction, load_stored
from salvagelane.definitions.model import (
    AllowListSource,
    ConnectorKind,
    ConnectorSpec,
    ContextSource,
    GuardrailSpec,
    Instruction,
    OutputSpec,
    PromptTemplates,
    RenderedPrompt,
    RetryOn,
    RetryPolicy,
    Schedule,
    SinkKind,
    SinkSpec,
)
from salvagelane.definitions.snapshot import (
    DEFINITION_FILE,
    DefinitionSnapshot,
    FileChange,
    describe_differences,
    differences,
)
from salvagelane.definitions.templates import (
    RENDER_LIMITS,
    UNCERTAINTY_SENTENCE,
    RenderLimits,
    output_contract,
    render_prompt,
)

__all__ = [
    "DEFINITION_FILE",
    "RENDER_LIMITS",
    "UNCERTAINTY_SENTENCE",
    "AllowListSource",
    "CheckedInstruction",
    "ConnectorKind",
    "ConnectorSpec",
    "ContextSource",
    "DefinitionSet",
    "DefinitionSnapshot",
    "FileChange",
    "GuardrailSpec",
    "Instruction",
    "OutputSpec",
    "PromptTemplates",
    "RenderLimits",
    "RenderedPrompt",
    "RetryOn",
    "RetryPolicy",
    "Schedule",
    "SinkKind",
    "SinkSpec",
    "check_instruction",
    "cron_problem",
    "definition_files",
    "describe_differences",
    "differences",
    "duplicate_id_check",
    "environment_warnings",
    "load_definitions",
    "load_instruction",
    "load_instructions",
    "load_stored",
    "output_contract",
    "render_prompt",
    "require_loadable",
    "resolve_allow_lists",
    "resolve_context",
    "salvage_policy_for",
    "snapshot_for_run",
    "with_snapshot",
]
