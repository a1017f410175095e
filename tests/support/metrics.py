"""Scraping a real ``/metrics`` endpoint, and what the database says the metrics must show.

:func:`scrape` fetches the endpoint over HTTP with httpx and parses it with
prometheus_client's own parser; :class:`Scrape` sums its samples by the labels a test
compares. :func:`database_figures` reads the same figures through the store's ordinary
API (runs, attempts, the quarantine), never through the metrics' own queries, so the two
can disagree and a test can fail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from salvagelane.events import EventStream, logged_stream
from salvagelane.runtime.metrics import Metrics
from salvagelane.store import QuarantineFilter, Store
from salvagelane.vocabulary import ReviewStatus


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    text: str
    samples: list[Sample]

    def names(self) -> set[str]:
        return {sample.name for sample in self.samples}

    def by(self, name: str, *labels: str) -> dict[tuple[str, ...], float]:
        """The samples named ``name``, summed by the values of ``labels`` (others summed
        over); series at 0 are left out, as the database leaves out what it has none of."""
        found: Counter[tuple[str, ...]] = Counter()
        for sample in self.samples:
            if sample.name == name:
                found[tuple(sample.labels[label] for label in labels)] += sample.value
        return {key: value for key, value in found.items() if value}

    def total(self, name: str, **labels: str) -> float:
        return sum(
            sample.value
            for sample in self.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )


def scrape(url: str) -> Scrape:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    samples = [
        Sample(name=sample.name, labels=dict(sample.labels), value=sample.value)
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    ]
    return Scrape(text=response.text, samples=samples)


@dataclass(frozen=True)
class DatabaseFigures:
    """What the database holds, as the metrics must show it."""

    runs: dict[tuple[str, str], float]
    pending: dict[tuple[str, str], float]
    tokens: dict[tuple[str, str], float]
    attempts: int
    provider_errors: dict[tuple[str, str], float]
    kept: dict[tuple[str], float]


def database_figures(database_url: str) -> DatabaseFigures:
    with Store.open(database_url) as store:
        runs = store.list_runs(limit=100_000)
        details = [store.get_run(run.id) for run in runs]
        pending = store.quarantine.list_quarantine(
            QuarantineFilter(review_status=ReviewStatus.PENDING)
        )
    kept: Counter[tuple[str]] = Counter()
    for run in runs:
        kept[(run.instruction_id,)] += run.kept_count
    tokens: Counter[tuple[str, str]] = Counter()
    errors: Counter[tuple[str, str]] = Counter()
    attempts = 0
    for detail in details:
        for attempt in detail.attempts:
            attempts += 1
            usage: dict[str, Any] = dict(attempt.usage or {})
            tokens[(detail.instruction_id, "input")] += int(usage.get("prompt_tokens") or 0)
            tokens[(detail.instruction_id, "output")] += int(usage.get("completion_tokens") or 0)
            if attempt.provider_error is not None:
                status = "no_response" if attempt.http_status is None else str(attempt.http_status)
                errors[(detail.instruction_id, status)] += 1
    return DatabaseFigures(
        runs=_nonzero(Counter((run.instruction_id, str(run.status)) for run in runs)),
        pending=_nonzero(Counter((item.instruction_id, item.reason) for item in pending)),
        tokens=_nonzero(tokens),
        attempts=attempts,
        provider_errors=_nonzero(errors),
        kept=_nonzero(kept),
    )


def _nonzero(counts: Counter[Any] | Iterable[Any]) -> dict[Any, float]:
    return {key: float(value) for key, value in dict(counts).items() if value}


def counted_by(metrics: Metrics) -> EventStream:
    """A logged event stream whose events ``metrics`` counts, as ``serve --metrics-port``
    wires it."""
    stream = logged_stream()
    metrics.subscribe(stream)
    return stream
