"""``salvagelane eval``: try a candidate (a definition, a model, a provider) on the prompts
of recorded fixtures, side by side with what their recorded answers gave.

Exit codes: 0 evaluated (with ``--fail-if-worse``: and the candidate did not do worse);
1 ``--fail-if-worse`` and the candidate kept fewer items in total or failed more
fixtures; 2 bad options, no fixture, an unusable candidate definition or database.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from salvagelane.cli.options import Command, database_option, instructions_option, json_option
from salvagelane.safe_text import line

if TYPE_CHECKING:
    from salvagelane.core.evaluation import Comparison, Side, Totals
    from salvagelane.definitions import Instruction
    from salvagelane.runtime.evaluation import Evaluation

EXIT_WORSE = 1


@click.command("eval", cls=Command)
@click.argument(
    "fixtures",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path),
    metavar="FIXTURE_OR_DIR...",
)
@click.option(
    "--definition",
    "definition",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="The candidate definition (a YAML file). Default: each fixture's instruction as "
    "defined today in --instructions.",
)
@click.option("--model", "model", metavar="MODEL", help="Call this model instead.")
@click.option(
    "--base-url",
    "base_url",
    metavar="URL",
    help="Call this OpenAI- or Anthropic-compatible base URL instead.",
)
@click.option(
    "--render",
    is_flag=True,
    help="Send the candidate definition's own prompt (rendered now) instead of each "
    "fixture's recorded one (prompt.json): to try a prompt change.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 32),
    default=4,
    show_default=True,
    help="Fixtures evaluated at once.",
)
@click.option(
    "--fail-if-worse",
    is_flag=True,
    help="Exit 1 when the candidate keeps fewer items in total or fails more fixtures "
    "than the baseline.",
)
@click.option("--no-store", is_flag=True, help="Do not store the results in the database.")
@instructions_option
@database_option
@json_option
def eval_command(
    fixtures: tuple[Path, ...],
    definition: Path | None,
    model: str | None,
    base_url: str | None,
    render: bool,
    concurrency: int,
    fail_if_worse: bool,
    no_store: bool,
    instructions_dir: Path,
    database: str | None,
    as_json: bool,
) -> None:
    """Evaluate a candidate (a definition, a model, a provider) on recorded fixtures,
    side by side with their recorded answers.

    FIXTURE_OR_DIR... are fixture directories, or directories searched for them. For
    each fixture the baseline is its recorded answer as `replay` salvages it (no
    call); the candidate is a real call with the fixture's recorded prompt to the
    candidate definition's connector (--definition, else today's definition; --model and
    --base-url override its connector), salvaged with the candidate definition. Prints
    each fixture side by side (status, kept, quarantined by reason, tokens, cost,
    latency) and the totals, a progress line per fixture on stderr, and stores the
    results for the review page (/evals) unless --no-store.
    """
    from salvagelane.cli.wiring import open_store, wired
    from salvagelane.definitions import load_instruction
    from salvagelane.errors import InputError
    from salvagelane.fixtures.format import discover
    from salvagelane.fixtures.replay import Replayer
    from salvagelane.runtime.evaluation import Candidate, evaluate

    try:
        found = discover(fixtures)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="FIXTURE_OR_DIR") from exc
    replayer = Replayer(instructions_dir)
    given = load_instruction(definition) if definition is not None else None

    def definition_for(instruction_id: str) -> Instruction:
        chosen = given if given is not None else replayer.current(instruction_id)
        if given is not None and given.id != instruction_id:
            raise InputError(
                f"the fixture is of instruction {instruction_id!r}, the candidate "
                f"definition {definition} defines {given.id!r}"
            )
        return overridden(chosen, model=model, base_url=base_url)

    candidate = Candidate(
        definition_for=definition_for,
        describe=describe_candidate(definition, model=model, base_url=base_url, render=render),
        render=render,
    )

    def progress(done: int, total: int, comparison: Comparison) -> None:
        click.echo(
            f"eval: {done}/{total} {line(comparison.fixture)}: {comparison.change}", err=True
        )

    with wired() as wiring:
        evaluation = evaluate(
            found,
            candidate,
            replayer=replayer,
            connector_for=wiring.connector_for,
            concurrency=concurrency,
            progress=progress,
        )
    stored_id = None
    if not no_store:
        with open_store(database) as store:
            stored_id = store.evals.add(
                candidate=evaluation.candidate,
                comparisons=[c.to_json() for c in evaluation.comparisons],
                verdict=evaluation.verdict.to_json(),
                created_at=datetime.now(UTC),
            )
    if as_json:
        document = {
            "eval_id": stored_id,
            "candidate": evaluation.candidate,
            "fixtures": [c.to_json() for c in evaluation.comparisons],
            **evaluation.verdict.to_json(),
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        click.echo(render_table(evaluation, stored_id=stored_id))
    if fail_if_worse and evaluation.verdict.worse:
        sys.exit(EXIT_WORSE)


def overridden(instruction: Instruction, *, model: str | None, base_url: str | None) -> Instruction:
    """``instruction`` calling ``model`` at ``base_url`` where given."""
    spec = instruction.connector
    if model is not None:
        spec = dataclasses.replace(spec, model=model)
    if base_url is not None:
        spec = dataclasses.replace(spec, base_url=base_url, base_url_env=None)
    return dataclasses.replace(instruction, connector=spec)


def describe_candidate(
    definition: Path | None, *, model: str | None, base_url: str | None, render: bool
) -> str:
    from salvagelane.logs import redact_url

    parts = [f"definition {definition}" if definition is not None else "today's definitions"]
    if model is not None:
        parts.append(f"model {model}")
    if base_url is not None:
        parts.append(f"base URL {redact_url(base_url)}")
    parts.append("its own prompt" if render else "the recorded prompts")
    return ", ".join(parts)


_HEADER = ("FIXTURE", "SIDE", "STATUS", "KEPT", "QUARANTINED", "TOKENS", "COST", "SECONDS")


def render_table(evaluation: Evaluation, *, stored_id: str | None) -> str:
    """The side-by-side table, the totals and the verdict."""
    rows: list[tuple[str, ...]] = [_HEADER]
    for comparison in evaluation.comparisons:
        name = line(Path(comparison.fixture).name)
        if comparison.skipped is not None:
            rows.append((name, "skipped", "(below)", "", "", "", "", ""))
            continue
        for side_name, side in (
            ("baseline", comparison.baseline),
            ("candidate", comparison.candidate),
        ):
            assert side is not None
            rows.append((name if side_name == "baseline" else "", side_name, *_side_cells(side)))
        rows.append(("", "change", comparison.change, "", "", "", "", ""))
    verdict = evaluation.verdict
    for side_name, totals in (("baseline", verdict.baseline), ("candidate", verdict.candidate)):
        rows.append(("TOTAL" if side_name == "baseline" else "", side_name, *_total_cells(totals)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = [
        f"candidate: {line(evaluation.candidate)}",
        "",
        *(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ),
        "",
    ]
    changes = evaluation.changes
    lines.append(
        "changes: "
        + ", ".join(
            f"{changes.get(word, 0)} {word}" for word in ("better", "worse", "same", "skipped")
        )
    )
    for comparison in evaluation.comparisons:
        if comparison.skipped is not None:
            lines.append(f"skipped: {line(comparison.fixture)}: {line(comparison.skipped)}")
    if verdict.worse:
        lines.extend(f"worse: {reason}" for reason in verdict.reasons)
    else:
        lines.append("verdict: the candidate kept no fewer items and failed no more fixtures")
    if stored_id is not None:
        lines.append(f"stored: eval {stored_id} (the review page shows it under /evals)")
    return "\n".join(lines)


def _side_cells(side: Side) -> tuple[str, ...]:
    quarantined = ", ".join(f"{reason} {n}" for reason, n in side.quarantined.items())
    tokens = (
        "-"
        if side.prompt_tokens is None and side.completion_tokens is None
        else str((side.prompt_tokens or 0) + (side.completion_tokens or 0))
    )
    status = side.status if side.error is None else f"{side.status}: {line(side.error)[:60]}"
    return (
        status,
        str(side.kept),
        f"{side.quarantined_total}" + (f" ({quarantined})" if quarantined else ""),
        tokens,
        "-" if side.cost is None else f"{side.cost:.4f}",
        "-" if side.latency_seconds is None else f"{side.latency_seconds:.2f}",
    )


def _total_cells(totals: Totals) -> tuple[str, ...]:
    quarantined = sum(totals.quarantined.values())
    return (
        f"{totals.failed} failed of {totals.fixtures}",
        str(totals.kept),
        str(quarantined),
        str(totals.tokens),
        "-" if totals.cost is None else f"{totals.cost:.4f}",
        "-" if totals.latency_seconds is None else f"{totals.latency_seconds:.2f}",
    )
