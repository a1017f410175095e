"""Build hook: compile the scanner's hot loops (src/salvagelane/core/_speedups.c).

The extension is an accelerator, never a requirement: the pure-Python core gives
the same answers (docs/adr/0015-compiled-scan-loops.md). A wheel or editable
install built where no C compiler works still installs, with a warning, and runs
the Python loops; `salvagelane.core.speedups.COMPILED` says which one runs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "salvagelane.core._speedups"
SOURCE = "src/salvagelane/core/_speedups.c"


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        editable = version == "editable"
        try:
            built = _compile(Path(self.root), in_place=editable)
        except Exception as exc:  # a missing compiler or headers: fall back, loudly
            print(
                f"salvagelane: the compiled scanner was not built ({exc}); "
                "the pure-Python scanner will run",
                file=sys.stderr,
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if not editable:
            build_data["force_include"][str(built)] = "salvagelane/core/" + built.name


def _compile(root: Path, *, in_place: bool) -> Path:
    # setuptools knows each platform's compiler, flags and extension suffix.
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(
        MODULE, [SOURCE], extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    )
    distribution = Distribution(
        {"name": "salvagelane", "ext_modules": [extension], "package_dir": {"": "src"}}
    )
    distribution.script_name = "hatch_build.py"
    command = build_ext(distribution)
    command.inplace = in_place
    command.build_temp = tempfile.mkdtemp(prefix="salvagelane-build-")
    command.build_lib = tempfile.mkdtemp(prefix="salvagelane-lib-")
    command.ensure_finalized()
    command.run()
    return Path(command.get_ext_fullpath(MODULE))
