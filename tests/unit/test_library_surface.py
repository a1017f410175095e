"""The library surface: what ``import salvagelane`` exports, and what it costs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

import salvagelane
from salvagelane import (
    ConfigurationError,
    Guardrails,
    ItemsPathError,
    SalvagelaneError,
    SalvagePolicy,
    Status,
    salvage,
)

PACKAGE = Path(salvagelane.__file__).parent
HEAVY = ("jsonschema", "sqlalchemy", "httpx", "apscheduler", "importlib.metadata")


def _fresh(code: str) -> str:
    """stdout of ``code`` run by a new interpreter (nothing imported yet)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_salvagelane_loads_nothing_heavy() -> None:
    # importlib.metadata too: reading __version__ costs tens of milliseconds, and the
    # command line imports this package before every command.
    loaded = json.loads(
        _fresh(
            "import json, sys\n"
            "import salvagelane\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
        )
    )
    assert loaded == []


def test_every_exported_name_resolves_in_a_fresh_interpreter() -> None:
    resolved = json.loads(
        _fresh(
            "import json, salvagelane\n"
            "print(json.dumps({n: getattr(salvagelane, n) is not None "
            "for n in salvagelane.__all__}))\n"
        )
    )
    assert resolved == dict.fromkeys(salvagelane.__all__, True)


def test_what_mypy_sees_is_what_is_exported() -> None:
    # The TYPE_CHECKING imports (for mypy and editors) and the lazy table must name the
    # same things, from the same modules, and __all__ must be exactly those.
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    checked: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    for alias in statement.names:
                        checked[alias.name] = str(statement.module)
    assert checked == salvagelane._EXPORTS
    assert sorted(salvagelane.__all__) == sorted([*salvagelane._EXPORTS, "__version__"])


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = salvagelane.nope  # type: ignore[attr-defined]
    assert not hasattr(salvagelane, "nope")


def test_version_is_the_package_metadata() -> None:
    try:
        expected = version("salvagelane")
    except PackageNotFoundError:
        expected = "0+unknown"
    assert salvagelane.__version__ == expected


def test_version_falls_back_when_not_installed() -> None:
    # A source tree that was never installed: no distribution named salvagelane.
    shown = _fresh(
        "import importlib.metadata as m\n"
        "def missing(name):\n"
        "    raise m.PackageNotFoundError(name)\n"
        "m.version = missing\n"
        "import salvagelane\n"
        "print(salvagelane.__version__)\n"
    )
    assert shown.strip() == "0+unknown"


def test_the_package_is_marked_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_errors_share_one_base() -> None:
    assert issubclass(ItemsPathError, ConfigurationError)
    assert issubclass(ConfigurationError, SalvagelaneError)


# --- SalvagePolicy.items_path ---------------------------------------------------------------

NESTED = '{"data": {"items": [{"id": 1}, {"id": 2}]}}'


@pytest.mark.parametrize(
    "given",
    ["data.items", ("data", "items"), ["data", "items"]],
    ids=["dotted", "tuple", "list"],
)
def test_items_path_dotted_or_keys(given: str | tuple[str, ...] | list[str]) -> None:
    policy = SalvagePolicy(items_path=given)
    assert policy.items_path == ("data", "items")
    result = salvage(NESTED, policy)
    assert result.status is Status.OK
    assert [item.data for item in result.items] == [{"id": 1}, {"id": 2}]


def test_one_key_as_a_string_is_one_key_not_its_characters() -> None:
    policy = SalvagePolicy(items_path="items")
    assert policy.items_path == ("items",)
    assert len(salvage('{"items": [{"a": 1}]}', policy).items) == 1


def test_keys_may_hold_dots_when_given_as_a_sequence() -> None:
    policy = SalvagePolicy(items_path=("a.b", "items"))
    assert len(salvage('{"a.b": {"items": [{"x": 1}]}}', policy).items) == 1


def test_default_items_path_is_the_document_itself() -> None:
    assert SalvagePolicy().items_path == ()
    assert SalvagePolicy().guardrails == Guardrails()
    assert len(salvage('[{"a": 1}]', SalvagePolicy()).items) == 1


@pytest.mark.parametrize(
    ("dotted", "problem"),
    [
        ("", "no key at all"),
        ("a..b", "an empty key before, between or after dots"),
        (".a", "an empty key before, between or after dots"),
        ("a.", "an empty key before, between or after dots"),
        (".", "an empty key before, between or after dots"),
    ],
)
def test_empty_segments_are_refused(dotted: str, problem: str) -> None:
    with pytest.raises(ItemsPathError) as raised:
        SalvagePolicy(items_path=dotted)
    assert str(raised.value) == (
        f"items_path {dotted!r}: {problem}; expected keys joined by single dots, "
        'e.g. "data.items", or items_path=() when the report is the array itself'
    )


@pytest.mark.parametrize("given", [3, ("data", 3), None, b"items"])
def test_items_path_that_is_not_keys_is_refused(given: object) -> None:
    with pytest.raises(ItemsPathError, match="expected a dotted string"):
        SalvagePolicy(items_path=given)  # type: ignore[arg-type]
