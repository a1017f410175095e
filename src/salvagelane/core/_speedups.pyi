# The compiled scan loops (_speedups.c); salvagelane.core.speedups is their one importer.

from typing import Any

STRICT_GRAMMAR: int
DUPLICATE_KEY: int
KEYS_UNPROVEN: int
NEEDS_CHECK: int

def match_container(text: str, start: int, bound: int, /) -> tuple[int, int] | None: ...
def item_run(
    text: str, pos: int, key: str, dead_start: int, dead_end: int, shallow: int, /
) -> tuple[list[int], int, bool, int]: ...
def check_strict(text: str, start: int, end: int, /) -> int: ...

class Builder:
    def __call__(self, *values: object) -> Any: ...

def builder(cls: type, names: tuple[str, ...], /) -> Builder: ...
