"""Issue 12, item 6: what a prompt render may build and produce is bounded.

``{{ 'a' * 100000000 }}`` passed ``check`` (464 MB, 17 s). The sandbox now refuses an
operation before it builds a value over the per-value limit, counts the steps a render
takes and the text it creates, and the rendered prompt has a size cap; ``check`` renders
every definition's prompt, and ``run`` refuses the same prompt with a DefinitionError.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from salvagelane.definitions import load_instruction, render_prompt, resolve_context
from salvagelane.definitions.templates import RENDER_LIMITS
from salvagelane.errors import DefinitionError
from tests.support.definitions import (
    DEFINITION,
    ROOT,
    add_context,
    copy_project,
    edit,
    run_measured,
)
from tests.support.guards import time_limit

MiB = 1024 * 1024
FIXTURE = ROOT / "tests" / "fixtures" / "daily-triage-truncated"
REFUSED = "expected a prompt within the render limits"


def with_user_template(project: Path, template: str) -> Path:
    definition = project / DEFINITION
    edit(definition, "Today is {{ today }}.", template)
    return definition


def test_check_refuses_a_huge_render_quickly_and_in_little_memory(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    with_user_template(project, "{{ 'a' * 100000000 }}")

    proc = run_measured("check", "instructions", cwd=project)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(
        "error  instructions/daily-triage.yaml: prompt.user: " + REFUSED + ", got at template "
        "line 1: '*' would build a value of 100000000 bytes (the limit for one value is "
        f"{RENDER_LIMITS.max_value_bytes})"
    ), lines[0]
    assert proc.peak_rss_bytes < 100 * MiB, proc.peak_rss_bytes


def test_run_refuses_the_same_prompt_with_a_definition_error(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    definition = with_user_template(project, "{{ 'a' * 100000000 }}")
    env = {"SALVAGELANE_DATABASE_URL": f"sqlite:///{tmp_path / 'runs.db'}"}
    assert run_measured("db", "upgrade", cwd=project, env=env).returncode == 0

    proc = run_measured(
        "run", str(definition), "--replay", str(FIXTURE), "--json", cwd=project, env=env
    )

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"definition: {definition}: prompt.user: {REFUSED}" in proc.stdout, proc.stdout
    assert proc.peak_rss_bytes < 100 * MiB, proc.peak_rss_bytes


# Each builds something enormous (or runs for ever) from a few bytes of template.
HOSTILE = {
    "str-times-int": "{{ 'a' * 100000000 }}",
    "int-times-str": "{{ 100000000 * 'a' }}",
    "list-times-int": "{{ ['x'] * 100000000 }}",
    "list-of-big-strings": "{{ (['y' * 1000000] * 100) | join }}",
    "power": "{{ 10 ** 100000000 }}",
    "center-filter": "{{ 'a' | center(100000000) }}",
    "ljust-method": "{{ 'a'.ljust(100000000) }}",
    "zfill-method": "{{ 'a'.zfill(100000000) }}",
    "expandtabs-method": "{{ '\\t\\t'.expandtabs(100000000) }}",
    "format-width": "{{ '{:>100000000}'.format('a') }}",
    "format-nested-width": "{{ '{0:{1}}'.format('a', 100000000) }}",
    "format-many-fields": "{{ ('{0:>1000000}' * 100).format('a') }}",
    "percent-width": "{{ '%100000000s' % 'a' }}",
    "percent-star-width": "{{ '%*d' % (100000000, 1) }}",
    "format-filter": "{{ '%100000000d' | format(1) }}",
    "replace-filter": "{{ ('a' * 1000000) | replace('a', 'bbbbbbbbbb') }}",
    "replace-method-empty": "{{ ('a' * 1000000).replace('', 'bbbbbbbbbb') }}",
    "translate-method": "{{ ('a' * 100).translate({97: 'x' * 1000000}) }}",
    "join-separator": "{{ ('x' * 3000000).join('abc') }}",
    "indent-filter": "{{ ('\\n' * 1000000) | indent(100) }}",
    "wordwrap-filter": "{{ ('ab ' * 1000) | wordwrap(1, wrapstring='x' * 1000000) }}",
    "tojson-indent": "{{ ([[[[1]]]] * 10) | tojson(indent=100000) }}",
    "batch-fill": "{{ [1] | batch(100000000, 'x') | list }}",
    "concat-doubling": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}"
    ),
    "plus-doubling": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}"
    ),
    "list-doubling": (
        "{% set ns = namespace(l=['ab']) %}{% for i in range(64) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"
    ),
    "macro-doubling": (
        "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% else %}{{ s }}{% endif %}"
        "{% endmacro %}{{ f('ab', 64) | length }}"
    ),
    "output-in-a-loop": "{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}",
    "macro-buffer": (
        "{% macro m() %}{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}"
        "{% endmacro %}{{ m() | length }}"
    ),
    "lazy-items-materialised": (
        "{% for x in range(100000) | map('center', 1000000) %}{{ loop.length }}{% endfor %}"
    ),
    "set-block-in-a-loop": (
        "{% for i in range(100000) %}{% set b %}{{ 'x' * 1000000 }}{% endset %}{% endfor %}"
    ),
    "literal-list-printed": "{% set b = 'x' * 4000000 %}{{ [b, b, b, b, b, b, b, b] }}",
    "literal-list-concatenated": "{% set b = 'x' * 4000000 %}{{ 'a' ~ [b, b, b, b] }}",
    "literal-list-formatted": "{% set b = 'x' * 4000000 %}{{ '{}'.format([b, b, b, b]) }}",
    "literal-list-filtered": "{% set b = 'x' * 4000000 %}{{ [b, b, b, b] | string }}",
    "list-method-growth": (
        "{% set l = ['x' * 1000] %}{% for i in range(30) %}{{ l.extend(l) }}{% endfor %}"
    ),
}


# Each builds nothing but would run for hours: the step budget stops them.
SPINNING = {
    "macro-fanout": (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}"
    ),
    "nested-ranges": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    ),
}


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_sandbox_refuses_a_render_before_it_grows(tmp_path: Path, template: str) -> None:
    definition = with_user_template(copy_project(tmp_path), template)
    instruction = load_instruction(definition)
    context = resolve_context(instruction)

    tracemalloc.start()
    try:
        with time_limit(60, "a hostile render"), pytest.raises(DefinitionError) as caught:
            render_prompt(instruction, context)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    message = str(caught.value)
    assert message.startswith(f"{definition}: prompt.user: "), message
    assert "\n" not in message
    # Refused by a limit, or by the sandbox itself (list.extend is not allowed at all).
    assert REFUSED in message or "unsafe" in message, message
    # The per-value limit is 4 MiB and a render may create 32 MiB in all.
    assert peak < 64 * MiB, peak


@pytest.mark.parametrize("template", SPINNING.values(), ids=SPINNING.keys())
def test_the_sandbox_stops_a_render_that_runs_for_ever(tmp_path: Path, template: str) -> None:
    definition = with_user_template(copy_project(tmp_path), template)
    instruction = load_instruction(definition)
    with time_limit(60, "a spinning render"), pytest.raises(DefinitionError) as caught:
        render_prompt(instruction, resolve_context(instruction))
    assert f"{REFUSED}, got at template line 1: more than {RENDER_LIMITS.max_steps} steps" in str(
        caught.value
    ), caught.value


def test_a_prompt_over_the_size_cap_is_refused_though_each_value_is_within_it(
    tmp_path: Path,
) -> None:
    definition = with_user_template(
        copy_project(tmp_path), "{{ 'a' * 3000000 }}{{ 'b' * 3000000 }}"
    )
    instruction = load_instruction(definition)
    with pytest.raises(DefinitionError) as caught:
        render_prompt(instruction, resolve_context(instruction))
    assert f"{REFUSED}, got a prompt of more than {RENDER_LIMITS.max_prompt_bytes} bytes" in str(
        caught.value
    ), caught.value


def test_ordinary_templates_render_as_before(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    add_context(project / DEFINITION, '  data:\n    value: {"a": [1, 2], "b": "x"}\n')
    template = (
        "{{ 'ab' * 3 }}|{{ 2 ** 10 }}|{{ '{:>5}'.format('x') }}|{{ '%5.2f' % 3.14159 }}|"
        "{{ 'x' | center(5) }}|{{ 'a\\nb' | indent(2) }}|{{ 'a b c' | wordwrap(3) }}|"
        "{{ data | tojson }}|{{ [1, 2, 3] | batch(2, 0) | list }}|"
        "{{ '%s-%s' | format(1, 2) }}|{{ 'a-b' | replace('-', '+') }}|"
        "{% set ns = namespace(n=0) %}{% for i in range(10) %}{% set ns.n = ns.n + i %}"
        "{% endfor %}{{ ns.n }}|{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(1) ~ m(2) }}|"
        "{{ ['a', 'b'] | join(',') }}|{{ ','.join(['c', 'd']) }}|{{ 'x'.zfill(3) }}|"
        "{{ [1, 2] + [3] }}|{{ data.a | sum }}|{{ today }}"
    )
    definition = with_user_template(project, template)
    instruction = load_instruction(definition)
    context = resolve_context(instruction)
    prompt = render_prompt(instruction, context)
    expected = (
        "ababab|1024|    x| 3.14|  x  |a\n  b|a b\nc|"
        '{"a": [1, 2], "b": "x"}|[[1, 2], [3, 0]]|1-2|a+b|45|<1><2>|a,b|c,d|00x|'
        f"[1, 2, 3]|3|{context['today']}"
    )
    assert prompt.user.startswith(expected), prompt.user[:300]


def test_lorem_ipsum_is_not_offered_to_templates(tmp_path: Path) -> None:
    definition = with_user_template(copy_project(tmp_path), "{{ lipsum(100000000) }}")
    with pytest.raises(DefinitionError) as caught:
        load_instruction(definition)
    assert 'got undefined "lipsum"' in str(caught.value)
