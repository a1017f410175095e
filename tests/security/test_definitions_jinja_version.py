"""Issue 12, item 5: no Jinja2 release with a published sandbox escape.

Jinja2 before 3.1.5 lets a template escape the sandbox through ``str.format``
(CVE-2024-56326); before 3.1.6 through the ``attr`` filter (CVE-2025-27516). Prompt
templates are rendered in that sandbox, so the requirement must exclude them and the
installed release must be a fixed one.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.definitions import ROOT

FIRST_FIXED = Version("3.1.6")


def test_the_installed_jinja2_has_the_sandbox_fixes() -> None:
    assert Version(version("Jinja2")) >= FIRST_FIXED


def test_the_requirement_admits_no_release_with_a_known_sandbox_escape() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [Requirement(line) for line in project["dependencies"]]
    (jinja,) = [r for r in requirements if r.name.lower() == "jinja2"]
    for vulnerable in ("3.1.0", "3.1.4", "3.1.5"):
        assert not jinja.specifier.contains(vulnerable), (str(jinja), vulnerable)
    assert jinja.specifier.contains("3.1.6")
    assert not jinja.specifier.contains("4.0.0")  # a major release is chosen, not drifted to
