"""The repository's ``scripts/`` as modules, for the tests of what they generate."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.cli import ROOT


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` imported as the module ``NAME`` (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
