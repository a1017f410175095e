"""docs/architecture.md says what pyproject.toml's import-linter contracts enforce: its
numbered layer list is the `layers` contract, in order, and it describes every contract."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _one_layer(layer: str) -> str:
    """``a|b`` and ``a  |  b`` name the same layer as ``a | b``."""
    return " | ".join(part.strip() for part in layer.split("|"))


def documented_layers(text: str) -> list[str]:
    """The code span opening each item of the numbered list under "The layers"."""
    section = _section(text, "The layers")
    return [
        _one_layer(match[1]) for match in re.finditer(r"^\d+\. `([^`]+)`", section, re.MULTILINE)
    ]


def documented_contracts(text: str) -> list[str]:
    return re.findall(r"^- \*\*([a-z-]+)\*\*", _section(text, "The contracts"), re.MULTILINE)


@pytest.fixture(scope="module")
def contracts() -> list[dict[str, object]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        found: list[dict[str, object]] = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    return found


@pytest.fixture(scope="module")
def architecture() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_the_layer_list_is_the_layers_contract(
    contracts: list[dict[str, object]], architecture: str
) -> None:
    (layers,) = [contract for contract in contracts if contract["id"] == "layers"]
    assert isinstance(layers["layers"], list)
    expected = [_one_layer(layer) for layer in layers["layers"]]
    assert documented_layers(architecture) == expected, (
        "docs/architecture.md, 'The layers', differs from pyproject.toml's layers contract"
    )


def test_every_contract_is_described(contracts: list[dict[str, object]], architecture: str) -> None:
    assert documented_contracts(architecture) == [contract["id"] for contract in contracts]


DRIFTS: dict[str, Callable[[str], str]] = {
    "a renamed layer": lambda text: text.replace("5. `review`:", "5. `reviews`:"),
    "a lost layer": lambda text: re.sub(r"^5\. `review`:.*\n(?:   .*\n)*", "", text, flags=re.M),
    "a module left out": lambda text: text.replace("| call_cut`", "`", 1),
    "two layers swapped": lambda text: text.replace("3. `ui`:", "3. `runtime`:").replace(
        "4. `runtime`:", "4. `ui`:"
    ),
}


@pytest.mark.parametrize("drift", list(DRIFTS))
def test_drift_is_noticed(
    contracts: list[dict[str, object]], architecture: str, drift: str
) -> None:
    (layers,) = [contract for contract in contracts if contract["id"] == "layers"]
    assert isinstance(layers["layers"], list)
    drifted = DRIFTS[drift](architecture)
    assert drifted != architecture
    assert documented_layers(drifted) != [_one_layer(layer) for layer in layers["layers"]]
