"""The review page: a Starlette application over one :class:`~salvagelane.store.Store`.

Pages read through the same store methods as the command line (``quarantine list``,
``quarantine show``, ``runs show``, ``health``), and every action goes through the code
the command line uses: :func:`salvagelane.review.approval.approve_quarantined`, the quarantine
lane's reject and bulk reject, :func:`salvagelane.review.capture.capture_run`. So the page
and the command line cannot disagree. Access rules: :mod:`salvagelane.ui.security`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from salvagelane.core.numbering import item_number, place_in_output
from salvagelane.core.reask import follow_up_label
from salvagelane.core.records import Reason
from salvagelane.errors import (
    ConflictError,
    NotFoundError,
    RefusedInputError,
    ReviewStateError,
    SalvagelaneError,
    StoreError,
    UnavailableError,
)
from salvagelane.runtime.budget import priced_healths, today_amounts
from salvagelane.runtime.settings import DEFAULT_QUEUE_STALL_SECONDS
from salvagelane.safe_text import block, line
from salvagelane.store import BulkSelection, QuarantineDetail, QuarantineFilter, Store
from salvagelane.store.health import days_between, health_json
from salvagelane.ui import views
from salvagelane.ui.forms import APPROVE_FORM_BYTES, FORM_BYTES, FormRefused, read_form
from salvagelane.ui.security import (
    COOKIE,
    CSRF_FIELD,
    TOKEN_PARAMETER,
    Access,
    SecurityHeaders,
)
from salvagelane.vocabulary import Clock, ReviewStatus, RunStatus, Trigger, utc_now

PAGE_SIZE = 50
CHART_DAYS = 30
RAW_CONTEXT = 200_000
"""Characters of raw output the item view shows on each side of the span."""
HERE = Path(__file__).resolve().parent


class PageError(Exception):
    """A request the page refuses: ``status`` and a message for the operator."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def status_for(exc: SalvagelaneError) -> int:
    """The HTTP status of a salvagelane error, by what it means (errors.py): the one
    place the page decides it."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, RefusedInputError):
        return 400
    if isinstance(exc, UnavailableError | StoreError):
        return 503
    return 500


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    store: Store
    access: Access
    instructions_dir: Path
    actor: str
    clock: Clock = utc_now


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("salvagelane.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["safe_line"] = line
    env.filters["when"] = views.when
    env.filters["percent"] = views.percent
    env.filters["message"] = views.message_of
    env.filters["pretty"] = views.pretty
    env.filters["safe_block"] = block
    env.filters["snippet"] = views.snippet
    env.filters["item_number"] = item_number
    env.filters["place_in_output"] = place_in_output
    env.filters["budget_amounts"] = today_amounts
    return env


Handler = Callable[[Request, "Page"], Awaitable[Response]]


class Page:
    """What a handler renders with: the settings, the templates, the request's rights."""

    def __init__(self, settings: Settings, env: jinja2.Environment, request: Request) -> None:
        self.settings = settings
        self.env = env
        self.request = request
        self.signed = settings.access.signed(request)
        self.can_change = self.signed is not None

    @property
    def reviewer(self) -> str | None:
        """The named reviewer signed in (``--reviewers``), whose name every change takes."""
        return None if self.signed is None else self.signed.reviewer

    @property
    def store(self) -> Store:
        return self.settings.store

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(
            csrf=self.signed.csrf if self.signed is not None else "",
            can_change=self.can_change,
            csrf_field=CSRF_FIELD,
            actor=self.reviewer or self.settings.actor,
            named=self.reviewer is not None,
            reasons=[r.value for r in Reason],
            statuses=[s.value for s in ReviewStatus],
            **context,
        )
        return HTMLResponse(html, status_code=status)


