"""Build hook: compile the scanner's hot loops (src/salvagelane/core/_speedups.c).

The extension is an accelerator, never a requirement: the pure-Python core gives
the same answers (docs/adr/0015-compiled-scan-loops.md). A wheel or editable
install built where no C compiler works still installs, with a warning, and runs
the Python loops; `salvagelane.core.speedups.COMPILED` says which one runs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "salvagelane.core._speedups"
SOURCE = "src/salvagelane/core/_speedups.c"


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    _scratch: str | None = None  # the compiler's working directory, removed after the build

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        editable = version == "editable"
        self._scratch = tempfile.mkdtemp(prefix="salvagelane-build-")
        try:
            built = _compile(Path(self.root), Path(self._scratch), in_place=editable)
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

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _compile(root: Path, scratch: Path, *, in_place: bool) -> Path:
    """Build the extension from ``root``'s source, in place (under ``root/src``) or in
    ``scratch``; return the built module's path."""
    # setuptools knows each platform's compiler, flags and extension suffix.
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(
        MODULE,
        [str(root / SOURCE)],
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    )
    distribution = Distribution(
        {"name": "salvagelane", "ext_modules": [extension], "package_dir": {"": str(root / "src")}}
    )
    distribution.script_name = "hatch_build.py"
    command = build_ext(distribution)
    command.inplace = in_place
    command.build_temp = str(scratch / "temp")
    command.build_lib = str(scratch / "lib")
    command.ensure_finalized()
    command.run()
    return Path(command.get_ext_fullpath(MODULE))
