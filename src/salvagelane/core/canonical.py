"""Canonical JSON and its SHA-256: how salvagelane names a version of a JSON document."""

from __future__ import annotations

import hashlib
import json

from salvagelane.core.records import JSONValue


def canonical_sha256(data: JSONValue, *, allow_nan: bool = False) -> str:
    """SHA-256 of ``data`` as canonical JSON: sorted keys, no whitespace, UTF-8.

    The same hash names a definition version, a schema version and a fixture's item.
    ``surrogatepass``: strict parsing keeps a lone surrogate escape as it was written.
    """
    text = json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