def create_app(settings: Settings) -> Starlette:
    """The application: pages, actions, the health JSON and the package's static files."""
    env = templates()

    def guarded(handler: Handler, *, changes: bool = False) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            access = settings.access
            page = Page(settings, env, request)
            if not access.host_allowed(request.headers.get("host")):
                return _unread(
                    Response("unexpected Host header", status_code=400, media_type="text/plain")
                )
            given = request.query_params.get(TOKEN_PARAMETER)
            if given is not None and request.method == "GET":
                return _sign_in(request, access, given)
            try:
                if changes:
                    await _take_form(request, access, handler)
                elif not access.may_read(request):
                    raise PageError(
                        403, "this server is not on 127.0.0.1: open the URL with its token"
                    )
                return await handler(request, page)
            except PageError as exc:
                response = page.render("error.html", exc.status, message=exc.message)
            except SalvagelaneError as exc:
                response = page.render("error.html", status_for(exc), message=str(exc))
            if changes and getattr(request.state, "form", None) is None:
                return _unread(response)
            return response

        return endpoint

    routes = [
        Route("/", guarded(queue_page)),
        Route("/items/{item_id:int}", guarded(item_page)),
        Route("/items/{item_id:int}/approve", guarded(approve, changes=True), methods=["POST"]),
        Route("/items/{item_id:int}/reject", guarded(reject, changes=True), methods=["POST"]),
        Route("/items/{item_id:int}/capture", guarded(capture, changes=True), methods=["POST"]),
        Route("/reject-all", guarded(reject_all, changes=True), methods=["POST"]),
        Route("/runs", guarded(runs_page)),
        Route("/runs/{run_id}", guarded(run_page)),
        Route("/evals", guarded(evals_page)),
        Route("/evals/{eval_id}", guarded(eval_page)),
        Route("/health", guarded(health_page)),
        Route("/health.json", guarded(health_data)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return _Application(routes=routes)


class _Application(Starlette):
    """Starlette with :class:`SecurityHeaders` outside its error middleware, so the bare
    500 of an unexpected exception carries the headers too (a user middleware sits
    inside Starlette's ServerErrorMiddleware)."""

    def build_middleware_stack(self) -> Any:
        return SecurityHeaders(super().build_middleware_stack())


async def _take_form(request: Request, access: Access, handler: Handler) -> None:
    """The action's form into ``request.state.form``: the access token first, from the
    headers alone, so a request without it is refused before a byte of its body is read;
    then the body, bounded (:mod:`salvagelane.ui.forms`); then the form's CSRF token."""
    refused = (
        "refused: a change needs the access token (open the URL `salvagelane ui` printed) "
        "and a form of this page"
    )
    if not access.holds_token(request):
        raise PageError(403, refused)
    cap = APPROVE_FORM_BYTES if handler is approve else FORM_BYTES
    try:
        form = await read_form(request, cap)
    except FormRefused as exc:
        raise PageError(exc.status, exc.message) from exc
    if not access.may_change(request, _field(form, CSRF_FIELD)):
        raise PageError(403, refused)
    request.state.form = form


def _unread(response: Response) -> Response:
    """``response`` to a request whose body was not read: the connection closes after
    it, so the client cannot go on sending the body (nor the server reading it)."""
    response.headers["connection"] = "close"
    return response


def _sign_in(request: Request, access: Access, given: str) -> Response:
    """``?token=...``: set the cookie and go to the same page without the token in the
    address bar (nor in its history)."""
    if access.signed_with(given) is None:
        return Response("wrong token", status_code=403, media_type="text/plain")
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAMETER]
    target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/")
    return response


def _field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


# --- filters ----------------------------------------------------------------------------------


def _since(text: str) -> datetime:
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=UTC)
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise PageError(400, f"since: expected a date such as 2026-11-21, got {text!r}") from exc
    if moment.tzinfo is None:
        raise PageError(400, f"since: expected a timestamp with a zone, got {text!r}")
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        # 0001-01-01T00:00:00+14:00 is before the first UTC moment a datetime holds.
        raise PageError(
            400, f"since: expected a moment from year 1 to 9999 in UTC, got {text!r}"
        ) from exc


def filter_of(values: Mapping[str, str]) -> QuarantineFilter:
    """The queue's filter from query or form values, as ``quarantine list`` takes it."""
    reason = values.get("reason") or None
    if reason is not None and reason not in {r.value for r in Reason}:
        raise PageError(400, f"reason: expected one of {', '.join(r.value for r in Reason)}")
    status = values.get("status") or None
    if status is not None and status not in {s.value for s in ReviewStatus}:
        raise PageError(400, f"status: expected one of {', '.join(s.value for s in ReviewStatus)}")
    since = values.get("since") or None
    return QuarantineFilter(
        instruction_id=values.get("instruction") or None,
        reason=reason,
        review_status=None if status is None else ReviewStatus(status),
        since=None if since is None else _since(since),
    )


def query_of(where: QuarantineFilter, **extra: Any) -> str:
    """The query string that selects ``where`` again (links keep the filter)."""
    pairs = {
        "instruction": where.instruction_id,
        "reason": where.reason,
        "status": None if where.review_status is None else str(where.review_status),
        "since": None
        if where.since is None
        else where.since.date().isoformat()
        if where.since.time() == datetime.min.time()
        else where.since.isoformat(),
        **extra,
    }
    return urlencode({k: v for k, v in pairs.items() if v is not None})


