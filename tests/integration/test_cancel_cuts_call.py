"""Cancel means stop (issue 29.6): a run cancelled while its model call is in flight has
that call cut, instead of waiting for a provider that never answers until the deadline.

The provider is a real HTTP server on 127.0.0.1 that takes the request and never
answers (or streams some text, then stalls); the connector's timeout and deadline are
ten minutes, so only the cut can end the call while the test runs. On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from salvagelane._http import HttpSettings
from salvagelane.connectors import OpenAICompatibleConnector, OpenAICompatibleSettings
from salvagelane.connectors.http import StreamState
from salvagelane.runtime.executor import Executor, RunOutcome
from salvagelane.store import Store
from salvagelane.vocabulary import RunStatus
from tests.support.provider import SSE_HEADERS, Scripted, ScriptedServer, sse_event
from tests.support.run_setup import Project, items, provider, store

__all__ = ["provider", "store"]

LONG = 600.0  # the call's own timeout and deadline: the cut must come first
WAIT = 60.0  # how long the test waits for the run to end before calling it stuck
HALF = '{"summary": "Cut short", "recommendations": [{"rank": 1'
WHOLE = json.dumps({"summary": "Whole", "recommendations": items(1)})


class Watched(OpenAICompatibleConnector):
    """The real connector; it also tells the test when the stream's text has arrived."""

    def __init__(self, *args: Any, text_seen: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._text_seen = text_seen

    def on_event(self, state: StreamState, event: Any, key: str | None) -> None:
        super().on_event(state, event, key)
        if state.has_text:
            self._text_seen.set()


def run_in_thread(
    executor: Executor, project: Project
) -> tuple[threading.Thread, list[RunOutcome]]:
    outcomes: list[RunOutcome] = []
    instruction = project.instruction()
    thread = threading.Thread(target=lambda: outcomes.append(executor.run(instruction)))
    thread.start()
    return thread, outcomes


def executor_for(
    store: Store, client: httpx.Client, provider: ScriptedServer, stop: threading.Event, **kw: Any
) -> Executor:
    text_seen = kw.pop("text_seen", threading.Event())

    def connector_for(instruction: Any) -> OpenAICompatibleConnector:
        return Watched(
            client,
            settings=OpenAICompatibleSettings(
                model="test/model",
                api_key_env=None,
                base_url=provider.base_url,
                http=HttpSettings(timeout_seconds=LONG, deadline_seconds=LONG),
                **kw,
            ),
            text_seen=text_seen,
        )

    return Executor(
        store, connector_for=connector_for, should_stop=stop.is_set, stop_poll_seconds=0.05
    )


def test_a_cancel_cuts_a_call_the_provider_never_answers(
    tmp_path: Path, provider: ScriptedServer, store: Store
) -> None:
    provider.script.append(Scripted(hang=True))
    stop = threading.Event()
    with httpx.Client() as client:
        thread, outcomes = run_in_thread(
            executor_for(store, client, provider, stop), Project.create(tmp_path)
        )
        provider.wait_for_requests(1, timeout=WAIT)
        stop.set()  # as `runs cancel` makes the worker's should_stop answer
        thread.join(WAIT)
        assert not thread.is_alive(), "the cancelled run still waits for the provider"

    (outcome,) = outcomes
    assert outcome.status is RunStatus.CANCELLED
    assert len(provider.requests) == 1  # cut, not retried
    assert provider.requests[0].headers["connection"] == "close"
    detail = store.get_run(outcome.run_id)
    assert detail.status == RunStatus.CANCELLED
    (attempt,) = detail.attempts
    assert attempt.provider_error is not None
    assert "the call was cut: its run was cancelled" in attempt.provider_error
    assert detail.error is not None
    assert "cancelled" in detail.error


def test_a_cancel_cuts_a_stalled_stream_and_keeps_its_text(
    tmp_path: Path, provider: ScriptedServer, store: Store
) -> None:
    chunks = [
        sse_event({"id": "gen-1", "model": "test/model", "choices": [{"delta": {"content": c}}]})
        for c in (HALF[:20], HALF[20:])
    ]
    stalled = threading.Event()
    provider.script.append(
        Scripted(
            headers=SSE_HEADERS,
            chunks=[*chunks, b"data: [DONE]\n\n"],
            stall_after=2,
            on_stall=lambda: (stalled.set(), provider.released.wait()),
        )
    )
    stop, text_seen = threading.Event(), threading.Event()
    with httpx.Client() as client:
        executor = executor_for(store, client, provider, stop, stream=True, text_seen=text_seen)
        thread, outcomes = run_in_thread(executor, Project.create(tmp_path))
        assert text_seen.wait(WAIT)
        # Both events are on the wire; the connector has read the first at least.
        stop.set()
        thread.join(WAIT)
        assert not thread.is_alive(), "the cancelled run still waits for the stream"

    (outcome,) = outcomes
    assert outcome.status is RunStatus.CANCELLED
    detail = store.get_run(outcome.run_id)
    (attempt,) = detail.attempts
    # What arrived before the cut is stored, marked as cut off.
    assert attempt.raw_output is not None
    assert attempt.raw_output
    assert HALF.startswith(attempt.raw_output)
    assert attempt.stream_error is not None
    assert len(provider.requests) == 1


def test_a_run_nobody_cancels_is_not_cut(
    tmp_path: Path, provider: ScriptedServer, store: Store
) -> None:
    provider.script.append(
        Scripted(
            headers=SSE_HEADERS,
            chunks=[
                sse_event(
                    {
                        "id": "gen-1",
                        "model": "test/model",
                        "choices": [
                            {
                                "delta": {"content": WHOLE},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ),
                b"data: [DONE]\n\n",
            ],
        )
    )
    with httpx.Client() as client:
        executor = executor_for(store, client, provider, threading.Event(), stream=True)
        outcome = executor.run(Project.create(tmp_path).instruction())
    assert outcome.status is RunStatus.OK
    (attempt,) = store.get_run(outcome.run_id).attempts
    assert attempt.stream_error is None
    assert attempt.provider_error is None


@pytest.mark.parametrize("when", ["before_the_call", "while_waiting_to_retry"])
def test_a_cut_call_is_never_asked_again(when: str) -> None:
    from salvagelane._http import HttpCaller, cut_error
    from salvagelane.call_cut import CallCut
    from salvagelane.errors import ProviderError

    cut = CallCut()
    calls: list[int] = []

    def attempt(deadline: Any) -> str:
        calls.append(1)
        if when == "while_waiting_to_retry":
            cut.cut()  # cut between this failure and the wait for the next attempt
        raise ProviderError("HTTP 503", status=503, retryable=True)

    if when == "before_the_call":
        cut.cut()
    caller = HttpCaller(httpx.Client(), HttpSettings(max_attempts=5, backoff_seconds=30.0))
    with pytest.raises(ProviderError) as caught:
        caller.run("provider", attempt, cut=cut)
    assert str(caught.value) == str(cut_error("provider"))
    assert not caught.value.retryable
    assert len(calls) == (0 if when == "before_the_call" else 1)
