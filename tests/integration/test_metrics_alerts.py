"""The example alerts (docs/prometheus/, shown in docs/guides/metrics.md) are valid rules
that fire when they should, and name metrics salvagelane really exposes.

promtool (Debian's ``prometheus`` package) checks and unit-tests the rules; without it
those tests skip with a note, except under CI (``CI`` set), where .ci/run installs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from salvagelane.runtime.metrics import Metrics
from salvagelane.store import Store
from tests.support.run_setup import store

__all__ = ["store"]

RULES = Path(__file__).parents[2] / "docs" / "prometheus"


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not installed, and the alert tests must run under CI")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    done = subprocess.run(
        [tool, *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid_prometheus_rules() -> None:
    assert "SUCCESS: 3 rules found" in promtool("check", "rules", "salvagelane-alerts.yml")


def test_the_rules_fire_when_the_triage_was_not_clean_and_only_then() -> None:
    assert "SUCCESS" in promtool("test", "rules", "salvagelane-alerts.test.yml")


def test_the_rules_name_metrics_salvagelane_exposes(store: Store) -> None:
    named = set(
        re.findall(r"\bsalvagelane_[a-z_]+", (RULES / "salvagelane-alerts.yml").read_text())
    )
    assert named == {
        "salvagelane_last_clean_run_timestamp_seconds",
        "salvagelane_state_up",
        "salvagelane_queue_stalled",
        "salvagelane_queue_oldest_wait_seconds",
    }
    exposed = {
        family.name for family in Metrics(state=store.state, process=False).registry.collect()
    }
    assert named <= exposed, named - exposed