def _page_number(text: str | None, name: str = "page") -> int:
    try:
        number = int(text or "1")
    except ValueError as exc:
        raise PageError(400, f"{name}: expected a number, got {text!r}") from exc
    if not 1 <= number <= 100_000:
        raise PageError(400, f"{name}: expected a number from 1 to 100000, got {number}")
    return number


# --- pages ------------------------------------------------------------------------------------


async def queue_page(request: Request, page: Page) -> Response:
    where = filter_of(request.query_params)
    number = _page_number(request.query_params.get("page"))
    paged = replace(where, limit=PAGE_SIZE + 1, offset=(number - 1) * PAGE_SIZE)
    store = page.store
    now = page.settings.clock()
    chart_since = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    chart_since -= timedelta(days=CHART_DAYS - 1)
    if where.since is not None and where.since > chart_since:
        chart_since = where.since

    def read() -> dict[str, Any]:
        known = store.instruction_ids()
        if where.instruction_id is not None and where.instruction_id not in known:
            # As `quarantine list` refuses it: a typo must not read as "nothing held".
            raise PageError(
                400,
                f"instruction: no stored run has instruction {where.instruction_id!r}; "
                f"expected one of {', '.join(known) or '(no runs stored yet)'}",
            )
        items = store.quarantine.list_quarantine(paged)
        # One grouped read gives both the counts by reason (of the filter but its reason,
        # so another reason is one click away) and the chart (of the whole filter).
        per_day = store.health.quarantined_by_day(
            instruction_id=where.instruction_id,
            review_status=where.review_status,
            since=where.since,
        )
        counts: dict[str, int] = {}
        for reasons in per_day.values():
            for reason, count in reasons.items():
                counts[reason] = counts.get(reason, 0) + count
        shown = {
            day: {r: n for r, n in reasons.items() if where.reason in (None, r)}
            for day, reasons in per_day.items()
        }
        return {
            "items": items[:PAGE_SIZE],
            "more": len(items) > PAGE_SIZE,
            "counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            "day_chart": views.stacked(days_between(chart_since, now), shown),
            "instructions": known,
        }

    data = await run_in_threadpool(read)
    done = request.query_params.get("done")
    rejected = request.query_params.get("rejected") or ""
    pending_left = None
    if done is not None:
        pending_left = (await run_in_threadpool(left_in, store, where))[0]
    return page.render(
        "queue.html",
        done=done,
        done_of=_done_of(request),
        pending_left=pending_left,
        bulk_rejected=int(rejected)
        if rejected.isascii() and rejected.isdigit() and len(rejected) < 19
        else None,
        described=views.describe_filter(where.instruction_id, where.reason, where.since),
        where=where,
        page=number,
        query=query_of(where),
        query_without_reason=query_of(replace(where, reason=None)),
        query_of=query_of,
        total=sum(data["counts"].values())
        if where.reason is None
        else data["counts"].get(where.reason, 0),
        **data,
    )


async def item_page(request: Request, page: Page, **extra: Any) -> Response:
    item_id = int(request.path_params["item_id"])
    where = filter_of(request.query_params)
    store = page.store

    editing = page.can_change

    def read() -> tuple[QuarantineDetail, tuple[int | None, int | None], tuple[int, int]]:
        detail = store.quarantine.get_quarantine(item_id, context_chars=RAW_CONTEXT)
        return detail, store.quarantine.neighbours(where, item_id), left_in(store, where)

    detail, (newer, older), (left, of_total) = await run_in_threadpool(read)
    schema: tuple[list[views.FieldHint] | None, str | None] = (None, None)
    if editing and detail.review_status == ReviewStatus.PENDING:
        schema = await run_in_threadpool(item_schema_fields, store, detail)
    lines = None
    shown_from = 0
    if detail.raw_span is not None:
        before = detail.raw_before or ""
        shown_from = (detail.span_start or 0) - len(before)
        lines = views.raw_lines(before, detail.raw_span, detail.raw_after or "")
    if "corrected" not in extra:
        if detail.repaired is not None:
            extra["corrected"] = json.dumps(detail.repaired, indent=2, ensure_ascii=False)
        else:
            extra["corrected"] = detail.raw_span or detail.snippet or ""
    return page.render(
        "item.html",
        extra.pop("status", 200),
        item=detail,
        where=where,
        lines=lines,
        shown_from=shown_from,
        query=query_of(where),
        newer=newer,
        older=older,
        done=request.query_params.get("done"),
        done_of=_done_of(request),
        left=left,
        of_total=of_total,
        schema_fields=schema[0],
        schema_note=schema[1],
        refusal=extra.pop("refusal", None),
        **extra,
    )


