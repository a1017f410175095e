"""The words the store, the review lane and the command line share, defined once.

A bottom-layer module: it imports nothing of salvagelane, so the command line can
offer these values (``--status``) without importing the store.
"""

from __future__ import annotations

from enum import StrEnum


class ReviewStatus(StrEnum):
    """Where a quarantined item stands in review."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"
    """Its run was retried: the retry's report is the one that counts."""
