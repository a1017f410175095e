"""The official JSON Schema Test Suite (draft 2020-12) through the item-schema layer.

The suite lives beside the repository, at ``<repo>/../shared/json-schema-test-suite``
(see its SOURCE.md). Absent, the module is skipped, unless
``SALVAGELANE_REQUIRE_JSON_SCHEMA_TEST_SUITE=1`` (set by CI, in .ci/run) or ``CI=true``,
in which case it fails.

Every case's schema goes through ``ItemSchema.compile``, as a user's schema file does.
Some are refused there, each with a clear message, and the refusals are listed below:
salvagelane never fetches a ``$ref`` (the suite's remotes at localhost:1234 are not
served either: a harness-only registry would test a path no user can take), an item
schema is an object (not ``true``/``false``), and a ``pattern`` must be a regular
expression Python can compile. For every other case this module proves, test by test:

- jsonschema-rs and jsonschema agree wherever salvagelane lets jsonschema-rs decide;
- every test on which the raw validators disagree belongs to a schema that salvagelane
  routes to jsonschema alone at load time (``ItemSchema.reference_only``);
- the layer, and each validator alone, pass every required test (but the
  annotation-only format tests, below), and the layer passes every format test of
  every format it checks (``FORMATS_CHECKED``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from salvagelane.core.schema import ItemSchema
from salvagelane.core.schema_routing import FORMATS_CHECKED, compile_fast
from salvagelane.errors import SchemaError

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITE = REPO_ROOT.parent / "shared" / "json-schema-test-suite" / "tests" / "draft2020-12"
REQUIRED = (
    os.environ.get("SALVAGELANE_REQUIRE_JSON_SCHEMA_TEST_SUITE") == "1"
    or os.environ.get("CI") == "true"
)

if not SUITE.is_dir() and not REQUIRED:
    pytest.skip(
        f"JSON Schema Test Suite not found at {SUITE}; clone it there "
        "(git clone https://github.com/json-schema-org/JSON-Schema-Test-Suite "
        "../shared/json-schema-test-suite) or set SALVAGELANE_REQUIRE_JSON_SCHEMA_TEST_SUITE=1 "
        "to make its absence a failure",
        allow_module_level=True,
    )

pytestmark = pytest.mark.json_schema_suite

FILES: list[str] = (
    sorted(str(p.relative_to(SUITE)) for p in SUITE.rglob("*.json")) if SUITE.is_dir() else []
)
EXPECTED_FILES = 80

# Every case salvagelane refuses at load time, with the words its message must hold.
REMOTE = "salvagelane never fetches remote schemas"
NOT_AN_OBJECT = "a JSON Schema must be an object"
NOT_A_REGEX = "is not a 'regex'"
UNKNOWN_DIALECT = "is not a JSON Schema dialect salvagelane knows, and it never fetches"
REFUSED: dict[tuple[str, str], str] = {
    ("boolean_schema.json", "boolean schema 'true'"): NOT_AN_OBJECT,
    ("boolean_schema.json", "boolean schema 'false'"): NOT_AN_OBJECT,
    ("defs.json", "validate definition against metaschema"): REMOTE,
    ("dynamicRef.json", "strict-tree schema, guards against misspelled properties"): REMOTE,
    ("dynamicRef.json", "tests for implementation dynamic anchor and reference link"): REMOTE,
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $defs first"): REMOTE,
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $ref first"): REMOTE,
    ("dynamicRef.json", "$ref to $dynamicRef finds detached $dynamicAnchor"): REMOTE,
    ("pattern.json", "pattern with Unicode property escape requires unicode mode"): NOT_A_REGEX,
    ("patternProperties.json", "patternProperties with Unicode property escape"): NOT_A_REGEX,
    ("ref.json", "remote ref, containing refs itself"): REMOTE,
    ("refRemote.json", "remote ref"): REMOTE,
    ("refRemote.json", "fragment within remote ref"): REMOTE,
    ("refRemote.json", "anchor within remote ref"): REMOTE,
    ("refRemote.json", "ref within remote ref"): REMOTE,
    ("refRemote.json", "base URI change"): REMOTE,
    ("refRemote.json", "base URI change - change folder"): REMOTE,
    ("refRemote.json", "base URI change - change folder in subschema"): REMOTE,
    ("refRemote.json", "root ref in remote ref"): REMOTE,
    ("refRemote.json", "remote ref with ref to defs"): REMOTE,
    ("refRemote.json", "Location-independent identifier in remote ref"): REMOTE,
    ("refRemote.json", "retrieved nested refs resolve relative to their URI not $id"): REMOTE,
    ("refRemote.json", "remote HTTP ref with different $id"): REMOTE,
    ("refRemote.json", "remote HTTP ref with different URN $id"): REMOTE,
    ("refRemote.json", "remote HTTP ref with nested absolute ref"): REMOTE,
    ("refRemote.json", "$ref to $ref finds detached $anchor"): REMOTE,
    ("vocabulary.json", "schema that uses custom metaschema with with no validation vocabulary"): (
        UNKNOWN_DIALECT
    ),
    ("vocabulary.json", "ignore unrecognized optional vocabulary"): UNKNOWN_DIALECT,
    (
        "optional/format-assertion.json",
        "schema that uses custom metaschema with format-assertion: false",
    ): UNKNOWN_DIALECT,
    (
        "optional/format-assertion.json",
        "schema that uses custom metaschema with format-assertion: true",
    ): UNKNOWN_DIALECT,
    ("optional/cross-draft.json", "refs to historic drafts are processed as historic drafts"): (
        REMOTE
    ),
    (
        "optional/ecmascript-regex.json",
        "ECMA 262 regex escapes control codes with \\c and upper letter",
    ): NOT_A_REGEX,
    (
        "optional/ecmascript-regex.json",
        "ECMA 262 regex escapes control codes with \\c and lower letter",
    ): NOT_A_REGEX,
    ("optional/ecmascript-regex.json", "patterns always use unicode semantics with pattern"): (
        NOT_A_REGEX
    ),
    ("optional/ecmascript-regex.json", "pattern with non-ASCII digits"): NOT_A_REGEX,
    (
        "optional/ecmascript-regex.json",
        "patterns always use unicode semantics with patternProperties",
    ): NOT_A_REGEX,
    ("optional/ecmascript-regex.json", "patternProperties with non-ASCII digits"): NOT_A_REGEX,
}

# salvagelane asserts formats (ADR 0001): these required tests expect a format to be an
# annotation only, and the layer rejects the invalid string instead, on purpose.
ANNOTATION_ONLY = "string is only an annotation by default"


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdicts:
    """One suite test's outcome through each validator."""

    case: str
    test: str
    expected: bool
    layer: bool  # ItemSchema.check: what salvagelane decides
    reference: bool  # jsonschema, as salvagelane configures it
    raw_fast: bool | str  # jsonschema-rs as configured, whatever the routing; str: refused
    routed: str  # ItemSchema.reference_only
    batch: bool | None  # ItemSchema.batch on a list of this one instance; None: no batch
    patterned: bool  # the case's schema holds a `pattern` jsonschema-rs reads stricter