def _done_of(request: Request) -> int | None:
    """The id of the item an approval or a rejection was about (``of=``), if a number."""
    text = request.query_params.get("of") or ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


def item_schema_fields(
    store: Store, detail: QuarantineDetail
) -> tuple[list[views.FieldHint] | None, str | None]:
    """The item schema's fields for the correction editor, from the definition the
    item's run was made with as the store kept it (what an approval checks against by
    default); or None and why not."""
    from salvagelane.definitions.loading import load_stored
    from salvagelane.review.run_definitions import snapshot_of

    record = store.get_definition(detail.run_id)
    if record is None:
        return None, "the run was stored before salvagelane kept definitions: no item schema"
    try:
        instruction = load_stored(snapshot_of(record, where=f"run {detail.run_id[:8]}"))
    except SalvagelaneError as exc:
        return None, f"the run's stored definition cannot be loaded: {line(str(exc))}"
    return views.schema_fields(instruction.output.item_schema.schema), None


async def run_page(request: Request, page: Page) -> Response:
    run_id = str(request.path_params["run_id"])
    store = page.store

    def read() -> tuple[Any, Any]:
        detail = store.get_run(run_id)
        payload = store.get_report_payload(detail.id) if detail.report is not None else None
        return detail, payload

    detail, payload = await run_in_threadpool(read)
    held = [q for q in detail.quarantined if q.review_status in ("pending", "rejected")]
    mended = [q for q in detail.quarantined if q.review_status == ReviewStatus.REASKED]
    items = [] if detail.report is None else sorted(detail.report.items, key=lambda i: i.position)
    return page.render(
        "run.html",
        run=detail,
        payload=payload,
        held=held,
        mended=mended,
        report_items=items,
        follow_ups={a.number: follow_up_label(a.request) for a in detail.attempts},
    )


RUN_STATUSES = [s.value for s in RunStatus]
TRIGGERS = [t.value for t in Trigger]


async def runs_page(request: Request, page: Page) -> Response:
    """The stored runs, newest first, with filters and each instruction's status strip."""
    params = request.query_params
    instruction = params.get("instruction") or None
    ended = params.get("status") or None
    trigger = params.get("trigger") or None
    since_text = params.get("since") or None
    since = None if since_text is None else _since(since_text)
    if ended is not None and ended not in RUN_STATUSES:
        raise PageError(400, f"status: expected one of {', '.join(RUN_STATUSES)}, got {ended!r}")
    if trigger is not None and trigger not in TRIGGERS:
        raise PageError(400, f"trigger: expected one of {', '.join(TRIGGERS)}, got {trigger!r}")
    number = _page_number(params.get("page"))
    store = page.store

    def read() -> dict[str, Any]:
        known = store.instruction_ids()
        if instruction is not None and instruction not in known:
            raise PageError(
                400,
                f"instruction: no stored run has instruction {instruction!r}; "
                f"expected one of {', '.join(known) or '(no runs stored yet)'}",
            )
        runs = store.list_runs(
            instruction_id=instruction,
            ended=None if ended is None else RunStatus(ended),
            trigger=None if trigger is None else Trigger(trigger),
            since=since,
            limit=PAGE_SIZE + 1,
            offset=(number - 1) * PAGE_SIZE,
        )
        healths = store.health.healths(
            [instruction] if instruction else known,
            now=page.settings.clock(),
            days=1,
            queue_stall_seconds=DEFAULT_QUEUE_STALL_SECONDS,
        )
        return {"runs": runs[:PAGE_SIZE], "more": len(runs) > PAGE_SIZE, "known": known,
                "healths": healths}  # fmt: skip

    data = await run_in_threadpool(read)
    chosen = {"instruction": instruction, "status": ended, "trigger": trigger, "since": since_text}
    query = urlencode({k: v for k, v in chosen.items() if v})
    return page.render(
        "runs.html",
        **data,
        page=number,
        chosen=chosen,
        query=query,
        run_statuses=RUN_STATUSES,
        triggers=TRIGGERS,
    )


