"""Keep docs/reference/events.md equal to the run events the code defines.

The reference lists every event (salvagelane.events.kinds): its name, the level it is
logged at, its fields with their types, what it means, and its subscribers (the log
takes every event; the metrics count those :attr:`Metrics.COUNTED` names). This script
writes it (``--write``) or reports that it drifted (``--check``, exit 1); the test suite
runs the check.

    .venv/bin/python scripts/events_reference.py --write
    .venv/bin/python scripts/events_reference.py --check
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference" / "events.md"

_INTRO = """\
What happens to fires, runs, deliveries and nodes is published once, as a run event, to
the process's event stream (ADR 0019). The structured log writes every event as one
line (its `event` is the name below, its fields the event's, with `instruction_id` as
`instruction`); `serve --metrics-port` and `worker --metrics-port` count the events
marked *metrics*. A program that embeds salvagelane subscribes its own callables:

```python
from salvagelane.events import logged_stream
from salvagelane.events.kinds import RunFinished
from salvagelane.runtime.executor import Executor

stream = logged_stream()
stream.subscribe(lambda event: print(event.name, event.status), [RunFinished])
Executor(store, connector_for=connector_for, events=stream).run(instruction)
```

A subscriber runs in the run's thread while the run waits: it must be quick. One that
raises is reported (`event.subscriber_failed`) and skipped; the run goes on.

This page is generated from the code (`scripts/events_reference.py --write`); the test
suite fails when it drifts.
"""


def _type_text(hint: object) -> str:
    """A field's type as the reference shows it: ``str or None`` (a ``|`` would end the
    table's cell)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_type_text(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin is not None:
        args = ", ".join(_type_text(arg) for arg in typing.get_args(hint))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(hint, "__name__", str(hint))


def generated() -> str:
    from salvagelane.events import kinds
    from salvagelane.events.log import LEVELS
    from salvagelane.runtime.metrics import Metrics

    counted = set(Metrics.COUNTED)
    lines = ["# Run events", "", _INTRO.rstrip(), ""]
    sections = [
        ("A run", kinds.RunEvent),
        ("A fire", kinds.FireEvent),
        ("A delivery", kinds.DeliveryEvent),
    ]
    placed: set[type[kinds.Event]] = set()
    groups: list[tuple[str, list[type[kinds.Event]]]] = []
    for title, base in sections:
        members = [k for k in kinds.EVENT_TYPES if issubclass(k, base)]
        placed.update(members)
        groups.append((title, members))
    groups.append(("Runs, fires and the node", [k for k in kinds.EVENT_TYPES if k not in placed]))
    for title, members in groups:
        lines += [f"## {title}", "", "| event | level | fields | subscribers | meaning |"]
        lines.append("|---|---|---|---|---|")
        for kind in members:
            hints = typing.get_type_hints(kind)
            fields = ", ".join(
                f"`{f.name}`: {_type_text(hints[f.name])}"
                for f in dataclasses.fields(kind)
                if f.name != "exception"
            )
            subscribers = "log, metrics" if kind in counted else "log"
            meaning = " ".join((inspect.getdoc(kind) or "").split()).replace("|", "\\|")
            lines.append(
                f"| `{kind.name}` | {LEVELS[kind]} | {fields or '-'} | {subscribers} | {meaning} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = generated()
    if args.write:
        REFERENCE.write_text(text, encoding="utf-8")
        return 0
    if REFERENCE.read_text(encoding="utf-8") != text:
        print(f"{REFERENCE} drifted: run scripts/events_reference.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