@dataclass(frozen=True, kw_only=True, slots=True)
class FileRun:
    refused: dict[str, str]  # case description -> message
    verdicts: list[Verdicts]
    # Per case with a batch validator: its verdict on the list of all the case's
    # instances, and whether the layer finds every one of them valid.
    batches: list[tuple[str, bool, bool]]


def _batch_verdict(compiled: ItemSchema, instances: list[Any]) -> bool | None:
    if compiled.batch is None:
        return None
    try:
        return bool(compiled.batch.is_valid(instances))
    except ValueError:  # an instance jsonschema-rs cannot take: no verdict
        return None


def _load_cases(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((SUITE / name).read_text(encoding="utf-8"))
    return cases


def run_file(name: str) -> FileRun:
    refused: dict[str, str] = {}
    verdicts: list[Verdicts] = []
    batches: list[tuple[str, bool, bool]] = []
    for case in _load_cases(name):
        description = case["description"]
        try:
            compiled = ItemSchema.compile(case["schema"], source=f"{name}: {description}")
        except SchemaError as exc:
            refused[description] = str(exc)
            continue
        try:
            raw = compile_fast(case["schema"])  # no bundle: the suite's cases are whole
        except ValueError as exc:  # jsonschema-rs's ValidationError and ReferencingError
            raw = str(exc)
        for test in case["tests"]:
            data = test["data"]
            verdicts.append(
                Verdicts(
                    case=description,
                    test=test["description"],
                    expected=test["valid"],
                    layer=compiled.check(data) is None,
                    reference=compiled.explain(data) is None,
                    raw_fast=raw if isinstance(raw, str) else raw.is_valid(data),
                    routed=compiled.reference_only,
                    batch=_batch_verdict(compiled, [data]),
                    patterned='"pattern"' in json.dumps(case["schema"]),
                )
            )
        instances = [test["data"] for test in case["tests"]]
        together = _batch_verdict(compiled, instances)
        if together is not None:
            every = all(compiled.check(data) is None for data in instances)
            batches.append((description, together, every))
    return FileRun(refused=refused, verdicts=verdicts, batches=batches)


_RUNS: dict[str, FileRun] = {}


def file_run(name: str) -> FileRun:
    if name not in _RUNS:
        _RUNS[name] = run_file(name)
    return _RUNS[name]


def _formats_of(name: str) -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("format"), str):
                found.add(node["format"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for case in _load_cases(name):
        walk(case["schema"])
    return found


def _show(v: Verdicts) -> str:
    return (
        f"{v.case} / {v.test}: expected {v.expected}, layer {v.layer}, "
        f"jsonschema {v.reference}, jsonschema-rs {v.raw_fast!r}, routed {v.routed!r}"
    )


# ---------------------------------------------------------------------------------------------
# The suite is there, and whole
# ---------------------------------------------------------------------------------------------


def test_the_suite_is_present_and_whole() -> None:
    assert SUITE.is_dir(), (
        "the JSON Schema Test Suite is required "
        f"(SALVAGELANE_REQUIRE_JSON_SCHEMA_TEST_SUITE=1 or CI=true) at {SUITE}"
    )
    assert len(FILES) == EXPECTED_FILES, f"expected {EXPECTED_FILES} files, found {len(FILES)}"
    assert {name for name, _ in REFUSED} <= set(FILES)


# ---------------------------------------------------------------------------------------------
# Per file: refusals, agreement, routing, conformance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_refusals_are_the_listed_ones_with_a_clear_message(name: str) -> None:
    run = file_run(name)
    expected = {case: words for (file, case), words in REFUSED.items() if file == name}
    assert set(run.refused) == set(expected), "refused cases differ from the list"
    for case, message in run.refused.items():
        assert message.startswith(f"{name}: {case}: "), message  # says which schema
        assert expected[case] in message, message  # and what is wrong with it


@pytest.mark.parametrize("name", FILES)
def test_both_validators_agree_wherever_jsonschema_rs_decides(name: str) -> None:
    """The proof the issue asks for: a disagreement is only ever on a routed schema."""
    run = file_run(name)
    unrouted = [v for v in run.verdicts if not v.routed]
    # Where jsonschema-rs decides, its "valid" is never wider than the reference's.
    assert [_show(v) for v in unrouted if v.raw_fast is True and not v.reference] == []
    # It refuses what the reference accepts only through a pattern it reads stricter
    # (a final newline before $); the layer then asks the reference (schema_routing).
    stricter = [v for v in unrouted if v.raw_fast is False and v.reference]
    assert [_show(v) for v in stricter if not v.patterned] == []
    assert [_show(v) for v in unrouted if isinstance(v.raw_fast, str)] == []
    # Either way the layer's verdict is the reference's, routed or not.
    assert [_show(v) for v in run.verdicts if v.layer != v.reference] == []


@pytest.mark.parametrize("name", FILES)
def test_a_list_of_items_is_judged_as_each_item_is(name: str) -> None:
    """ItemSchema.batch, which salvage asks about all the items of a valid report at
    once, says of a list what the layer says of its items, one by one and together."""
    run = file_run(name)
    # A batch's "valid" is final, so it is never wider than the layer's; a batch that
    # refuses (a stricter pattern) sends salvage to the items one by one.
    assert [_show(v) for v in run.verdicts if v.batch and not v.layer] == []
    assert [
        _show(v)
        for v in run.verdicts
        if v.batch is False and v.layer and not (v.patterned and v.raw_fast is False)
    ] == []
    assert [
        (case, together) for case, together, every in run.batches if together and not every
    ] == []


def test_most_schemas_the_fast_validator_takes_get_a_batch_validator() -> None:
    # Those it lacks are the suite's relative-$id resources, which jsonschema-rs does not
    # find from the list's schema: their items are asked one by one, as before.
    with_fast = [v for name in FILES for v in file_run(name).verdicts if not v.routed]
    with_batch = [v for v in with_fast if v.batch is not None]
    assert len(with_batch) >= 0.95 * len(with_fast)


@pytest.mark.parametrize("name", [f for f in FILES if not f.startswith("optional/")])
def test_the_layer_passes_every_required_test(name: str) -> None:
    failures = [
        _show(v)
        for v in file_run(name).verdicts
        if v.layer != v.expected and not (name == "format.json" and ANNOTATION_ONLY in v.test)
    ]
    assert failures == []


@pytest.mark.parametrize("name", [f for f in FILES if not f.startswith("optional/")])
def test_each_validator_alone_passes_every_required_test(name: str) -> None:
    """Both validators, as salvagelane configures them, whatever the routing would say."""
    kept = [
        v
        for v in file_run(name).verdicts
        if not (name == "format.json" and ANNOTATION_ONLY in v.test)
    ]
    assert [_show(v) for v in kept if v.reference != v.expected] == []
    assert [_show(v) for v in kept if isinstance(v.raw_fast, str)] == []
    assert [
        _show(v) for v in kept if isinstance(v.raw_fast, bool) and v.raw_fast != v.expected
    ] == []


def test_formats_are_asserted_where_the_suite_says_annotation_only() -> None:
    """The one deliberate deviation from the required tests, exactly as wide as claimed."""
    deviations = {
        v.case.removesuffix(" format")
        for v in file_run("format.json").verdicts
        if ANNOTATION_ONLY in v.test and v.layer != v.expected
    }
    assert deviations == set(FORMATS_CHECKED)


CHECKED_FORMAT_FILES = [
    f
    for f in FILES
    if f.startswith("optional/format/") and _formats_of(f) <= {*FORMATS_CHECKED, "unknown"}
]


def test_every_checked_format_has_its_suite_file() -> None:
    covered = set().union(*(_formats_of(f) for f in CHECKED_FORMAT_FILES))
    assert set(FORMATS_CHECKED) <= covered


@pytest.mark.parametrize("name", CHECKED_FORMAT_FILES)
def test_the_layer_passes_the_format_tests_of_every_format_it_checks(name: str) -> None:
    assert [_show(v) for v in file_run(name).verdicts if v.layer != v.expected] == []


def test_the_routing_list_is_not_dead() -> None:
    """Each known disagreement still shows up in the suite, so the list can shrink when
    jsonschema-rs or jsonschema changes: a routed keyword that no longer disagrees
    anywhere shows here."""
    disagreeing_reasons = set()
    for name in FILES:
        for v in file_run(name).verdicts:
            if v.routed and v.raw_fast != v.reference:
                disagreeing_reasons.add(v.routed.split(": ", 1)[0].rsplit("/", 1)[-1])
    assert {"pattern", "patternProperties", "dependencies"} <= disagreeing_reasons


def test_the_reference_uses_the_shared_format_predicates() -> None:
    """Without them jsonschema's own checkers fail format tests the layer now passes."""
    own = jsonschema.Draft202012Validator(
        {"format": "date-time"}, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    layer = ItemSchema.compile({"format": "date-time"})
    cut = "1963-06-19T08:30:06.283185Z\n"  # the suite: a trailing newline is invalid
    assert own.is_valid(cut)
    assert layer.check(cut) is not None
    assert layer.explain(cut) is not None