async def evals_page(request: Request, page: Page) -> Response:
    """The stored evaluations (``salvagelane eval``), newest first."""
    evals = await run_in_threadpool(page.store.evals.list)
    return page.render("evals.html", evals=evals)


async def eval_page(request: Request, page: Page) -> Response:
    """One evaluation, baseline and candidate side by side."""
    eval_id = str(request.path_params["eval_id"])
    detail = await run_in_threadpool(page.store.evals.get, eval_id)
    return page.render("eval.html", evaluation=detail)


def _health(page: Page, request: Request) -> list[Any]:
    instruction = request.query_params.get("instruction") or None
    days = _page_number(request.query_params.get("days") or "30", "days")
    store = page.store
    now = page.settings.clock()
    ids = [instruction] if instruction else store.instruction_ids()
    if instruction and instruction not in store.instruction_ids():
        raise PageError(404, f"no stored run has instruction {instruction!r}")
    # The same stall time as `salvagelane health`, so both say the same.
    figures = store.health.healths(
        ids, now=now, days=days, queue_stall_seconds=DEFAULT_QUEUE_STALL_SECONDS
    )
    # Cost beside tokens, by the price table the newest stored definition kept.
    return priced_healths(store, figures, now=now)


async def health_page(request: Request, page: Page) -> Response:
    figures = await run_in_threadpool(_health, page, request)
    panels = []
    for health in figures:
        days = days_between(health.since, health.until)
        tokens = {
            day: {"prompt": usage.prompt, "completion": usage.completion}
            for day, usage in health.tokens_by_day.items()
        }
        panels.append(
            {
                "health": health,
                "quarantine_chart": views.stacked(days, health.quarantined_by_day),
                "token_chart": views.stacked(days, tokens),
            }
        )
    return page.render("health.html", panels=panels)


async def health_data(request: Request, page: Page) -> Response:
    figures = await run_in_threadpool(_health, page, request)
    return JSONResponse([health_json(h) for h in figures])


# --- actions ----------------------------------------------------------------------------------


def _form(request: Request) -> FormData:
    form: FormData = request.state.form
    return form


def _reviewer(page: Page, form: FormData) -> str:
    """The actor of a change: the named reviewer signed in (no other name then), else
    the form's reviewer name, else ``--by`` (the login name)."""
    if page.reviewer is not None:
        return page.reviewer
    return (_field(form, "by") or "").strip() or page.settings.actor


async def approve(request: Request, page: Page) -> Response:
    from salvagelane.review.approval import Refused, approve_quarantined, read_bounded

    item_id = int(request.path_params["item_id"])
    form = _form(request)
    corrected = _field(form, "corrected") or ""
    note = (_field(form, "note") or "").strip() or None
    use_current = _field(form, "use_current") == "yes"
    settings = page.settings

    def act() -> Any:
        return approve_quarantined(
            settings.store,
            item_id,
            read_corrected=lambda detail, cap: read_bounded(
                io.BytesIO(corrected.encode("utf-8", "surrogatepass")), cap
            ),
            instructions_dir=settings.instructions_dir,
            use_current=use_current,
            actor=_reviewer(page, form),
            note=note,
            clock=settings.clock,
        )

    try:
        verdict = await run_in_threadpool(act)
    except (NotFoundError, ConflictError, UnavailableError, StoreError):
        raise
    except SalvagelaneError as exc:
        # The definition cannot be used (changed, missing): the operator reads why.
        return await item_page(request, page, corrected=corrected, problem=str(exc), status=422)
    if isinstance(verdict, Refused):
        return await item_page(request, page, corrected=corrected, refusal=verdict, status=422)
    return await _to_next_pending(page, item_id, form, "approved")


async def reject(request: Request, page: Page) -> Response:
    from salvagelane.review.approval import reject_quarantined

    item_id = int(request.path_params["item_id"])
    form = _form(request)
    note = (_field(form, "note") or "").strip()
    if not note:
        raise PageError(400, "reject: say why the item is rejected (the note is empty)")
    store, clock = page.store, page.settings.clock
    await run_in_threadpool(
        lambda: reject_quarantined(
            store, item_id, actor=_reviewer(page, form), note=note, now=clock()
        )
    )
    return await _to_next_pending(page, item_id, form, "rejected")


