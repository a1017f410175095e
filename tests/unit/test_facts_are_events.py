"""Every fact the runtime logs or counts is a run event (docs/reference/events.md): no
runtime module writes a log line or touches a metric beside the event stream.

Read from the source (the AST), so a new ``log.info(...)`` or ``counter.inc()`` in the
runtime fails here, whatever the tests that run it look at.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "salvagelane"
RUNTIME = sorted((SRC / "runtime").glob("*.py")) + sorted((SRC / "review").glob("*.py"))
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log", "msg"}
METRIC_METHODS = {"inc", "dec", "set", "observe"}
LOGS_OF_THEIR_OWN = {
    # The metrics endpoint reports its own scrape failing: it is a consumer of the stream,
    # and the collector that fails has no stream (it runs in the HTTP server's thread).
    "metrics.py": {"metrics.state_unreadable", "metrics.schedule_unreadable"},
}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _logger_names(tree: ast.Module) -> set[str]:
    """The names bound to ``get_logger(...)`` in a module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name) and func.id == "get_logger":
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def log_calls(path: Path) -> list[tuple[int, str]]:
    """``(line, event)`` of each call of a logger method in the module."""
    tree = _tree(path)
    loggers = _logger_names(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in loggers
        ):
            first = node.args[0] if node.args else None
            event = first.value if isinstance(first, ast.Constant) else ast.unparse(first or node)
            found.append((node.lineno, str(event)))
    return found


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_runtime_logs_nothing_beside_its_events(path: Path) -> None:
    allowed = LOGS_OF_THEIR_OWN.get(path.name, set())
    stray = [(line, event) for line, event in log_calls(path) if event not in allowed]
    assert stray == [], f"{path.name}: log lines that are not run events (publish an event)"


def test_the_metrics_count_only_in_their_event_subscriber() -> None:
    tree = _tree(SRC / "runtime" / "metrics.py")
    (metrics,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Metrics"]
    counted_outside = []
    for method in metrics.body:
        if not isinstance(method, ast.FunctionDef) or method.name == "observe":
            continue
        for node in ast.walk(method):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in METRIC_METHODS
            ):
                counted_outside.append((method.name, node.lineno))
    assert counted_outside == []


def test_the_check_sees_a_stray_log_line(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text(
        'from salvagelane.logs import get_logger\nlog = get_logger("x")\n'
        'def f():\n    log.info("run.sneaked", a=1)\n'
    )
    assert log_calls(stray) == [(4, "run.sneaked")]