async def capture(request: Request, page: Page) -> Response:
    from salvagelane.review.capture import capture_run

    item_id = int(request.path_params["item_id"])
    form = _form(request)
    directory = (_field(form, "directory") or "").strip()
    if not directory:
        raise PageError(400, "capture: name the directory to write the fixture into")
    store = page.store

    def act() -> Any:
        held = store.quarantine.get_quarantine(item_id, context_chars=0)
        return capture_run(store, held.run_id, held.attempt_number, Path(directory))

    try:
        captured = await run_in_threadpool(act)
    except (NotFoundError, ConflictError, UnavailableError, StoreError):
        raise
    except SalvagelaneError as exc:
        raise PageError(409, f"capture: {exc}") from exc
    return _back_to_item(item_id, form, f"captured to {captured.path}")


async def reject_all(request: Request, page: Page) -> Response:
    from salvagelane.review.approval import reject_matching

    form = _form(request)
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    where = filter_of(values)
    if where.review_status not in (None, ReviewStatus.PENDING):
        raise PageError(400, "bulk reject takes pending items: clear the status filter")
    pending = replace(where, review_status=ReviewStatus.PENDING)
    note = (values.get("note") or "").strip()
    if not note:
        raise PageError(400, "bulk reject: say why the items are rejected (the note is empty)")
    store, clock = page.store, page.settings.clock
    confirmed = _confirmed(values)

    async def ask(status: int = 200, changed: str | None = None) -> Response:
        shown = await run_in_threadpool(store.quarantine.bulk_selection, pending)
        return page.render(
            "confirm.html",
            status,
            where=where,
            selection=shown,
            note=note,
            changed=changed,
            query=query_of(where),
        )

    if confirmed is None:
        return await ask()
    try:
        # Only the confirmed items: one quarantined since stays pending.
        rejected = await run_in_threadpool(
            lambda: reject_matching(
                store,
                pending,
                actor=_reviewer(page, form),
                note=note,
                now=clock(),
                confirmed=confirmed,
            )
        )
    except ReviewStateError as exc:
        return await ask(status_for(exc), changed=str(exc))
    # The queue says what was done, with the filter (the banner of queue.html).
    return RedirectResponse(f"/?{query_of(where, rejected=len(rejected))}", 303)


def _confirmed(values: Mapping[str, str]) -> BulkSelection | None:
    """What the confirmation form showed (its count, highest id and digest), or None
    when the form is not a confirmation (then the page asks first)."""
    count, through, digest = (values.get(k) for k in ("confirmed", "through", "digest"))
    if count is None or through is None or digest is None:
        return None
    if not (count.isascii() and count.isdigit() and through.isascii() and through.isdigit()):
        raise PageError(400, "bulk reject: the confirmation's count and highest id are numbers")
    if len(count) > 19 or len(through) > 19:
        raise PageError(400, "bulk reject: the confirmation's count or highest id is too large")
    return BulkSelection(through_id=int(through), count=int(count), digest=digest)


async def _to_next_pending(page: Page, item_id: int, form: FormData, done: str) -> Response:
    """After an approval or a rejection: the next pending item of the same filter (the
    next older one, else the newest left), saying what was done to ``item_id``; the
    queue, saying it is empty, when none is left."""
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    where = filter_of(values)
    store = page.store
    following = await run_in_threadpool(next_pending, store, where, item_id)
    query = query_of(where, done=done, of=item_id)
    if following is None:
        return RedirectResponse(f"/?{query}", status_code=303)
    return RedirectResponse(f"/items/{following}?{query}", status_code=303)


def next_pending(store: Store, where: QuarantineFilter, item_id: int) -> int | None:
    """The pending item of ``where`` (its status ignored) to review after ``item_id``:
    the next older one, else the newest; None when none is pending."""
    pending = replace(where, review_status=ReviewStatus.PENDING, limit=None, offset=0)
    _, older = store.quarantine.neighbours(pending, item_id)
    if older is not None:
        return older
    newest = store.quarantine.list_quarantine(replace(pending, limit=1))
    return newest[0].id if newest else None


def left_in(store: Store, where: QuarantineFilter) -> tuple[int, int]:
    """How many items of ``where`` (its status ignored) are pending, of how many in the
    lane (every status but superseded and reasked): "3 of 12 left"."""
    every = replace(where, review_status=None, limit=None, offset=0)
    pending = replace(every, review_status=ReviewStatus.PENDING)
    counted = [sum(store.quarantine.count_by_reason(w).values()) for w in (pending, every)]
    return counted[0], counted[1]


def _back_to_item(item_id: int, form: FormData, done: str) -> Response:
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    where = filter_of(values)
    return RedirectResponse(f"/items/{item_id}?{query_of(where, done=done)}", status_code=303)
